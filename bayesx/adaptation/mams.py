"""MAMS warm-up: the step size, the metric and the trajectory length L of bayesx.kernels.mams, in the stages
of BlackJAX's ``adjusted_mclmc_find_L_and_step_size`` (Robnik, Cohn-Gordon and Seljak 2025, "Metropolis
Adjusted Microcanonical Hamiltonian Monte Carlo", sec. on tuning), for all chains at once: the chains share
eps, L and the metric, and every statistic pools them.

The warm-up's ``num_warmup`` iterations are five stages of a fifth each (BlackJAX's frac_tune1 = frac_tune2
= frac_tune3 = 0.1 of a run, each followed by its step-size pass):

1. dual averaging of eps (Hoffman and Gelman 2014; bayesx.adaptation.window.DualAveraging, gamma 0.05,
   t0 10, kappa 0.75, BlackJAX's defaults too) on the chains' mean acceptance probability towards
   ``target_accept`` (0.9 in the paper and BlackJAX), with L moving with eps (L / eps = INITIAL_STEPS, as
   BlackJAX's start L = sqrt(d), eps = 0.2 sqrt(d));
2. the same, and the chains' states (and gradients) kept;
3. the metric from stage 2's states: ``diag`` (BlackJAX's diagonal preconditioning): the within-chain
   variances, regularized as Stan's (bayesx.adaptation.window.update_inverse_mass, which also gives
   ``dense`` and the gradient-based ``diag_grad`` and ``lowrank``); then L = sqrt(sum of the variances in the
   new metric's whitened coordinates) (= sqrt(d) for the diagonal, as BlackJAX sets it); with ``identity``,
   L = 1.3 sqrt(sum Var x_i), its change clamped to at most 2x (BlackJAX's tuning_factor and Lratio). The
   step size is searched again in the new metric, and dual averaging restarts with L held fixed;
4. L from the autocorrelation: the chains run with eps and L fixed, and with ESS the mean over coordinates
   of ArviZ's bulk ESS of these draws (all chains) per draw and chain,
       L <- min(2 L, L_FACTOR * L / ESS)
   (the distance travelled per effective sample, scaled by 0.5 as BlackJAX's adjusted tuning does);
5. dual averaging again with L fixed.

Throughout eps <= L / 1.1 (BlackJAX's clamp). The final eps is dual averaging's averaged iterate.
``trajectory_length`` given: L is held there and stages 3's and 4's changes of L are skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from bayesx.adaptation.window import DualAveraging, WarmupProgress, adapted_metric, update_inverse_mass
from bayesx.diagnostics.convergence import ess_per_coordinate
from bayesx.kernels import mams
from bayesx.kernels.metric import Metric

INITIAL_STEPS = 5.0  # L / eps in stages 1 and 2 (BlackJAX: L = sqrt(d), eps = 0.2 sqrt(d))
TUNING_FACTOR = 1.3  # L = 1.3 sqrt(sum Var x_i) without preconditioning (BlackJAX's tuning_factor)
L_RATIO_MAX = 2.0  # L grows by at most this in one update (BlackJAX's Lratio_upperbound)
L_FACTOR = 0.5  # stage 4's L = L_FACTOR * L / (ESS per draw) (BlackJAX's l_factor for the adjusted kernel)
MIN_METRIC_DRAWS = 5  # stage 2 needs this many iterations to estimate a metric
MIN_ESS_DRAWS = 20  # stage 4 needs this many iterations to estimate an ESS
GRADIENT_FORMS = ("diag_grad", "lowrank")


def whitened_variance(draws: torch.Tensor, metric: Metric) -> torch.Tensor:
    """Within-chain variances of draws (chains, n, dim) in the metric's whitened coordinates z = C^-1 x."""
    z = draws @ metric.chol_inv.T if metric.dense else draws * metric.chol_inv
    centred = z - z.mean(1, keepdim=True)
    dof = max(z.shape[0] * (z.shape[1] - 1), 1)
    return (centred * centred).sum((0, 1)) / dof


