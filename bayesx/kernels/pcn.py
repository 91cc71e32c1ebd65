"""Preconditioned Crank-Nicolson (Cotter, Roberts, Stuart and White 2013; Deep MCMC sec. 4.2).

For a posterior pi(q) proportional to exp(l(q)) N(q; 0, C):

    q* = rho q + sqrt(1 - rho^2) xi,   xi ~ N(0, C),   rho = (1 - h/4) / (1 + h/4)
    accept with probability min(1, exp(l(q*) - l(q)))

The proposal is reversible with respect to the prior, so only the likelihood ratio enters and the
acceptance rate does not collapse as the mesh is refined. ``h`` is the step size the driver adapts
(dual averaging towards ``target_accept``); it is capped at 4 (rho = 0: independent prior draws).

Prior draws xi are colored in blocks (one matrix product for many iterations) because a dense
6561 x 6561 product per draw would cost as much as the PDE solve.

The kernel takes the density as a :class:`PriorLikelihood` value (the likelihood and the Gaussian prior as
functions, as BlackJAX's elliptical slice sampler takes ``loglikelihood_fn`` and the prior's covariance), made
once per run from the model's Gaussian-prior view. A proposal whose likelihood is NaN (a failed solve) is
rejected and counted in ``divergent``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.common import metropolis_accept, where_rows

MAX_H = 4.0


@dataclass(frozen=True)
class PriorLikelihood:
    """pi(q) proportional to exp(l(q)) N(q; 0, C), C = L L^T, as the prior-preserving kernels (pCN, AE-pCN's latent
    chain, delayed-acceptance pCN) take it: the log-likelihood l, prior draws, log N(q; 0, C) and L; with coarse
    levels (delayed acceptance), each level's linear inputs of q, its predictions from them, and the observations
    and noise sd. Made once per run by the method (:meth:`of`); the kernels ask nothing else of the model."""

    dim: int
    dtype: torch.dtype
    device: torch.device
    log_likelihood: Callable[[Tensor], Tensor]
    sample_prior: Callable[[int, torch.Generator], Tensor]
    prior_log_prob: Callable[[Tensor], Tensor]
    prior_factor: Callable[[], Tensor]
    level_inputs: Callable[[Tensor, int | None], Tensor] | None = None
    level_predictions_at: Callable[[Tensor, int | None], Tensor] | None = None
    sensor_data: Callable[[], tuple[Tensor, float]] | None = None

    @classmethod
    def of(cls, target) -> PriorLikelihood:
        """The value of a model's Gaussian-prior view (bayesx.targets.base.GaussianPrior), with its coarse levels
        where it has them (CoarseLevels: what delayed acceptance uses), on the model's parameter space."""
        prior, levels = target.gaussian_prior(), target.coarse_levels()
        coarse = (levels.level_inputs, levels.level_predictions_at, levels.sensor_data) if levels else (None,) * 3
        return cls(target.dim, target.dtype, target.device, prior.log_likelihood, prior.sample_prior,
                   prior.prior_log_prob, prior.prior_factor, *coarse)


def rho(h: float) -> float:
    h = min(h, MAX_H)
    return (1.0 - h / 4.0) / (1.0 + h / 4.0)


class PriorNoise(NamedTuple):
    """Proposal noise made ``block`` iterations at a time, tensors (block, chains, ...), and the next one to use."""

    draws: tuple[Tensor, ...]
    next: int


EMPTY_NOISE = PriorNoise((), 0)


def prior_draws(prior: PriorLikelihood) -> Callable[[int, torch.Generator], tuple[Tensor, ...]]:
    """pCN's noise: n prior draws xi ~ N(0, C) from the model's sampler, as a one-tensor tuple."""
    return lambda n, gen: (prior.sample_prior(n, gen),)


def draw_noise(noise: PriorNoise, make: Callable[[int, torch.Generator], tuple[Tensor, ...]], n_chains: int,
               block: int, gen: torch.Generator) -> tuple[tuple[Tensor, ...], PriorNoise]:
    """The next iteration's noise for every chain and the noise state after it; ``make(n, gen)`` makes a new block
    (n = block x chains rows of each tensor) when the last is used up or the number of chains changed."""
    if not noise.draws or noise.next >= noise.draws[0].shape[0] or noise.draws[0].shape[1] != n_chains:
        noise = PriorNoise(tuple(t.reshape(block, n_chains, -1) for t in make(block * n_chains, gen)), 0)
    return tuple(t[noise.next] for t in noise.draws), PriorNoise(noise.draws, noise.next + 1)


class PCNState(NamedTuple):
    position: Tensor  # (chains, dim)
    log_likelihood: Tensor  # (chains,)
    noise: PriorNoise  # prior draws made ahead, in blocks


class PCNInfo(NamedTuple):
    accept_prob: Tensor
    accepted: Tensor
    divergent: Tensor  # the proposal's likelihood was NaN (failed solve): rejected
    n_grad_evals: Tensor  # always 0
    log_lik: Tensor  # l(q) of the state after the step (named so ArviZ keeps it among sample stats)


class PCNParams(NamedTuple):
    step_size: float  # h
    noise_block: int = 64  # iterations of prior draws made at once


def init(position: Tensor, density: PriorLikelihood) -> PCNState:
    return PCNState(position, density.log_likelihood(position), EMPTY_NOISE)


def log_density(state: PCNState) -> Tensor:
    """What the chain tracks of the target: the log-likelihood (the prior is in the proposal)."""
    return state.log_likelihood


def metropolis(state_ll: Tensor, proposal_ll: Tensor, extra_log_ratio: Tensor | float, gen: torch.Generator):
    """Accept probabilities and decisions for log ratios l* - l + extra; NaN counts as a rejection."""
    failed = torch.isnan(proposal_ll)
    accept_prob, accepted = metropolis_accept(proposal_ll - state_ll + extra_log_ratio, gen)
    return accept_prob, accepted, failed


def step(state: PCNState, density: PriorLikelihood, params: PCNParams, gen: torch.Generator) -> tuple[PCNState, PCNInfo]:
    r = rho(params.step_size)
    (xi,), noise = draw_noise(state.noise, prior_draws(density), state.position.shape[0], params.noise_block, gen)
    proposal = r * state.position + math.sqrt(1.0 - r * r) * xi
    log_lik = density.log_likelihood(proposal)
    accept_prob, accepted, failed = metropolis(state.log_likelihood, log_lik, 0.0, gen)
    new = PCNState(where_rows(accepted, proposal, state.position),
                   torch.where(accepted, log_lik, state.log_likelihood), noise)
    zeros = torch.zeros(accepted.shape[0], dtype=torch.long, device=accepted.device)
    return new, PCNInfo(accept_prob, accepted, failed, zeros, new.log_likelihood)
