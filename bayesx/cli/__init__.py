"""The command line: argument parsing and commands, Hydra's config and sweeps, launchers, the GPU check."""
