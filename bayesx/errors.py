"""User-facing errors.

Every problem a user can fix (bad configuration, missing data, invalid values) is raised as a
:class:`BayesxError` whose message is one line naming the problem and the fix. The command-line
front end prints it as ``bayesx: error: <message>`` and exits with status 2, without a traceback.
"""


class BayesxError(Exception):
    """A problem with the user's input, stated in one line with the fix."""


class RunInterrupted(BaseException):
    """Raised inside a run when the user pressed Ctrl-C or the process got SIGTERM.

    It derives from BaseException (like KeyboardInterrupt) so that generic ``except Exception``
    blocks in library code do not swallow it.
    """
