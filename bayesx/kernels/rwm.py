"""Random-walk Metropolis: q* = q + s L z, z ~ N(0, I), accepted with min(1, pi(q*) / pi(q)).

L L^T is the proposal covariance shape (adapted to the posterior covariance during warm-up,
the same estimate HMC uses as its inverse mass matrix) and s the scale, tuned towards the
acceptance rate 0.234 that is optimal for Gaussian-like targets in high dimension
(Roberts, Gelman and Gilks 1997).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.common import metropolis_accept, where_rows
from bayesx.kernels.common import log_density  # noqa: F401  (the state carries log_prob)
from bayesx.kernels.density import Density
from bayesx.kernels.metric import Metric, scale_noise


class RWMState(NamedTuple):
    position: Tensor  # (chains, dim)
    log_prob: Tensor  # (chains,)


class RWMInfo(NamedTuple):
    accept_prob: Tensor
    accepted: Tensor
    divergent: Tensor  # a proposal whose log density is NaN (counted, then rejected)
    n_grad_evals: Tensor  # always 0: RWM uses no gradients


class RWMParams(NamedTuple):
    step_size: float  # the proposal scale s
    metric: Metric


def init(position: Tensor, density: Density) -> RWMState:
    return RWMState(position, density.logp(position))


def step(state: RWMState, density: Density, params: RWMParams, gen: torch.Generator) -> tuple[RWMState, RWMInfo]:
    n_chains = state.position.shape[0]
    z = torch.randn(state.position.shape, generator=gen, dtype=state.position.dtype, device=state.position.device)
    proposal = state.position + params.step_size * scale_noise(params.metric, z)
    log_prob = density.logp(proposal)
    failed = torch.isnan(log_prob)
    accept_prob, accepted = metropolis_accept(log_prob - state.log_prob, gen)
    new_state = RWMState(
        where_rows(accepted, proposal, state.position), torch.where(accepted, log_prob, state.log_prob)
    )
    info = RWMInfo(accept_prob, accepted, failed, torch.zeros(n_chains, dtype=torch.long, device=log_prob.device))
    return new_state, info
