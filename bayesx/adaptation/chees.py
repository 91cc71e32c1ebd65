"""ChEES warm-up (Hoffman, Radul and Sountsov 2021, "An adaptive MCMC scheme for setting trajectory
lengths in Hamiltonian Monte Carlo"): the step size, the trajectory length T and a diagonal metric of
jittered HMC (bayesx.kernels.chees), adapted from many chains at once.

Every warm-up iteration makes one jittered HMC proposal (q'_m, p'_m) per chain m, with acceptance
probability a_m, and then:

- T climbs the ChEES criterion, E[(|q' - E q'|^2 - |q - E q|^2)^2] / 4 (the change in the squared
  distance from the centre, measured in the metric's whitened coordinates), by Adam on log T with
  the per-chain gradient estimates, weighted by the acceptance probabilities,
      g_m = (|q'_m - mean q'|^2 - |q_m - mean q|^2) (q'_m - mean q') . p'_m u   (whitened; u the jitter),
  Adam's learning rate 0.025 and beta_1 = 0, beta_2 = 0.95 (their settings); the value used after
  warm-up is the average of log T over the second half of warm-up. With the gradient-based metrics T
  is kept at least one step: their updates come in jumps, and when one lets the step size jump, a T
  left below it took Adam a hundred iterations to catch up. (With diag, whose metric moves smoothly,
  the same floor cost more than it saved: early steps of dual averaging overshoot and held T high,
  warm-up on synthetic took 134 s instead of 77 s.)
- the step size by dual averaging (bayesx.adaptation.window.DualAveraging) on the *harmonic* mean of
  the a_m, which a few stuck chains pull down (their choice), towards ``target_accept`` (0.651);
- the metric, frozen at three quarters of warm-up so step size and T settle on it:
  mass=diag: the cross-chain variance of the current states, averaged with weight 0.95 per iteration;
  mass=diag_grad / lowrank: the estimates of bayesx.adaptation.window from draws *and gradients*
  (nutpie's sqrt(var q / var grad), and its low-rank correction), here from the states and gradients
  of the last ``WINDOW`` iterations of all chains, each iteration centred on its mean across chains,
  re-estimated every ``REFRESH`` iterations.

It needs at least two chains (the means across chains); it is meant for tens to thousands.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

from bayesx.adaptation.window import GRADIENT_FORMS, DualAveraging, WarmupProgress, adapted_metric, update_inverse_mass
from bayesx.kernels import chees, hmc
from bayesx.kernels.metric import Metric, make_metric

LEARNING_RATE, BETA_2 = 0.025, 0.95
METRIC_DECAY = 0.95
WINDOW, REFRESH = 50, 10  # iterations of states and gradients behind a diag_grad / lowrank estimate; how often
FIRST_UPDATE = 10  # iterations of spread before the metric first changes
GRADIENT_CAP = 1e100  # |d criterion / d log T| beyond this is treated as this (its square must stay finite)


def whiten(metric: Metric, q):
    """z = L^-1 q for each row (L L^T = M^-1): coordinates in which the metric is the identity."""
    return q @ metric.chol_inv.T if metric.dense else q * metric.chol_inv


def whitened_velocity(metric: Metric, p):
    """dz/dt = L^-1 M^-1 p = L^T p for each row: the velocity in the whitened coordinates."""
    return p @ metric.chol if metric.dense else p * metric.chol


@dataclass
class CheesAdaptation:
    """The warm-up above; ``trajectory_length`` holds T as it adapts (the start: one step)."""

    num_warmup: int
    target_accept: float
    mass: str  # identity | diag | diag_grad | lowrank
    max_steps: int
    trajectory_length: float = 0.0
    rank: int = 10  # of the lowrank correction

    def run(self, progress: WarmupProgress, density, gen, on_step=None) -> WarmupProgress:
        controller = DualAveraging(progress.step_size, self.target_accept)
        log_t = math.log(self.trajectory_length or progress.step_size)
        second_moment, log_t_sum, log_t_count = 0.0, 0.0, 0
        variance = None
        recent: deque[tuple] = deque(maxlen=WINDOW)  # (states, gradients) of the last iterations (diag_grad, lowrank)
        freeze = int(0.75 * self.num_warmup)
        for it in range(self.num_warmup):
            state, metric = progress.state, progress.metric
            params = chees.CheesParams(progress.step_size, metric, math.exp(log_t), self.max_steps)
            jitter = float(torch.rand((), generator=gen, device=gen.device))
            n = chees.num_steps(jitter, params)
            end, h0, h1 = hmc.propose(state, density, hmc.HMCParams(params.step_size, metric, n), gen)
            new_state, info = hmc.accept(state, end, h0, h1, n, gen)
            accept_prob = info.accept_prob
            progress.grad_evals += n * state.position.shape[0]

            # ChEES gradient in whitened coordinates
            z, z_new = whiten(metric, state.position), whiten(metric, end.position)
            centred, centred_new = z - z.mean(0), z_new - z_new.mean(0)
            change = (centred_new * centred_new).sum(-1) - (centred * centred).sum(-1)
            per_chain = change * (centred_new * whitened_velocity(metric, end.momentum)).sum(-1) * jitter
            weights = torch.nan_to_num(accept_prob, nan=0.0)
            finite = torch.isfinite(per_chain)
            if float(weights[finite].sum()) > 0:
                grad = float((weights[finite] * per_chain[finite]).sum() / weights[finite].sum())
                # ascent on log T; Adam's step depends on the gradient's sign and its size relative to its
                # running rms, so capping a huge one (chains far out early in warm-up) keeps its square finite
                grad_log_t = max(-GRADIENT_CAP, min(GRADIENT_CAP, grad * math.exp(log_t)))
                second_moment = BETA_2 * second_moment + (1 - BETA_2) * grad_log_t**2
                corrected = second_moment / (1 - BETA_2 ** (it + 1))
                log_t += LEARNING_RATE * grad_log_t / (math.sqrt(corrected) + 1e-8)
                log_t = min(log_t, math.log(self.max_steps * progress.step_size))
            if it >= self.num_warmup // 2:
                log_t_sum, log_t_count = log_t_sum + log_t, log_t_count + 1

            progress.state = new_state
            harmonic = float(1.0 / (1.0 / accept_prob.clamp(min=1e-10)).mean())
            progress.step_size = controller.update(harmonic)
            if self.mass in GRADIENT_FORMS:  # T at least one step: these metrics change in jumps
                log_t = max(log_t, math.log(progress.step_size))
            if self.mass == "diag" and it < freeze:
                current = progress.state.position.var(0)
                variance = current if variance is None else METRIC_DECAY * variance + (1 - METRIC_DECAY) * current
                if it >= FIRST_UPDATE:
                    progress.metric = make_metric(variance.clamp(min=1e-8))
            elif self.mass in GRADIENT_FORMS and it < freeze:
                recent.append((progress.state.position, progress.state.grad))
                if it >= FIRST_UPDATE and (it - FIRST_UPDATE) % REFRESH == 0:
                    progress.metric = self._from_gradients(recent, progress.metric)
            self.trajectory_length = math.exp(log_t)
            if on_step is not None:
                on_step(info, progress.step_size, it)
        if self.num_warmup > 0:
            progress.step_size = controller.final_step_size
            if log_t_count:
                self.trajectory_length = math.exp(log_t_sum / log_t_count)
        if self.trajectory_length:
            progress.tuned["trajectory_length"] = self.trajectory_length
        return progress

    def _from_gradients(self, recent: deque[tuple], current: Metric) -> Metric:
        """diag_grad / lowrank from the recent iterations, each centred across chains: the window
        estimators take (groups, n, dim) and centre each group, so iterations go first."""
        states = torch.stack([q for q, _ in recent], 0)
        grads = torch.stack([g for _, g in recent], 0)
        return adapted_metric(update_inverse_mass(states, current, self.mass, grads, self.rank))
