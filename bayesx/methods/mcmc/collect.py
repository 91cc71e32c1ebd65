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
    """Every ``thin``-th state's position and its transition's statistics, from sampling iteration 0 on, in
    buffers allocated once for the draws a stage plans (:meth:`reserve`): positions (chains, capacity, dim) on the
    CPU, each statistic (chains, capacity). ``n`` counts the draws kept whole; a resumed run starts with the draws
    it had.

    One buffer per quantity, not a list of per-draw tensors: a thousand 240 kB pieces fragment the heap, so the
    memory a run held moved with the allocator's history (a run keeping 240 MB of draws peaked 0.52-0.82 GB
    beyond its process's start from lists, 0.46 GB every time from one buffer), and an add is atomic: it writes
    row ``n`` of every buffer and only then counts it, so a Ctrl-C landing inside an add leaves ``n`` draws that
    all agree."""

    def __init__(self, thin: int, start: Resume | None = None):
        self.thin = thin
        self.n = 0
        self._planned = 0  # the capacity the first add allocates (reserve's, before the first draw)
        self._positions: torch.Tensor | None = None
        self._stats: dict[str, np.ndarray] = {}
        if start is not None and start.draws.shape[1]:
            self._positions = torch.as_tensor(start.draws).clone()
            self._stats = {name: np.array(values) for name, values in start.stats.items()}
            self.n = start.draws.shape[1]

    def __len__(self) -> int:
        return self.n

    @property
    def n_chains(self) -> int:
        return 0 if self._positions is None else self._positions.shape[0]

    def keeps(self, iteration: int) -> bool:
        """Whether sampling iteration ``iteration`` (from 0) is kept."""
        return iteration % self.thin == 0

    def reserve(self, draws: int) -> None:
        """Room for ``draws`` kept draws in all (a stage's plan), so the buffers are not grown draw by draw."""
        self._planned = max(self._planned, draws)
        if self._positions is not None and draws > self._positions.shape[1]:
            self._grow(draws)

    def _grow(self, capacity: int) -> None:
        """Move the ``n`` kept draws into buffers of ``capacity`` draws."""
        def grown(old, empty):
            new = empty((old.shape[0], capacity, *old.shape[2:]), dtype=old.dtype)
            new[:, :self.n] = old[:, :self.n]
            return new
        self._positions = grown(self._positions, torch.empty)
        self._stats = {name: grown(values, np.empty) for name, values in self._stats.items()}

    def add(self, position: torch.Tensor, info) -> None:
        """Keep one draw: write it into row ``n`` of every buffer, then count it."""
        position = position.detach().to("cpu")
        stats = {name: value.detach().to("cpu").numpy() for name, value in info._asdict().items()
                 if name != "faults"}  # where the density failed: bayesx.methods.mcmc.health's, not a statistic
        if self._positions is None:
            self._positions = torch.empty((position.shape[0], max(self._planned, 1), *position.shape[1:]),
                                          dtype=position.dtype)
        if self.n == self._positions.shape[1]:  # no plan reserved room for this draw: double
            self._grow(2 * self.n)
        self._positions[:, self.n] = position
        for name, value in stats.items():
            if name not in self._stats:
                self._stats[name] = np.empty((value.shape[0], self._positions.shape[1], *value.shape[1:]),
                                             dtype=value.dtype)
            self._stats[name][:, self.n] = value
        self.n += 1

    def drop(self) -> None:
        """Forget every draw (a divergence probe whose draws are not used); the buffers stay for the next."""
        self.n = 0

    def total(self, name: str) -> int:
        """The sum of statistic ``name`` over the kept draws and chains."""
        return int(np.sum(self._stats[name][:, :self.n])) if name in self._stats else 0

    def convergence(self) -> Convergence:
        """The worst coordinate's split R-hat (with two chains or more) and bulk ESS (ArviZ), for the run's length."""
        draws = self.draws().numpy()
        rhat = None
        if draws.shape[0] >= 2:
            rhat = float(np.nanmax(convergence.rhat_per_coordinate(draws), initial=-np.inf))
        ess = float(np.nanmin(convergence.ess_per_coordinate(draws, "bulk"), initial=np.inf))
        return Convergence(draws.shape[1], rhat, ess)

    def draws(self) -> torch.Tensor | None:
        """(chains, draws, dim), a view of the buffer, or None without draws."""
        return self._positions[:, :self.n] if self.n else None

    def sample_stats(self) -> dict[str, np.ndarray]:
        """name -> (chains, draws), views of the buffers."""
        return {name: values[:, :self.n] for name, values in self._stats.items()} if self.n else {}


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
            self.checkpoint.update(kept.draws(), kept.sample_stats(), state)


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
