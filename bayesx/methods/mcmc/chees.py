"""ChEES-HMC as a method of the runner (kernel: bayesx.kernels.chees; warm-up: bayesx.adaptation.chees)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from bayesx.adaptation.chees import CheesAdaptation
from bayesx.kernels import chees
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, Between, Positive


@dataclass(frozen=True)
class CheesSettings(MCMCSettings):
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.651  # Hoffman, Radul and Sountsov (2021)
    mass: Literal["diag", "identity", "diag_grad", "lowrank"] = "diag"  # from the spread across chains in warm-up
    max_leapfrog_steps: Annotated[int, AtLeast(1)] = 1000  # cap on the steps of one transition
    init_trajectory_length: Annotated[float | None, Positive()] = None  # T at the start of warm-up; null: one step


class Chees(MCMCMethod):
    """Jittered HMC whose trajectory length, step size and diagonal metric adapt across many chains."""

    Settings = CheesSettings
    name = "chees"

    def check(self, target, n_chains: int) -> None:
        super().check(target, n_chains)
        if n_chains < 2:
            raise BayesxError(f"method=chees adapts from the spread across chains and needs n_chains >= 2, got "
                              f"n_chains={n_chains}; set n_chains=64 (it is built for many chains)")

    def make_adaptation(self, density, gen):
        cfg = self.settings
        return CheesAdaptation(cfg.num_warmup, cfg.target_accept, cfg.mass, cfg.max_leapfrog_steps,
                               cfg.init_trajectory_length or 0.0, cfg.mass_rank)

    def make_kernel(self) -> TransitionKernel:
        return TransitionKernel(chees, self.trajectory_params, gradients=8)

    def trajectory_params(self, step_size, metric, trajectory_length: float | None = None) -> chees.CheesParams:
        """The kernel's params, with the trajectory length warm-up tuned (none tuned: one step)."""
        return chees.CheesParams(step_size, metric, trajectory_length or step_size, self.settings.max_leapfrog_steps)

    def extra_metrics(self, stats):
        return {"leapfrog_steps_mean": float(np.mean(stats["n_grad_evals"]))} if stats else {}
