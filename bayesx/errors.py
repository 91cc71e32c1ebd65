"""User-facing errors, and the exit statuses of the ``bayesx`` command.

Every problem a user can fix (bad configuration, missing data, invalid values) is raised as a
:class:`BayesxError` whose message is one line naming the problem and the fix. The command-line
front end prints it as ``bayesx: error: <message>`` without a traceback, and exits with

    EXIT_OK           0    every run finished (for run); the command did what it was asked (the others)
    EXIT_RUN_FAILED   1    a run was recorded and did not finish (FAILED), or a job of a sweep failed
    EXIT_BAD_INPUT    2    the command was refused before anything was recorded (bad options or overrides,
                           unknown names, a store that cannot be used, missing data)
    EXIT_INTERRUPTED  130  Ctrl-C or SIGTERM: the run is recorded KILLED with what it had (FINISHED where the
                           signal came after its method had finished: it records all it made, then stops)
"""

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

EXIT_CODES_HELP = ("exit status: 0 every run finished (or the command did its work), 1 a run failed "
                   "(recorded FAILED) or a job of a sweep did, 2 bad input (refused before anything was recorded; "
                   "one line `bayesx: error: ...` on standard error), 130 interrupted (the run is recorded KILLED, "
                   "or FINISHED where its method had finished)")
"""The exit statuses in one paragraph, as ``bayesx --help`` and ``bayesx run --json``'s help show them."""


def fail(message: str) -> None:
    """Refuse the command: ``bayesx: error: <message>`` on standard error, exit status EXIT_BAD_INPUT (where a
    BayesxError cannot travel up to the command, e.g. out of a Hydra callback, which would only warn of it)."""
    import sys

    print(f"bayesx: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


class BayesxError(Exception):
    """A problem with the user's input, stated in one line with the fix."""


class DensityError(BayesxError):
    """The model's log density failed while a run was under way (the user's function raised, say).

    A method stops at it with what it had (the draws or the fit so far), and the run ends FAILED with
    this one line; before a run starts it is an ordinary bad-input error."""


class RecordedFailure(BayesxError):
    """A run was recorded FAILED before the error reached the command (the reference posterior's own run, made
    before the run that asked for it opens): the command exits EXIT_RUN_FAILED, not EXIT_BAD_INPUT."""


class RunInterrupted(BaseException):
    """Raised inside a run when the user pressed Ctrl-C or the process got SIGTERM.

    It derives from BaseException (like KeyboardInterrupt) so that generic ``except Exception``
    blocks in library code do not swallow it.
    """


class InterruptKept(RunInterrupted):
    """An interrupt whose message says what the run kept; the command prints it as it is (``bayesx: interrupted;
    <message>``) instead of its usual 'the run is marked KILLED'."""
