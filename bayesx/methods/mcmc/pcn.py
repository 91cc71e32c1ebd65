"""Preconditioned Crank-Nicolson as a method of the runner (kernel: bayesx.kernels.pcn)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from bayesx.adaptation.window import bracket_step_size
from bayesx.errors import BayesxError
from bayesx.kernels import pcn
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import AtLeast, Between
from bayesx.targets.base import GaussianPrior, protocol_members


@dataclass(frozen=True)
class CrankNicolsonSettings(MCMCSettings):
    """pCN moves in the prior's geometry: no mass matrix; step_size is h, target_accept near 0.25."""

    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.25
    mass: Literal["identity"] = "identity"


@dataclass(frozen=True)
class PCNSettings(CrankNicolsonSettings):
    noise_block: Annotated[int, AtLeast(1)] = 64  # prior draws made per batch (one GEMM)


class CrankNicolsonSampler(MCMCMethod):
    """The driver for pCN-type kernels (pCN, AE-pCN, DA-pCN): the step parameter h, capped at pcn.MAX_H (rho = 0),
    reported with its rho, and searched by one-step acceptance before dual averaging. The kernels evaluate the
    likelihood alone, no gradient (``uses_gradients=False`` in their TransitionKernel)."""

    Settings = CrankNicolsonSettings

    def reported_step_size(self, step_size: float) -> dict[str, float]:
        h = min(step_size, pcn.MAX_H)
        return {"step_size": h, "rho": pcn.rho(h)}

    def kernel_density(self, target, density) -> pcn.PriorLikelihood:
        """pCN-type kernels move in the prior's geometry and weigh the likelihood alone: they take the likelihood
        and the prior as a value (bayesx.kernels.pcn.PriorLikelihood, with the coarse levels where the model has
        them), made here once from the model's views, not log pi."""
        return pcn.PriorLikelihood.of(target)

    def search_step_size(self, state, density, metric, gen, guess):
        def one_step_accept(h: float) -> float:
            if h > pcn.MAX_H:  # beyond rho = 0 (independent prior draws): stop growing
                return 0.0
            return float(self.kernel.step(state, density, self.kernel.parameters(h, metric), gen)[1].accept_prob.mean())

        return min(pcn.MAX_H, bracket_step_size(one_step_accept, min(guess, 0.5), self.settings.target_accept))


class PCN(CrankNicolsonSampler):
    """Preconditioned Crank-Nicolson (bayesx.kernels.pcn) for models with a Gaussian prior it can
    sample; ``step_size`` is h (rho = (1 - h/4) / (1 + h/4)), adapted towards ``target_accept``."""

    Settings = PCNSettings
    name = "pcn"

    def check(self, target, n_chains: int) -> None:
        require_gaussian_prior(target, self.name)

    def make_kernel(self) -> TransitionKernel:
        block = self.settings.noise_block
        return TransitionKernel(pcn, lambda h, metric=None: pcn.PCNParams(min(h, pcn.MAX_H), block), gradients=0,
                                uses_gradients=False)


def require_gaussian_prior(target, method: str) -> GaussianPrior:
    """The target's :class:`GaussianPrior` view, which pCN-type methods need; without one, say which models have it."""
    prior = target.gaussian_prior()
    if prior is None:
        lacks = ", ".join(protocol_members(GaussianPrior))
        raise BayesxError(f"method={method} needs a model with a Gaussian prior it can sample and a separate "
                          f"log-likelihood ({type(target).__name__} lacks {lacks}); use model=elliptic")
    return prior
