"""User-facing errors.

Every problem a user can fix (bad configuration, missing data, invalid values) is raised as a
:class:`BayesxError` whose message is one line naming the problem and the fix. The command-line
front end prints it as ``bayesx: error: <message>`` and exits with status 2, without a traceback.
"""


class BayesxError(Exception):
    """A problem with the user's input, stated in one line with the fix."""


class DensityError(BayesxError):
    """The model's log density failed while a run was under way (the user's function raised, say).

    A method stops at it with what it had (the draws or the fit so far), and the run ends FAILED with
    this one line; before a run starts it is an ordinary bad-input error."""


class RunInterrupted(BaseException):
    """Raised inside a run when the user pressed Ctrl-C or the process got SIGTERM.

    It derives from BaseException (like KeyboardInterrupt) so that generic ``except Exception``
    blocks in library code do not swallow it.
    """
