from bayesx.cli.commands import main

raise SystemExit(main())
