"""Random-walk Metropolis as a method of the runner (kernel: bayesx.kernels.rwm)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from bayesx.kernels import rwm
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import Between


@dataclass(frozen=True)
class RWMSettings(MCMCSettings):
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.234  # Roberts, Gelman and Gilks (1997)


class RWM(MCMCMethod):
    """Random-walk Metropolis; the scale starts at 2.38 / sqrt(dim) (Roberts et al. 1997)."""

    Settings = RWMSettings
    name = "rwm"

    def make_kernel(self) -> TransitionKernel:
        return TransitionKernel(rwm, rwm.RWMParams, gradients=0, uses_gradients=False)

    def search_step_size(self, state, density, metric, gen, guess):
        # with a proposal covariance close to the posterior's, 2.38 / sqrt(dim) is near optimal
        return 2.38 / math.sqrt(state.position.shape[-1])
