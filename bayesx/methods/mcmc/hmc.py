"""HMC as a method of the runner (kernel: bayesx.kernels.hmc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from bayesx.kernels import hmc
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import AtLeast, Between


@dataclass(frozen=True)
class HMCSettings(MCMCSettings):
    num_steps: Annotated[int, AtLeast(1)] = 10  # leapfrog steps per iteration
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.65


class HMC(MCMCMethod):
    """Static HMC with ``num_steps`` leapfrog steps per iteration."""

    Settings = HMCSettings
    kernel = hmc
    name = "hmc"

    def make_params(self, step_size, metric):
        return hmc.HMCParams(step_size, metric, self.settings.num_steps)

    def density_calls_per_transition(self) -> int:
        return self.settings.num_steps
