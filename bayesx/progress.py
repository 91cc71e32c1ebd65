"""Progress bars: one place that decides when a bar shows (``progress``: true, false, or null for
"only on a terminal", tqdm's own rule) so every method shows its long work the same way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from tqdm.auto import tqdm

from bayesx.errors import RunInterrupted


def progress_bar(total: int | None, desc: str, progress: bool | None, unit: str = "it") -> tqdm:
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
