"""How long a sampler runs, as a state machine decided from counts: warm-up, probe, re-tune, draw, extend, stop.

Two rules a careful user applies by hand decide the length after warm-up. Both are off in
:class:`~bayesx.methods.mcmc.sampler.MCMCSettings` (a fixed run, as Stan's) and on in the command line's NUTS
(``conf/method/nuts.yaml``).

- **Raise the target acceptance on divergences** (``raise_target_accept``, a ladder such as [0.95, 0.99]). A
  divergent transition is one whose energy error blew up: the integrator met curvature its step size cannot
  resolve, and the draws near there are missing (Betancourt 2017, "A conceptual introduction to Hamiltonian Monte
  Carlo", sec. 6.2). The remedy is a smaller step, asked of dual averaging through a higher target acceptance
  (Stan's ``adapt_delta``). The first PROBE_DRAWS iterations of sampling are a probe: where more than
  ``divergence_limit`` of its transitions diverged from energy error (at least MIN_DIVERGENT of them; those that
  met a NaN density are left out, as no step size helps there), its draws are dropped, dual averaging runs again
  for RETUNE_ITERATIONS at the next target of the ladder from the current step size, and the probe runs again.
  What the dropped probes and the re-tuning cost counts as warm-up.
- **Draw until converged** (``max_draws``). Vehtari, Gelman, Simpson, Carpenter and Buerkner (2021,
  "Rank-normalization, folding, and localization: an improved R-hat") ask for a rank-normalized split R-hat
  below 1.01 and a bulk ESS above 400 (with four chains) before draws are used. After every ``num_draws`` draws
  per chain, while the worst coordinate fails either, the chains go on for ``num_draws`` more, up to
  ``max_draws`` per chain. Stopping when the diagnostics pass is a data-dependent rule; the R-hat reported is
  the one that passed, so it is read as "passed at the first check that passed", and the run's tags say how
  many draws it took.

The machine (:class:`RunLength`, its :class:`Stage` values and :meth:`RunLength.next`) is pure: it never draws,
reads a tensor or writes a file. The driver (bayesx.methods.mcmc.sampler) runs what a stage asks for and hands
back what it saw: nothing after warm-up or a re-tune, a :class:`ProbeCount` after a probe, a
:class:`Convergence` (or None where :meth:`RunLength.needs_convergence` says it is not read) after drawing.

    warmup  -> probe (a ladder to climb) | draw
    probe   -> retune (too divergent: the probe's draws are dropped) | draw (the probe's draws are kept)
    retune  -> probe (targets left to climb to) | draw
    draw, extend -> extend (R-hat or the ESS fall short, below max_draws) | stop
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

PROBE_DRAWS = 500
"""Iterations per chain in the divergence probe (2,000 transitions with four chains, so at least 5 divergent ones
at the default limit of 0.2%): a posterior that diverges on 0.3% of its transitions (the centred eight schools at
target 0.8, 62 in 20,000 on seed 0) is caught with probability ~0.55, at 0.6% with ~0.97; one that diverges on
0.1% (the non-centred one) is left alone with probability ~0.95. A 200-draw probe missed seed 0's 0.3%."""
MIN_DIVERGENT = 3
"""Fewer divergent probe transitions than this never raise the target, whatever the share: one or two are
Poisson noise on a posterior that rarely diverges."""
RETUNE_ITERATIONS = 100
"""Dual-averaging iterations at a raised target (the sampler runs them as a WindowAdaptation without metric
windows): twice Stan's final fast window (term_buffer 50), from the step size already adapted, so it converges
from close by."""
RHAT_LIMIT = 1.01
"""Vehtari et al. (2021)'s limit on the rank-normalized split R-hat; the same number as
bayesx.diagnostics.convergence.RHAT_LIMIT (kept here so that this module imports nothing numerical; a test checks
the two agree)."""


class Phase(Enum):
    """What the driver does in a stage."""

    WARMUP = "warmup"  # adapt the step size and the metric (the draws are not kept)
    PROBE = "probe"  # draw up to ``until`` per chain, then count the divergent transitions
    RETUNE = "retune"  # drop the kept draws, run dual averaging alone at ``target_accept`` (the metric kept)
    DRAW = "draw"  # draw up to ``until`` per chain
    EXTEND = "extend"  # draw on up to ``until`` per chain, as the diagnostics asked
    STOP = "stop"  # the kept draws are the run's


SAMPLING = (Phase.PROBE, Phase.DRAW, Phase.EXTEND)
"""The phases whose transitions are kept as draws."""


@dataclass(frozen=True)
class Stage:
    """Where a run stands: its phase; ``until``, the kept draws per chain at which a sampling phase ends;
    ``target_accept`` in force, the ``ladder`` of targets left to climb to, the ``planned`` draws per chain (what
    the draw rule has asked for so far; a checkpoint keeps it and the target); and ``why``, the reason for a
    re-tune or an extension (for the run's tags)."""

    phase: Phase
    target_accept: float
    ladder: tuple[float, ...]
    planned: int
    until: int = 0
    why: str = ""


@dataclass(frozen=True)
class ProbeCount:
    """What a probe saw: its transitions (draws per chain x chains) and how many diverged from energy error."""

    divergent: int
    transitions: int


@dataclass(frozen=True)
class Convergence:
    """The kept draws' diagnostics: draws per chain, the worst coordinate's R-hat (None with one chain, where it
    is not defined) and bulk ESS."""

    draws: int
    rhat_max: float | None
    ess_bulk_min: float


