"""HMC as a method of the runner (kernel: bayesx.kernels.hmc)."""

from __future__ import annotations

from bayesx.errors import BayesxError
from bayesx.kernels import hmc
from bayesx.methods.mcmc.sampler import MCMCMethod


class HMC(MCMCMethod):
    """Static HMC with ``num_steps`` leapfrog steps per iteration."""

    kernel = hmc
    name = "hmc"

    def __init__(self, num_steps: int = 10, target_accept: float = 0.65, **kwargs):
        if num_steps < 1:
            raise BayesxError(f"method.num_steps must be >= 1, got {num_steps}")
        super().__init__(target_accept=target_accept, **kwargs)
        self.num_steps = num_steps

    def make_params(self, step_size, metric):
        return hmc.HMCParams(step_size, metric, self.num_steps)
