"""The MCMC methods of the ``method`` config group: HMC, NUTS, random-walk Metropolis and pCN."""

from __future__ import annotations

import math

import numpy as np

from bayesx.errors import BayesxError
from bayesx.mcmc import hmc, nuts, pcn, rwm
from bayesx.mcmc.adaptation import bracket_step_size
from bayesx.mcmc.driver import MCMCMethod


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


class NUTS(MCMCMethod):
    """The No-U-Turn sampler with multinomial sampling, up to 2^max_tree_depth - 1 steps."""

    kernel = nuts
    name = "nuts"

    def __init__(self, max_tree_depth: int = 10, target_accept: float = 0.8, **kwargs):
        if not 1 <= max_tree_depth <= 20:
            raise BayesxError(f"method.max_tree_depth must be between 1 and 20, got {max_tree_depth}")
        super().__init__(target_accept=target_accept, **kwargs)
        self.max_tree_depth = max_tree_depth

    def make_params(self, step_size, metric):
        return nuts.NUTSParams(step_size, metric, self.max_tree_depth)

    def extra_metrics(self, stats):
        if not stats:
            return {}
        depth = stats["tree_depth"]
        return {"tree_depth_mean": float(np.mean(depth)),
                "n_max_tree_depth": float(np.sum(depth >= self.max_tree_depth))}


class RWM(MCMCMethod):
    """Random-walk Metropolis; the scale starts at 2.38 / sqrt(dim) (Roberts et al. 1997)."""

    kernel = rwm
    name = "rwm"
    uses_gradient = False

    def __init__(self, target_accept: float = 0.234, **kwargs):
        super().__init__(target_accept=target_accept, **kwargs)

    def make_params(self, step_size, metric):
        return rwm.RWMParams(step_size, metric)

    def search_step_size(self, state, target, metric, gen, guess):
        # with a proposal covariance close to the posterior's, 2.38 / sqrt(dim) is near optimal
        return 2.38 / math.sqrt(state.position.shape[-1])


class CrankNicolsonStep:
    """The step parameter h of pCN-type kernels (pCN, AE-pCN): capped at pcn.MAX_H (rho = 0),
    reported with its rho, and searched by one-step acceptance before dual averaging."""

    def _summaries(self, stats, step_size, warmup_grad_evals):
        h = min(step_size, pcn.MAX_H)
        return {**super()._summaries(stats, h, warmup_grad_evals), "rho": pcn.rho(h)}

    def search_step_size(self, state, target, metric, gen, guess):
        def one_step_accept(h: float) -> float:
            if h > pcn.MAX_H:  # beyond rho = 0 (independent prior draws): stop growing
                return 0.0
            return float(self.kernel.step(state, target, self.make_params(h), gen)[1].accept_prob.mean())

        return min(pcn.MAX_H, bracket_step_size(one_step_accept, min(guess, 0.5), self.target_accept))


class PCN(CrankNicolsonStep, MCMCMethod):
    """Preconditioned Crank-Nicolson (bayesx.mcmc.pcn) for models with a Gaussian prior it can
    sample; ``step_size`` is h (rho = (1 - h/4) / (1 + h/4)), adapted towards ``target_accept``."""

    kernel = pcn
    name = "pcn"
    uses_gradient = False

    def __init__(self, target_accept: float = 0.25, noise_block: int = 64, **kwargs):
        if not (isinstance(noise_block, int) and noise_block >= 1):
            raise BayesxError(f"method.noise_block must be an integer >= 1, got {noise_block!r}")
        super().__init__(target_accept=target_accept, mass="identity", **kwargs)
        self.noise_block = noise_block
        self._noise = None

    def check(self, target, n_chains: int) -> None:
        require_gaussian_prior(target, self.name)

    def run(self, target, initial_position, gen, progress=None):
        self._noise = pcn.PriorNoise(target, self.noise_block)
        return super().run(target, initial_position, gen, progress)

    def make_params(self, step_size, metric=None):
        return pcn.PCNParams(min(step_size, pcn.MAX_H), self._noise)


def require_gaussian_prior(target, method: str, also: tuple[str, ...] = ()) -> None:
    """pCN-type methods need log_likelihood and prior draws; say which models have them."""
    needed = ("log_likelihood", "sample_prior", *also)
    missing = [name for name in needed if not callable(getattr(target, name, None))]
    if missing:
        raise BayesxError(f"method={method} needs a model with a Gaussian prior it can sample and a separate "
                          f"log-likelihood ({type(target).__name__} lacks {', '.join(missing)}); use model=elliptic")
