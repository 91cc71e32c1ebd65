"""Progress: one place that decides how a method shows its long work (``progress``: true, false, or null for
"as suits standard error"), so every method shows it the same way.

On a terminal (or with ``progress=true``) a tqdm bar redrawn in place. Where standard error is not a terminal (a
redirected run, a batch job's log, a sweep's job on a cluster) and ``progress`` is null, a redrawn bar would be
one endless line or nothing at all, so :class:`ProgressLines` writes a plain line every :data:`INTERVAL_S` seconds
of a long loop instead (what, how far, elapsed and remaining time, the loop's own figures): a 14-minute run is
then not silent, and a run shorter than the interval prints none. ``$BAYESX_PROGRESS_INTERVAL_S`` changes the
interval (tests use a fraction of a second). ``progress=false`` shows nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable

from tqdm import tqdm as plain_tqdm
from tqdm.auto import tqdm

from bayesx.errors import RunInterrupted

INTERVAL_S = 10.0
INTERVAL_ENV = "BAYESX_PROGRESS_INTERVAL_S"
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%), {elapsed} elapsed, {remaining} to go{postfix}"
OPEN_FORMAT = "{desc}: {n_fmt}, {elapsed} elapsed{postfix}"  # a loop of unknown length (SMC's stages)


class ProgressLines(plain_tqdm):
    """A tqdm bar that writes whole lines, at most one every ``interval_s`` seconds of its clock (``clock``, the
    wall clock by default; a test passes its own), and one last line when it closes if it wrote any. Everything
    else (update, set_postfix, set_description, total) is tqdm's."""

    def __init__(self, *args, interval_s: float, clock: Callable[[], float] = time.time, **kwargs):
        self._interval_s, self._last_line, self._lines = interval_s, None, 0
        kwargs.setdefault("file", sys.stderr)
        bar_format = LINE_FORMAT if kwargs.get("total") else OPEN_FORMAT
        super().__init__(*args, mininterval=interval_s, miniters=1, bar_format=bar_format, **kwargs)
        self._time = clock  # tqdm's own clock: elapsed time, rates and the interval are read from it
        self.start_t = self.last_print_t = self._last_line = clock()

    def display(self, msg=None, pos=None):
        """Write the bar's state as one line if ``interval_s`` has passed since the last; on closing (``msg`` "")
        the final state, where a line was written before."""
        if self._last_line is None:  # tqdm's first display, from its constructor: nothing has happened yet
            return False
        now = self._time()
        closing = msg == ""
        if closing and not self._lines or not closing and now - self._last_line < self._interval_s:
            return False
        self.fp.write(self.__str__() + ("" if not closing else ", done") + "\n")
        self.fp.flush()
        self._last_line, self._lines = now, self._lines + 1
        return False  # nothing of tqdm's to clear


def interval_s() -> float:
    """Seconds between progress lines: ``$BAYESX_PROGRESS_INTERVAL_S``, else :data:`INTERVAL_S`."""
    try:
        return max(float(os.environ.get(INTERVAL_ENV, INTERVAL_S)), 0.0)
    except ValueError:
        return INTERVAL_S


def progress_bar(total: int | None, desc: str, progress: bool | None, unit: str = "it"):
    """The bar of a loop of ``total`` steps (module docstring: a bar, lines, or nothing)."""
    if progress is None and not sys.stderr.isatty():
        return ProgressLines(total=total, desc=desc, unit=unit, leave=False, interval_s=interval_s())
    return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None if progress is None else not progress)


class ChainProgress:
    """The bar of an MCMC run: one tick per iteration, the step size, acceptance and divergences
    of the batch of chains every 25 iterations."""

    def __init__(self, total: int, name: str, progress: bool | None):
        self.name = name
        self.bar = progress_bar(total, f"{name} warmup", progress)

    def stage(self, stage: str) -> None:
        self.bar.set_description(f"{self.name} {stage}")

    def tick(self, info, step_size: float, it: int) -> None:
        self.bar.update(1)
        if it % 25 == 0 and not self.bar.disable:
            self.bar.set_postfix(step=f"{step_size:.3g}", accept=f"{float(info.accept_prob.mean()):.2f}",
                                 div=int(info.divergent.sum()))

    def extend(self, iterations: int) -> None:
        """More iterations than the bar was built for (a sampler that draws on until its chains agree)."""
        self.bar.total = (self.bar.total or 0) + iterations
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def interruptible(out, bar, where: Callable[[], str]):
    """Run a fit's loop: Ctrl-C or SIGTERM inside marks the fit's own output ``out`` (a
    bayesx.result.Outcome) interrupted, with ``where()`` (e.g. "fit (step 120)") as its
    ``stopped_during`` tag, and keeps what the loop has; the bar always closes."""
    try:
        yield
    except (KeyboardInterrupt, RunInterrupted):
        out.interrupted = True
        out.tags["stopped_during"] = where()
    finally:
        bar.close()
