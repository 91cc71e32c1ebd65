"""The command line: argument parsing and commands, Hydra's config and sweeps, launchers, the GPU check."""


def __getattr__(name: str):
    """``main`` of this package: console scripts installed while the command line was one module (entry point
    ``main`` of the module that is now ``commands``) still start until bayesx is installed again."""
    if name == "main":
        from bayesx.cli.commands import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
