"""The tempered path shared by AIS and SMC: a normalized Gaussian base q0, the geometric bridge

    pi_beta(z) ∝ q0(z)^(1 - beta) p(z)^beta,   0 = beta_0 < beta_1 < ... < beta_T = 1,

and MCMC moves that leave one pi_beta invariant (random-walk Metropolis or HMC from
bayesx.kernels), with the step size carried from one temperature to the next and nudged towards a
target acceptance rate (the adaptation uses only the previous temperature's moves).

The base (``base``): ``gaussian``, q0 = N(base_mean, base_scale^2 I) with the moves in the
identity metric; or ``laplace``, q0 = N(mode, H^-1) from the Laplace approximation (bayesx.methods.common.optimize)
with the moves in the metric H^-1. Any normalized q0 keeps E[w] = Z; a q0 near the posterior
shortens the path (fewer temperatures for the same weight variance) and a metric matched to its
scales lets the moves take steps of the posterior's size in every direction (Neal 2001, sec. 6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels import hmc, rwm
from bayesx.kernels.density import Density
from bayesx.kernels.metric import Metric, identity_metric, make_metric
from bayesx.methods.vi.family import ApproximationSettings
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.common.optimize import LaplaceFailed, fit_laplace
from bayesx.settings import AtLeast, Positive

TARGET_ACCEPT = {"mh": 0.3, "hmc": 0.65}


@dataclass(frozen=True)
class TemperedSettings(ApproximationSettings):
    """The base and the moves of a tempered path (AIS and SMC)."""

    kernel: Literal["mh", "hmc"] = "hmc"
    n_steps: Annotated[int, AtLeast(1)] = 10  # moves per temperature
    step_size: Annotated[float, Positive()] = 0.2  # MH proposal sd or HMC step size at the first temperature
    n_leapfrog: Annotated[int, AtLeast(1)] = 10  # HMC only
    adapt_step_size: bool = True  # nudge the step size towards 0.3 (mh) / 0.65 (hmc) acceptance per temperature
    base: Literal["gaussian", "laplace"] = "gaussian"
    base_mean: float = 0.0  # base=gaussian
    base_scale: Annotated[float | None, Positive()] = None  # base=gaussian; null: the prior's sd, else 1

    def uses_gradients(self) -> bool:
        """The HMC move needs grad log pi, and so does the Laplace base's mode search; the MH move does not."""
        return self.kernel == "hmc" or self.base == "laplace"


def tempered(density: Density, base: GaussianQ, beta: float) -> Density:
    """pi_beta = q0^(1 - beta) pi^beta as a density the kernels move on: log pi_beta = (1 - beta) log q0 +
    beta log pi, its gradient the same mixture of q0's and the prepared density's (native or compiled where
    prepared)."""
    def log_prob(q: Tensor) -> Tensor:
        return (1.0 - beta) * base.log_prob(q) + beta * density.logp(q)

    def log_prob_and_grad(q: Tensor) -> tuple[Tensor, Tensor]:
        lp, grad = density.logp_and_grad(q)
        return (1.0 - beta) * base.log_prob(q) + beta * lp, (1.0 - beta) * base.grad_log_prob(q) + beta * grad

    return Density(log_prob, log_prob_and_grad, density.dim, density.dtype, density.device)


def base_for(target, density: Density, cfg: TemperedSettings, initial: Tensor | None,
             gen: torch.Generator) -> tuple[GaussianQ, int]:
    """(q0, gradient evaluations spent on it): N(base_mean, base_scale^2 I), base_scale null meaning the
    prior's sd where the target declares a N(0, s^2 I) prior (logistic regression), else 1; or the
    Laplace approximation found from the initial points."""
    if cfg.base == "laplace":
        start = initial if initial is not None else target.initial_point(1, gen)
        try:
            laplace = fit_laplace(target, density, start)
        except LaplaceFailed as exc:
            raise BayesxError(f"{exc}; use method.base=gaussian") from None
        return GaussianQ(laplace.mode, torch.linalg.cholesky(laplace.cov)), laplace.n_grad_evals
    scale = cfg.base_scale
    if scale is None:
        design = target.logistic_design()
        scale = math.sqrt(design.prior_var) if design is not None else 1.0
    full = dict(size=(target.dim,), dtype=target.dtype, device=target.device)
    return GaussianQ(torch.full(fill_value=cfg.base_mean, **full), torch.full(fill_value=scale, **full)), 0


def log_ratio(target, base: GaussianQ, z: Tensor) -> Tensor:
    """log p(z) - log q0(z): d log pi_beta / d beta, the weight increment per unit of beta."""
    return target.log_prob(z) - base.log_prob(z)


@dataclass
class Mover:
    """``n_steps`` moves per temperature with ``kernel`` (mh or hmc, ``n_leapfrog`` steps) in ``metric``
    (None: the identity)."""

    kernel: str
    step_size: float
    n_steps: int
    n_leapfrog: int
    adapt: bool = True
    grad_evals: int = 0
    metric: Metric | None = field(default=None, repr=False)

    def move(self, z: Tensor, tempered: Density, gen: torch.Generator) -> tuple[Tensor, float]:
        """z moved by n_steps transitions leaving ``tempered`` invariant; returns (z, mean acceptance)."""
        metric = self.metric if self.metric is not None else identity_metric(z.shape[-1], False, z.dtype, z.device)
        module = rwm if self.kernel == "mh" else hmc
        params = (rwm.RWMParams(self.step_size, metric) if self.kernel == "mh"
                  else hmc.HMCParams(self.step_size, metric, self.n_leapfrog))
        state = module.init(z, tempered)
        accept = 0.0
        for _ in range(self.n_steps):
            state, info = module.step(state, tempered, params, gen)
            accept += float(torch.nan_to_num(info.accept_prob, nan=0.0).mean())
            self.grad_evals += int(info.n_grad_evals.sum())
        accept /= self.n_steps
        if self.adapt:  # a multiplicative nudge towards the kernel's usual acceptance rate
            self.step_size *= math.exp(accept - TARGET_ACCEPT[self.kernel])
        return state.position, accept


def start_path(target, density: Density, cfg: TemperedSettings, n: int, initial: Tensor | None,
               gen: torch.Generator) -> tuple[GaussianQ, Tensor, Mover]:
    """The start of a tempered run (AIS, SMC): q0 (``base_for``), n draws from it, and the mover of
    the settings, in the metric of q0's covariance where q0 is the Laplace approximation."""
    base, grad_evals = base_for(target, density, cfg, initial, gen)
    z = base.sample(n, gen).to(dtype=target.dtype, device=target.device)
    metric = make_metric(base.covariance()) if cfg.base == "laplace" else None
    return base, z, Mover(cfg.kernel, cfg.step_size, cfg.n_steps, cfg.n_leapfrog, cfg.adapt_step_size, grad_evals,
                          metric)
