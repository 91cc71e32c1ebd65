"""The tempered path shared by AIS and SMC: a normalized Gaussian base q0 = N(mean, scale^2 I), the
geometric bridge

    pi_beta(z) ∝ q0(z)^(1 - beta) p(z)^beta,   0 = beta_0 < beta_1 < ... < beta_T = 1,

and MCMC moves that leave one pi_beta invariant (random-walk Metropolis or HMC from
bayesx.kernels), with the step size carried from one temperature to the next and nudged towards a
target acceptance rate (the adaptation uses only the previous temperature's moves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from bayesx.kernels import hmc, rwm
from bayesx.kernels.metric import identity_metric
from bayesx.targets.base import TargetBase

LOG_2PI = math.log(2.0 * math.pi)
TARGET_ACCEPT = {"mh": 0.3, "hmc": 0.65}


@dataclass
class GaussianBase:
    """q0 = N(mean, scale^2 I), normalized."""

    mean: float
    scale: float
    dim: int

    def sample(self, n: int, gen: torch.Generator, dtype: torch.dtype, device: torch.device) -> Tensor:
        eps = torch.randn((n, self.dim), generator=gen, dtype=dtype, device=gen.device).to(device)
        return self.mean + self.scale * eps

    def log_prob(self, z: Tensor) -> Tensor:
        u = (z - self.mean) / self.scale
        return -0.5 * (u * u).sum(-1) - self.dim * (math.log(self.scale) + 0.5 * LOG_2PI)

    def grad(self, z: Tensor) -> Tensor:
        return -(z - self.mean) / self.scale**2


class Tempered(TargetBase):
    """pi_beta as a target the kernels can move on."""

    def __init__(self, target, base: GaussianBase, beta: float):
        self.target, self.base, self.beta = target, base, beta
        self.dim, self.dtype, self.device = target.dim, target.dtype, target.device

    def log_prob(self, q: Tensor) -> Tensor:
        return (1.0 - self.beta) * self.base.log_prob(q) + self.beta * self.target.log_prob(q)

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        lp, grad = self.target.log_prob_and_grad(q)
        b = self.beta
        return (1.0 - b) * self.base.log_prob(q) + b * lp, (1.0 - b) * self.base.grad(q) + b * grad


def base_for(target, mean: float, scale: float | None) -> GaussianBase:
    """q0 = N(mean, scale^2 I); scale null: the prior's sd where the target declares a N(0, s^2 I) prior
    (logistic regression), else 1."""
    if scale is None:
        scale = math.sqrt(target.logistic_design()[2]) if target.capabilities.logistic_design else 1.0
    return GaussianBase(mean, scale, target.dim)


def log_ratio(target, base: GaussianBase, z: Tensor) -> Tensor:
    """log p(z) - log q0(z): d log pi_beta / d beta, the weight increment per unit of beta."""
    return target.log_prob(z) - base.log_prob(z)


@dataclass
class Mover:
    """``n_steps`` moves per temperature with ``kernel`` (mh or hmc, ``n_leapfrog`` steps)."""

    kernel: str
    step_size: float
    n_steps: int
    n_leapfrog: int
    adapt: bool = True
    grad_evals: int = 0

    def move(self, z: Tensor, tempered: Tempered, gen: torch.Generator) -> tuple[Tensor, float]:
        """z moved by n_steps transitions leaving ``tempered`` invariant; returns (z, mean acceptance)."""
        metric = identity_metric(z.shape[-1], False, z.dtype, z.device)
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


def start_path(target, cfg, n: int, gen: torch.Generator) -> tuple[GaussianBase, Tensor, Mover]:
    """The start of a tempered run (AIS, SMC): q0 from the settings' base_mean / base_scale, n draws
    from it, and the mover of the settings' kernel, n_steps, step_size, n_leapfrog, adapt_step_size."""
    base = base_for(target, cfg.base_mean, cfg.base_scale)
    z = base.sample(n, gen, target.dtype, target.device)
    return base, z, Mover(cfg.kernel, cfg.step_size, cfg.n_steps, cfg.n_leapfrog, cfg.adapt_step_size)
