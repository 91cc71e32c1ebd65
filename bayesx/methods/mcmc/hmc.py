"""HMC as a method of the runner (kernel: bayesx.kernels.hmc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from bayesx.kernels import hmc
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import AtLeast, Between


@dataclass(frozen=True)
class HMCSettings(MCMCSettings):
    num_steps: Annotated[int, AtLeast(1)] = 10  # leapfrog steps per iteration
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.65


class HMC(MCMCMethod):
    """Static HMC with ``num_steps`` leapfrog steps per iteration."""

    Settings = HMCSettings
    name = "hmc"

    def make_kernel(self) -> TransitionKernel:
        steps = self.settings.num_steps
        return TransitionKernel(hmc, lambda step_size, metric: hmc.HMCParams(step_size, metric, steps), gradients=steps)
