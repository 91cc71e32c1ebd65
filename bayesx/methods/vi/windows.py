"""The stepped ``elbo`` metric of the iterative approximations: per-step estimates averaged over
windows of ``check_every`` steps, with the seconds into the fit at each window's end (for time to a
given ELBO)."""

from __future__ import annotations

import time

from bayesx.result import Outcome


class ElboWindows:
    def __init__(self, check_every: int):
        self.check_every, self.window, self.trace, self.clock = check_every, [], [], []
        self.started = time.perf_counter()

    def add(self, step: int, value: float) -> bool:
        """Record one step's estimate; True when it closed a window (``last`` is then its mean)."""
        self.window.append(value)
        if step % self.check_every:
            return False
        self.trace.append((step, sum(self.window) / len(self.window)))
        self.clock.append((step, time.perf_counter() - self.started))
        self.window = []
        return True

    @property
    def last(self) -> float:
        return self.trace[-1][1]

    def record(self, out: Outcome) -> None:
        out.traces["elbo"] = self.trace
        out.traces["fit_elapsed_s"] = self.clock