@dataclass(frozen=True)
class RunLength:
    """The rules of the module, from a sampler's settings (``from_settings``), and the machine's transitions."""

    num_draws: int
    max_draws: int | None = None
    min_ess: float = 400.0
    ladder: tuple[float, ...] = ()
    divergence_limit: float = 0.002
    rhat_limit: float = RHAT_LIMIT

    @classmethod
    def from_settings(cls, cfg) -> RunLength:
        """The rules of an MCMCSettings; targets of the ladder not above ``target_accept`` are left out."""
        ladder = tuple(t for t in cfg.raise_target_accept if t > cfg.target_accept)
        return cls(cfg.num_draws, cfg.max_draws, cfg.min_ess, ladder, cfg.divergence_limit)

    # --- the two rules ---------------------------------------------------------------------------
    def probe_draws(self) -> int:
        """Draws per chain in the divergence probe (0: no ladder, no probe)."""
        return min(PROBE_DRAWS, self.num_draws) if self.ladder else 0

    def too_divergent(self, divergent: int, transitions: int) -> bool:
        """Whether a probe's ``divergent`` energy-error divergences in ``transitions`` ask for a higher target."""
        return divergent >= MIN_DIVERGENT and divergent > self.divergence_limit * transitions

    def may_extend(self, n: int) -> bool:
        """Whether a run with ``n`` draws per chain may still draw more (else its draws need not be read)."""
        return self.max_draws is not None and n < self.max_draws

    def more_draws(self, seen: Convergence) -> tuple[int, str]:
        """How many more draws per chain the chains need after what ``seen`` says of them (0: enough), and why."""
        n = seen.draws
        if not self.may_extend(n):
            return 0, ""
        reasons = []
        if seen.rhat_max is not None and seen.rhat_max > self.rhat_limit:
            reasons.append(f"rhat_max {seen.rhat_max:.4f} > {self.rhat_limit}")
        if seen.ess_bulk_min < self.min_ess:
            reasons.append(f"ess_bulk_min {seen.ess_bulk_min:.0f} < {self.min_ess:g}")
        if not reasons:
            return 0, ""
        return min(self.num_draws, self.max_draws - n), f"{' and '.join(reasons)} after {n} draws"

    # --- the machine -----------------------------------------------------------------------------
    def warmup(self, target_accept: float) -> Stage:
        """The first stage of a run that starts from scratch."""
        return Stage(Phase.WARMUP, target_accept, self._left_above(target_accept), self.num_draws)

    def resume(self, target_accept: float, drawn: int, planned: int) -> Stage:
        """The stage of a run with ``drawn`` draws per chain kept, ``planned`` and ``target_accept`` in force (after
        warm-up: none kept, num_draws planned; a killed run's checkpoint: what it saved). Checkpoints are written
        after the probe, so only a run without draws probes."""
        ladder = self._left_above(target_accept)
        if drawn == 0 and ladder:
            return Stage(Phase.PROBE, target_accept, ladder, planned, until=self.probe_draws())
        return Stage(Phase.DRAW, target_accept, ladder, planned, until=planned)

    def needs_convergence(self, stage: Stage) -> bool:
        """Whether :meth:`next` reads a :class:`Convergence` at the end of ``stage`` (computing one costs a pass
        over the draws)."""
        return stage.phase in (Phase.DRAW, Phase.EXTEND) and self.may_extend(stage.until)

    def next(self, stage: Stage, seen: ProbeCount | Convergence | None = None) -> Stage:
        """The stage after ``stage`` has run, from what the driver ``seen``: nothing after warm-up or a re-tune, a
        ProbeCount after a probe, a Convergence after drawing where :meth:`needs_convergence` (else nothing)."""
        phase = stage.phase
        if phase is Phase.WARMUP:
            return self.resume(stage.target_accept, 0, stage.planned)
        if phase is Phase.PROBE:
            if not isinstance(seen, ProbeCount):
                raise TypeError(f"a probe ends with a ProbeCount, got {seen!r}")
            if self.too_divergent(seen.divergent, seen.transitions):
                raised, *rest = stage.ladder
                why = (f"{stage.target_accept:g} -> {raised:g} ({seen.divergent} of {seen.transitions} probe "
                       f"transitions divergent)")
                return replace(stage, phase=Phase.RETUNE, target_accept=raised, ladder=tuple(rest), until=0, why=why)
            return replace(stage, phase=Phase.DRAW, until=stage.planned, why="")
        if phase is Phase.RETUNE:
            return self.resume(stage.target_accept, 0, stage.planned)
        if phase in (Phase.DRAW, Phase.EXTEND):
            if not self.needs_convergence(stage):
                return replace(stage, phase=Phase.STOP, why="")
            if not isinstance(seen, Convergence):
                raise TypeError(f"drawing up to max_draws ends with a Convergence, got {seen!r}")
            more, why = self.more_draws(seen)
            if not more:
                return replace(stage, phase=Phase.STOP, why="")
            return replace(stage, phase=Phase.EXTEND, planned=stage.planned + more, until=stage.until + more, why=why)
        raise ValueError(f"a stopped run has no next stage (got {stage})")

    def _left_above(self, target_accept: float) -> tuple[float, ...]:
        return tuple(t for t in self.ladder if t > target_accept)
