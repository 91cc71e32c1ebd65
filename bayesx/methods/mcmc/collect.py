"""The sampling stage's record keepers, apart from the loop that moves the chains: the kept draws (thinned, with
their per-draw statistics), the checkpoint that saves them as they gather, and the clock that splits the stage's
time between sampling and warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from bayesx.store.checkpoint import Resume, RunCheckpoint
from bayesx.diagnostics import convergence
from bayesx.methods.mcmc.run_length import Convergence


class KeptDraws:
    """Every ``thin``-th state's position (each (chains, dim), on the CPU) and its transition's statistics (name ->
    one (chains,) array per draw), from sampling iteration 0 on; a resumed run starts with the draws it had."""

    def __init__(self, thin: int, start: Resume | None = None):
        self.thin = thin
        self.positions: list[torch.Tensor] = []
        self.stats: dict[str, list[np.ndarray]] = {}
        if start is not None:
            self.positions = [torch.as_tensor(start.draws[:, i]) for i in range(start.draws.shape[1])]
            self.stats = {k: [v[:, i] for i in range(v.shape[1])] for k, v in start.stats.items()}

    def __len__(self) -> int:
        return len(self.positions)

    def keeps(self, iteration: int) -> bool:
        """Whether sampling iteration ``iteration`` (from 0) is kept."""
        return iteration % self.thin == 0

    def add(self, position: torch.Tensor, info) -> None:
        """Keep one draw. A Ctrl-C can land between the appends (a KeyboardInterrupt comes between any two
        bytecodes), so everything is converted first and :meth:`_trim` drops a draw kept only in part."""
        kept = position.detach().to("cpu")
        stats = {name: value.detach().to("cpu").numpy() for name, value in info._asdict().items()
                 if name != "faults"}  # where the density failed: bayesx.methods.mcmc.health's, not a statistic
        self.positions.append(kept)
        for name, value in stats.items():
            self.stats.setdefault(name, []).append(value)

    def _trim(self) -> None:
        """Cut the positions and every statistic to the draws kept whole (an interrupted :meth:`add` can leave
        one list a draw longer than the others)."""
        n = min([len(self.positions), *(len(v) for v in self.stats.values())])
        self.positions = self.positions[:n]
        self.stats = {name: values[:n] for name, values in self.stats.items()}

    def drop(self) -> None:
        """Forget every draw (a divergence probe whose draws are not used)."""
        self.positions, self.stats = [], {}

    def total(self, name: str) -> int:
        """The sum of statistic ``name`` over the kept draws and chains."""
        return int(np.sum(self.stats[name])) if name in self.stats else 0

    def convergence(self) -> Convergence:
        """The worst coordinate's split R-hat (with two chains or more) and bulk ESS (ArviZ), for the run's length."""
        self._trim()
        draws = torch.stack(self.positions, dim=1).numpy()
        rhat = None
        if draws.shape[0] >= 2:
            rhat = float(np.nanmax(convergence.rhat_per_coordinate(draws), initial=-np.inf))
        ess = float(np.nanmin(convergence.ess_per_coordinate(draws, "bulk"), initial=np.inf))
        return Convergence(draws.shape[1], rhat, ess)

    def draws(self) -> torch.Tensor | None:
        """(chains, draws, dim), or None without draws."""
        self._trim()
        return torch.stack(self.positions, dim=1) if self.positions else None

    def sample_stats(self) -> dict[str, np.ndarray]:
        """name -> (chains, draws)."""
        self._trim()
        return {name: np.stack(values, axis=1) for name, values in self.stats.items()} if self.positions else {}


class SamplingCheckpoint:
    """Saves the kept draws through a run's :class:`~bayesx.store.checkpoint.RunCheckpoint` (none: nothing is saved), with
    the sampler's state after the last one (``state()``), as they gather; the draws a resumed run started with
    count as saved."""

    def __init__(self, checkpoint: RunCheckpoint | None, kept: KeptDraws):
        self.checkpoint = checkpoint
        if checkpoint is not None:
            checkpoint.saved = len(kept)

    def update(self, kept: KeptDraws, state: Callable[[], dict]) -> None:
        if self.checkpoint is not None:
            self.checkpoint.update(kept.positions, kept.stats, state)


class SamplingClock:
    """The sampling stage's time: a resumed run's sampling before it was killed (``earlier``) and this process's
    since the last re-tune; a re-tune and the probe it drops are warm-up (added to ``warmup["warmup_time_s"]``)."""

    def __init__(self, earlier: float, warmup: dict):
        self.earlier, self.warmup, self.start = earlier, warmup, time.perf_counter()

    def retuned(self) -> None:
        """The time since the last start was warm-up: a dropped probe and its re-tune."""
        self.warmup["warmup_time_s"] += time.perf_counter() - self.start
        self.start = time.perf_counter()

    def sampling_s(self) -> float:
        return self.earlier + time.perf_counter() - self.start
