from bayesx.cli import main

raise SystemExit(main())
