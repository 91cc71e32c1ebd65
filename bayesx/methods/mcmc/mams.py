"""MAMS as a method of the runner: the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon and
Seljak 2025, "Metropolis Adjusted Microcanonical Hamiltonian Monte Carlo"; kernel: bayesx.kernels.mams,
warm-up: bayesx.adaptation.mams).

Each transition refreshes a unit velocity, integrates the isokinetic dynamics for a jittered number of steps
with mean L / eps and accepts on the energy error; the warm-up tunes eps (dual averaging towards 0.9), the
metric and L in BlackJAX's stages. The chains share eps, L and the metric and move in lock-step. After warm-up
the family's driver samples, with its run-length rules (bayesx.methods.mcmc.run_length: the divergence probe
that re-tunes eps at a higher target with L held, and more draws while R-hat or the ESS fall short).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.adaptation.mams import INITIAL_STEPS, MAMSAdaptation
from bayesx.adaptation.window import bracket_step_size
from bayesx.errors import BayesxError
from bayesx.kernels import mams
from bayesx.kernels.metric import Metric
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import AtLeast, Between, Positive


@dataclass(frozen=True)
class MAMSSettings(MCMCSettings):
    """MCMCSettings, and:

    mass                as MCMCSettings (the metric is the preconditioner C C^T = M^-1 of bayesx.kernels.mams),
                        estimated once, in warm-up's third stage; auto: dense up to 100 coordinates, else diag_grad
    integrator          mclachlan (two gradients a step; BlackJAX's default for this kernel) | leapfrog (one)
    trajectory_length   L held fixed (whitened units); null: tuned in warm-up (bayesx.adaptation.mams)
    max_steps           cap on the integrator steps of one transition
    """

    num_warmup: Annotated[int, AtLeast(0)] = 500
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.9  # Robnik, Cohn-Gordon and Seljak (2025); BlackJAX
    # auto (as NUTS): dense up to 100 coordinates, else diag_grad; diag is BlackJAX's diagonal preconditioning.
    # On a rotated 100-d Gaussian and posteriordb's arK dense needed 17x and 9x fewer gradients per ESS than
    # diag (results/archive/mams_vs_nuts.md)
    mass: Literal["auto", "diag", "dense", "identity", "diag_grad", "lowrank"] = "auto"
    integrator: Literal["mclachlan", "leapfrog"] = "mclachlan"
    trajectory_length: Annotated[float | None, Positive()] = None
    max_steps: Annotated[int, AtLeast(1)] = 1024


class MAMS(MCMCMethod):
    """The Metropolis-adjusted microcanonical sampler with BlackJAX's tuning of eps, the metric and L."""

    Settings = MAMSSettings
    name = "mams"

    def check(self, target, n_chains: int) -> None:
        super().check(target, n_chains)
        if target.dim < 2:
            raise BayesxError(f"method=mams moves a unit velocity on the sphere of d >= 2 coordinates (its dynamics "
                              f"divide by d - 1); the target has dim={target.dim}: use method=nuts")

    def make_kernel(self) -> TransitionKernel:
        # gradients: as NUTS's 8 leaves, at the integrator's gradients per step
        gradients = 8 * mams.grads_per_step(self.settings.integrator)
        return TransitionKernel(mams, self.integration_params, gradients=gradients)

    def integration_params(self, step_size, metric, trajectory_length: float | None = None) -> mams.MAMSParams:
        """The kernel's params, with the L warm-up tuned (none tuned: the setting, or INITIAL_STEPS steps)."""
        cfg = self.settings
        length = trajectory_length or cfg.trajectory_length or INITIAL_STEPS * step_size
        return mams.MAMSParams(step_size, metric, length, cfg.integrator, cfg.max_steps)

    def make_adaptation(self, density, gen):
        cfg = self.settings
        return MAMSAdaptation(
            cfg.num_warmup, cfg.target_accept, self.mass_form(density.dim), cfg.integrator, cfg.max_steps,
            lambda s, m, guess: self.checked_step_size_search(s, density, m, gen, guess), cfg.adapt_step_size,
            cfg.trajectory_length or 0.0, cfg.mass_rank)

    def search_step_size(self, state, density, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """Hoffman and Gelman's doubling and halving (bayesx.adaptation.window.bracket_step_size) on the mean
        acceptance probability of one step of this kernel's integrator from a fresh velocity."""
        integrator = self.settings.integrator

        def one_step_accept(eps: float) -> float:
            u = mams.unit_velocity(state.position.shape, state.position.dtype, state.position.device, gen)
            end = mams.integrate(state, u, eps, 1, metric, integrator, density)
            w = mams.energy_change(state, end)
            return float(torch.exp(torch.clamp(-w, max=0.0)).mean())

        return bracket_step_size(one_step_accept, guess)

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:
        return {"integration_steps_mean": float(np.mean(stats["num_steps"]))} if stats else {}