@dataclass
class MAMSAdaptation:
    """The warm-up above; ``trajectory_length`` holds L as it adapts."""

    num_warmup: int
    target_accept: float
    mass: str  # identity | diag | dense | diag_grad | lowrank
    integrator: str
    max_steps: int
    search_step_size: object  # (state, metric, guess) -> a starting step size
    adapt_step_size: bool = True
    trajectory_length: float = 0.0  # given (> 0): held fixed
    rank: int = 10

    def __post_init__(self):
        self.fixed_length = self.trajectory_length > 0

    def params(self, progress: WarmupProgress) -> mams.MAMSParams:
        return mams.MAMSParams(progress.step_size, progress.metric, self.trajectory_length, self.integrator,
                               self.max_steps)

    def run(self, progress: WarmupProgress, density, gen, on_step=None) -> WarmupProgress:
        n = self.num_warmup
        bounds = [round(n * k / 5) for k in range(6)]
        if not self.fixed_length:
            self.trajectory_length = INITIAL_STEPS * progress.step_size
        controller = DualAveraging(progress.step_size, self.target_accept)
        kept: list[tuple[torch.Tensor, torch.Tensor]] = []
        it = 0

        def iterate(adapt: bool, length_follows: bool, keep: bool) -> None:
            nonlocal it
            previous = progress.step_size
            progress.state, info = mams.step(progress.state, density, self.params(progress), gen)
            progress.grad_evals += int(info.n_grad_evals.sum())
            if adapt and self.adapt_step_size:
                eps = controller.update(float(info.accept_prob.mean()))
                progress.step_size = eps if length_follows and not self.fixed_length else min(eps, self.trajectory_length / 1.1)
                if length_follows and not self.fixed_length:
                    self.trajectory_length *= progress.step_size / previous
            if keep:
                kept.append((progress.state.position, progress.state.grad))
            if on_step is not None:
                on_step(info, progress.step_size, it)
            it += 1

        for _ in range(bounds[0], bounds[1]):  # stage 1
            iterate(True, True, False)
        for _ in range(bounds[1], bounds[2]):  # stage 2
            iterate(True, True, True)
        if self.adapt_step_size and it > 0:
            progress.step_size = controller.final_step_size
            if not self.fixed_length:
                self.trajectory_length = INITIAL_STEPS * progress.step_size
        def retune(first: int, last: int) -> None:
            """A stage that tunes the step size alone, L fixed, from the current one; it ends at the controller's
            final step size, at most L / 1.1."""
            controller.restart(progress.step_size)
            for _ in range(first, last):
                iterate(True, False, False)
            if self.adapt_step_size and last > first:
                progress.step_size = min(controller.final_step_size, self.trajectory_length / 1.1)

        if len(kept) >= MIN_METRIC_DRAWS:  # stage 3's new metric and L
            self._from_draws(progress, kept)
        kept = []
        retune(bounds[2], bounds[3])  # stage 3
        for _ in range(bounds[3], bounds[4]):  # stage 4: fixed parameters, draws for the ESS
            iterate(False, False, True)
        if len(kept) >= MIN_ESS_DRAWS and not self.fixed_length:
            self._from_ess(kept)
        kept = []
        retune(bounds[4], bounds[5])  # stage 5
        if self.trajectory_length:
            progress.tuned["trajectory_length"] = self.trajectory_length
        return progress

    def _from_draws(self, progress: WarmupProgress, kept: list) -> None:
        """Stage 3: the metric (unless identity) and L from stage 2's states, and a new starting step size."""
        draws = torch.stack([q for q, _ in kept], 1)
        if self.mass != "identity":
            grads = torch.stack([g for _, g in kept], 1) if self.mass in GRADIENT_FORMS else None
            old = progress.metric
            progress.metric = adapted_metric(update_inverse_mass(draws, old, self.mass, grads, self.rank))
            if self.adapt_step_size:
                progress.step_size = self.search_step_size(progress.state, progress.metric, progress.step_size)
            if not self.fixed_length:
                self.trajectory_length = float(whitened_variance(draws, progress.metric).sum().sqrt())
        elif not self.fixed_length:
            wanted = TUNING_FACTOR * float(whitened_variance(draws, progress.metric).sum().sqrt())
            change = min(L_RATIO_MAX, wanted / self.trajectory_length)
            if change > 0 and math.isfinite(change):
                self.trajectory_length *= change
                progress.step_size *= change
        progress.step_size = min(progress.step_size, self.trajectory_length / 1.1)

    def _from_ess(self, kept: list) -> None:
        """Stage 4: L = L_FACTOR * L / (mean bulk ESS per draw and chain), at most L_RATIO_MAX times L."""
        draws = torch.stack([q for q, _ in kept], 1).detach().cpu().numpy()
        ess = ess_per_coordinate(draws, "bulk")
        per_draw = float(np.nanmean(ess)) / (draws.shape[0] * draws.shape[1])
        if per_draw > 0 and math.isfinite(per_draw):
            self.trajectory_length = min(L_RATIO_MAX * self.trajectory_length,
                                         L_FACTOR * self.trajectory_length / per_draw)
