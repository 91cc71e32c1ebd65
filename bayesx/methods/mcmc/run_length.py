"""How long a sampler runs after warm-up, decided from its own draws: two rules a careful user applies by hand.

Both are off in :class:`~bayesx.methods.mcmc.sampler.MCMCSettings` (a fixed run, as Stan's) and on in the command
line's NUTS (``conf/method/nuts.yaml``).

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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesx.diagnostics import convergence
from bayesx.diagnostics.convergence import RHAT_LIMIT

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


@dataclass(frozen=True)
class RunLength:
    """The two rules of the module, from a sampler's settings (``from_settings``)."""

    num_draws: int
    max_draws: int | None = None
    min_ess: float = 400.0
    ladder: tuple[float, ...] = ()
    divergence_limit: float = 0.002

    @classmethod
    def from_settings(cls, cfg) -> RunLength:
        """The rules of an MCMCSettings; targets of the ladder not above ``target_accept`` are left out."""
        ladder = tuple(t for t in cfg.raise_target_accept if t > cfg.target_accept)
        return cls(cfg.num_draws, cfg.max_draws, cfg.min_ess, ladder, cfg.divergence_limit)

    def probe_draws(self) -> int:
        """Draws per chain in the divergence probe (0: no ladder, no probe)."""
        return min(PROBE_DRAWS, self.num_draws) if self.ladder else 0

    def too_divergent(self, divergent: int, transitions: int) -> bool:
        """Whether a probe's ``divergent`` energy-error divergences in ``transitions`` ask for a higher target."""
        return divergent >= MIN_DIVERGENT and divergent > self.divergence_limit * transitions

    def may_extend(self, n: int) -> bool:
        """Whether a run with ``n`` draws per chain may still draw more (else its draws need not be read)."""
        return self.max_draws is not None and n < self.max_draws

    def more_draws(self, draws: np.ndarray) -> tuple[int, str]:
        """How many more draws per chain the chains need after ``draws`` (chains, n, dim) (0: enough), and why."""
        n = draws.shape[1]
        if not self.may_extend(n):
            return 0, ""
        reasons = []
        if draws.shape[0] >= 2:
            rhat = float(np.nanmax(convergence.rhat_per_coordinate(draws), initial=-np.inf))
            if rhat > RHAT_LIMIT:
                reasons.append(f"rhat_max {rhat:.4f} > {RHAT_LIMIT}")
        ess = float(np.nanmin(convergence.ess_per_coordinate(draws, "bulk"), initial=np.inf))
        if ess < self.min_ess:
            reasons.append(f"ess_bulk_min {ess:.0f} < {self.min_ess:g}")
        if not reasons:
            return 0, ""
        return min(self.num_draws, self.max_draws - n), f"{' and '.join(reasons)} after {n} draws"

