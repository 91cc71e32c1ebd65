"""Random-walk Metropolis as a method of the runner (kernel: bayesx.kernels.rwm)."""

from __future__ import annotations

import math

from bayesx.kernels import rwm
from bayesx.methods.mcmc.sampler import MCMCMethod


class RWM(MCMCMethod):
    """Random-walk Metropolis; the scale starts at 2.38 / sqrt(dim) (Roberts et al. 1997)."""

    kernel = rwm
    name = "rwm"

    def __init__(self, target_accept: float = 0.234, **kwargs):
        super().__init__(target_accept=target_accept, **kwargs)

    def make_params(self, step_size, metric):
        return rwm.RWMParams(step_size, metric)

    def search_step_size(self, state, target, metric, gen, guess):
        # with a proposal covariance close to the posterior's, 2.38 / sqrt(dim) is near optimal
        return 2.38 / math.sqrt(state.position.shape[-1])
