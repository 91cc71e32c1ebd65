"""The Laplace approximation as a method (``method=laplace``): q = N(mode, H^-1), H the negative
Hessian of log p at the mode (Laplace 1774; MacKay 2003, ch. 27; Bishop 2006, sec. 4.4).

The mode is found by L-BFGS from every starting point at once and the best is kept
(bayesx.methods.common.optimize.fit_laplace, the same code that starts MCMC with ``init=laplace``); the Hessian is
the target's analytic one where it has one, else autograd's. The approximation family then weighs
``num_draws`` draws from q by p/q: ``log_evidence`` is the importance-sampled evidence with q as
proposal and ``psis_khat`` says whether q covers the posterior. The Laplace evidence itself,

    log Z_laplace = log p(mode) + dim/2 log 2 pi - 1/2 log det H,

is recorded as ``log_evidence_laplace``: exact for a Gaussian target, a second-order guess elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from bayesx import memory
from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.common.optimize import LaplaceFailed, fit_laplace, fixed_normal_draws
from bayesx.settings import AtLeast


@dataclass(frozen=True)
class LaplaceSettings(ApproximationSettings):
    max_iter: Annotated[int, AtLeast(1)] = 500  # L-BFGS iterations of the mode search


SUPPORT_DRAWS = 64  # draws of N(mode, H^-1) that check it lies where the density does


def share_outside(target, mode: Tensor, chol: Tensor, draws: int = SUPPORT_DRAWS) -> float:
    """The share of ``draws`` draws of N(mode, chol chol^T) (optimize.fixed_normal_draws) where log pi is -inf
    or NaN."""
    z = fixed_normal_draws(draws, mode)
    with torch.no_grad():
        log_p = target.log_prob(mode + z @ chol.T)
    return float((~torch.isfinite(log_p)).double().mean())


class Laplace(Approximation):
    """N(mode, H^-1); see the module docstring and ``conf/method/laplace.yaml``."""

    Settings = LaplaceSettings
    name = "laplace"
    summary_keys = ("log_evidence_laplace", *Approximation.summary_keys)

    def gradient_batch(self, inputs: RunInputs) -> int:
        return inputs.initial.shape[0]  # the mode search's starting points, in one batch

    def memory_needs(self, target, n_chains: int) -> list[memory.Need]:
        return [*super().memory_needs(target, n_chains), memory.hessian_need(
            target.dim, target.dtype, "use a low-rank Gaussian (method=pathfinder) or a model with fewer coordinates")]

    def approximate(self, target, inputs: RunInputs) -> Fit:
        out = Fit()
        try:
            laplace = fit_laplace(target, inputs.density, inputs.initial, self.settings.max_iter)
            if laplace.jitter > 0:  # MCMC starts accept a regularized precision; an approximation may not
                raise LaplaceFailed("the Hessian at the mode is not negative definite (a saddle or a flat direction)")
        except LaplaceFailed as exc:
            raise BayesxError(f"{exc}: this posterior has no Laplace approximation; use method=vi or an MCMC "
                              f"method") from None
        chol = torch.linalg.cholesky(laplace.cov)
        outside = share_outside(target, laplace.mode, chol)
        if outside > 0.5:  # a flat direction the Hessian calls curved (U3's ridge: variance 1e7 along it)
            raise BayesxError(f"N(mode, H^-1) puts {outside:.0%} of its mass where the density is zero or undefined "
                              f"(a flat direction at the mode): this posterior has no Laplace approximation; use "
                              f"method=vi or an MCMC method")
        dim = laplace.mode.shape[0]
        log_det_cov = 2.0 * float(torch.log(chol.diagonal()).sum())
        out.metrics.update({
            "log_evidence_laplace": laplace.log_prob + 0.5 * dim * math.log(2.0 * math.pi) + 0.5 * log_det_cov,
            "n_grad_evals": float(laplace.n_grad_evals),
            "mode_log_prob": laplace.log_prob,
        })
        out.tags["q_family"] = "laplace"
        out.fitted.update({"q_mean": laplace.mode.cpu(), "q_cov": laplace.cov.cpu()})
        out.approximation = GaussianQ(laplace.mode, chol)
        return out
