"""Hamiltonian Monte Carlo with a fixed number of leapfrog steps (Duane et al. 1987; Neal 2011).

One transition from q:
    p ~ N(0, M);  (q*, p*) = leapfrog^L(q, p);  accept q* with probability
    min(1, exp(H(q, p) - H(q*, p*))),  H(q, p) = -log pi(q) + p^T M^{-1} p / 2.
All chains move in lock-step as the leading batch dimension.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.common import (
    DIVERGENCE_THRESHOLD,
    DensityFaults,
    add_faults,
    energy_error,
    metropolis_accept,
    no_faults,
    select,
)
from bayesx.kernels.common import log_density  # noqa: F401  (the state carries log_prob)
from bayesx.kernels.density import Density
from bayesx.kernels.integrators import PhaseState, leapfrog_trajectory
from bayesx.kernels.metric import Metric, sample_momentum


class HMCState(NamedTuple):
    position: Tensor  # (chains, dim)
    log_prob: Tensor  # (chains,)
    grad: Tensor  # (chains, dim)


class HMCInfo(NamedTuple):
    accept_prob: Tensor  # (chains,) min(1, exp(-dH))
    accepted: Tensor  # (chains,) bool
    energy: Tensor  # (chains,) H at the retained state
    divergent: Tensor  # (chains,) bool, dH > 1000 or not finite
    n_grad_evals: Tensor  # (chains,) int
    faults: DensityFaults  # a proposal whose density is NaN or +inf (not a per-draw statistic)


class HMCParams(NamedTuple):
    step_size: float
    metric: Metric
    num_steps: int


def init(position: Tensor, density: Density) -> HMCState:
    log_prob, grad = density.logp_and_grad(position)
    return HMCState(position, log_prob, grad)


def propose(state: HMCState, density: Density, params: HMCParams,
            gen: torch.Generator) -> tuple[PhaseState, Tensor, Tensor]:
    """Draw p ~ N(0, M) and integrate: the proposal's end state and H at the start and at the end."""
    p0 = sample_momentum(params.metric, state.position.shape, gen)
    start = PhaseState(state.position, p0, state.log_prob, state.grad)
    return leapfrog_trajectory(start, params.step_size, params.num_steps, params.metric, density)


def accept(state: HMCState, end: PhaseState, h0: Tensor, h1: Tensor, num_steps: int,
           gen: torch.Generator) -> tuple[HMCState, HMCInfo]:
    """The Metropolis decision for each chain's proposal, and what happened."""
    delta = energy_error(h1, h0)
    accept_prob, accepted = metropolis_accept(-delta, gen)
    new_state = select(accepted, HMCState(end.position, end.log_prob, end.grad), state)
    info = HMCInfo(
        accept_prob=accept_prob,
        accepted=accepted,
        energy=torch.where(accepted, h1, h0),
        divergent=delta > DIVERGENCE_THRESHOLD,
        n_grad_evals=torch.full((state.position.shape[0],), num_steps, device=delta.device),
        faults=add_faults(no_faults(end.position), end.position, end.log_prob, end.grad),
    )
    return new_state, info


def step(state: HMCState, density: Density, params: HMCParams, gen: torch.Generator) -> tuple[HMCState, HMCInfo]:
    end, h0, h1 = propose(state, density, params, gen)
    return accept(state, end, h0, h1, params.num_steps, gen)
