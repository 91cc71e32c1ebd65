"""Delayed-acceptance pCN over a hierarchy of likelihood levels (Christen and Fox 2005; the
multilevel form of Dodwell et al. 2019 and Lykkegaard et al. 2023, "MLDA").

The target is pi_K(q) proportional to exp(l_K(q)) N(q; 0, C), l_K its exact log-likelihood; levels
0 < ... < K-1 are cheaper approximations l_k of it (the same PDE on coarser meshes), all functions
of the same parameter q. The level-k posterior is pi_k(q) ~ exp(l_k(q)) N(q; 0, C).

Level 0 is pCN: q* = rho q + sqrt(1 - rho^2) xi, xi ~ N(0, C), accepted with min(1, exp(l_0(q*) -
l_0(q))); the proposal is prior-reversible, so this kernel is reversible with respect to pi_0.
Level k >= 1 proposes q* as the end of a subchain of n_{k-1} level-(k-1) steps started at q, and
accepts it with

    log alpha_k = [l_k(q*) - l_k(q)] - [l_{k-1}(q*) - l_{k-1}(q)].

The subchain is a power of a pi_{k-1}-reversible kernel, hence itself pi_{k-1}-reversible, so its
proposal density satisfies pi_{k-1}(q) Q(q, q*) = pi_{k-1}(q*) Q(q*, q); substituting into the
Metropolis-Hastings ratio pi_k(q*) Q(q*, q) / (pi_k(q) Q(q, q*)) gives the ratio above. Every level
k is therefore pi_k-reversible, and the top level K samples the exact posterior, whatever the
coarse levels' error. With n = 1 and two levels this is Christen and Fox's two-stage algorithm: a
proposal the coarse level rejects costs no fine solve. A subchain that did not move costs none
either; the coarse levels' error shows only in the top level's acceptance.

The level-0 step may split the prior into a subspace and its complement (``SubspaceProposal``,
method=dapcn proposal=ae): in whitened coordinates v = L^-1 q (prior N(0, I)), with Q (D, d)
orthonormal, a = Q^T v and the complement v - Q a are independent under the prior. A pCN move of
one part with the other held is a pi_0-reversible block update (Metropolis within Gibbs); one
level-0 step is the palindrome latent, complement, latent, which is reversible again, so the ratios
above stay exact. The latent directions (AE-pCN's auto-encoder) can take bold steps
(``latent_step_size``) while the complement's h adapts on its own moves, without confining the
chain to the decoder's subspace as AE-pCN does.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels import pcn
from bayesx.kernels.common import where_rows


class PriorProposal(NamedTuple):
    """pCN's proposal: xi ~ N(0, C) from the target's prior sampler."""

    def noise(self, target, n: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        return pcn.prior_draws(target)(n, gen)

    def latent(self, position: Tensor) -> Tensor:
        return position.new_zeros((position.shape[0], 0))

    def moves(self, h: float, h_latent: float | None) -> tuple[tuple[float, float | None, bool], ...]:
        """One level-0 step: a single pCN move with h (the move h adapts to)."""
        return ((h, None, True),)

    def move(self, position: Tensor, latent: Tensor, noise: tuple[Tensor, ...], h: float, h_latent: float | None):
        r = pcn.rho(h)
        return r * position + math.sqrt(1.0 - r * r) * noise[0], latent


class SubspaceProposal(NamedTuple):
    """pCN with its own step in span(L Q) (see the module docstring); ``latent`` is a = Q^T L^-1 q."""

    colored_basis: Tensor  # L Q (D, d): the latent directions in the target's coordinates
    dual_basis: Tensor  # L^-T Q (D, d): a = Q^T L^-1 q = q @ (L^-T Q)

    @classmethod
    def from_directions(cls, chol: Tensor, directions: Tensor) -> SubspaceProposal:
        """The whitened, orthonormalized span of ``directions`` (D, d) in the target's coordinates (C = L L^T)."""
        whitened = torch.linalg.solve_triangular(chol, directions, upper=False)
        basis, _ = torch.linalg.qr(whitened)  # Q
        return cls(chol @ basis, torch.linalg.solve_triangular(chol.T, basis, upper=True))

    def noise(self, target, n: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        """A prior draw eta = L xi (the target's own sampler: circulant embedding on the elliptic model) and
        its latent part Q^T xi = (L^-T Q)^T eta."""
        colored = target.sample_prior(n, gen)
        return colored, colored @ self.dual_basis

    def latent(self, position: Tensor) -> Tensor:
        return position @ self.dual_basis

    def moves(self, h: float, h_latent: float | None) -> tuple[tuple[float, float | None, bool], ...]:
        """One level-0 step: latent, complement, latent (h = 0 holds a part still). The palindrome of two
        pi_0-reversible block updates is pi_0-reversible; h adapts to the complement move's acceptance."""
        latent_only = (0.0, h if h_latent is None else h_latent, False)
        return latent_only, (h, 0.0, True), latent_only

    def move(self, position: Tensor, latent: Tensor, noise: tuple[Tensor, ...], h: float, h_latent: float | None):
        colored, latent_noise = noise
        r_b = pcn.rho(h)
        r_a = pcn.rho(h if h_latent is None else h_latent)
        s_a, s_b = math.sqrt(1.0 - r_a * r_a), math.sqrt(1.0 - r_b * r_b)
        shift = ((r_a - r_b) * latent + (s_a - s_b) * latent_noise) @ self.colored_basis.T
        moved = position + shift if colored is None else r_b * position + s_b * colored + shift  # None: h = 0
        return moved, r_a * latent + s_a * latent_noise


class DAState(NamedTuple):
    position: Tensor  # (chains, dim)
    log_likelihood: Tensor  # (chains,) the exact (top-level) l
    level_log_lik: Tensor  # (levels, chains): l_0 .. l_{K-1} at position (stale above a level during its subchain)
    latent: Tensor  # (chains, d) the subspace coordinates (d = 0 for plain pCN proposals)
    noise: pcn.PriorNoise  # level-0 proposal noise made ahead, in blocks


class DAInfo(NamedTuple):
    accept_prob: Tensor  # mean acceptance probability of this step's level-0 moves made with h (what h adapts to)
    accepted: Tensor  # the exact chain moved
    fine_accept_prob: Tensor  # the top level's acceptance probability (1 where the subchain did not move)
    divergent: Tensor  # a failed solve (NaN likelihood) at any level: that proposal was rejected
    n_grad_evals: Tensor  # always 0
    n_fine_solves: Tensor  # solves of the exact model (0 or 1 per chain)
    n_coarse_solves: Tensor  # solves at all coarser levels
    log_lik: Tensor  # the exact l after the step


class DAParams(NamedTuple):
    step_size: float  # h of the level-0 pCN move (of the complement, with a subspace proposal)
    meshes: tuple[int, ...]  # the coarse levels, coarsest first (at least one)
    subchain_lengths: tuple[int, ...]  # n_k: level-k steps per level-(k+1) proposal, one per coarse level
    proposal: PriorProposal | SubspaceProposal = PriorProposal()
    latent_step_size: float | None = None  # h of the subspace part; None: step_size
    noise_block: int = 64


class _Tally:
    """What one step's recursion counts per chain."""

    def __init__(self, like: Tensor):
        zeros = lambda dtype: torch.zeros(like.shape[0], dtype=dtype, device=like.device)  # noqa: E731
        self.accept_sum, self.moves = zeros(like.dtype), 0
        self.coarse_solves, self.divergent = zeros(torch.long), zeros(torch.bool)


def init(position: Tensor, target, meshes: tuple[int, ...], proposal: PriorProposal | SubspaceProposal) -> DAState:
    """The state at ``position``: the exact and every coarse level's log-likelihood, the subspace coordinates."""
    levels = torch.stack([target.level_log_likelihood(position, mesh) for mesh in meshes])
    return DAState(position, target.log_likelihood(position), levels, proposal.latent(position), pcn.EMPTY_NOISE)


def log_density(state: DAState) -> Tensor:
    """The exact log-likelihood (the prior is in the proposal)."""
    return state.log_likelihood


def _level_log_lik(target, params: DAParams, level: int, q: Tensor) -> Tensor:
    if level == len(params.meshes):
        return target.log_likelihood(q)
    return target.level_log_likelihood(q, params.meshes[level])


def _replace_level(levels: Tensor, level: int, values: Tensor) -> Tensor:
    out = levels.clone()
    out[level] = values
    return out


def _coarsest_step(state: DAState, target, params: DAParams, gen, tally: _Tally) -> DAState:
    """One pi_0-reversible step: the proposal's pCN moves, each accepted on l_0."""
    for h, h_latent, adapted in params.proposal.moves(params.step_size, params.latent_step_size):
        if h == 0.0 and h_latent is not None:  # latent-only (complement held): only the latent noise, N(0, I_d)
            noise, block = (None, torch.randn(state.latent.shape, generator=gen, dtype=state.latent.dtype,
                                              device=state.latent.device)), state.noise
        else:
            noise, block = pcn.draw_noise(state.noise, partial(params.proposal.noise, target), state.position.shape[0],
                                          params.noise_block, gen)
        proposal, latent = params.proposal.move(state.position, state.latent, noise, h, h_latent)
        log_lik = _level_log_lik(target, params, 0, proposal)
        tally.coarse_solves += 1
        current = state.level_log_lik[0]
        accept_prob, accepted, failed = pcn.metropolis(current, log_lik, 0.0, gen)
        if adapted:
            tally.accept_sum += accept_prob
            tally.moves += 1
        tally.divergent |= failed
        state = DAState(where_rows(accepted, proposal, state.position), state.log_likelihood,
                        _replace_level(state.level_log_lik, 0, torch.where(accepted, log_lik, current)),
                        where_rows(accepted, latent, state.latent), block)
    return state


def two_stage_log_ratio(fine_new: Tensor, fine_old: Tensor, coarse_new: Tensor, coarse_old: Tensor) -> Tensor:
    """log alpha_k = [l_k(q*) - l_k(q)] - [l_{k-1}(q*) - l_{k-1}(q)] (the module docstring)."""
    return (fine_new - fine_old) - (coarse_new - coarse_old)


def _level_step(state: DAState, target, params: DAParams, level: int, gen, tally: _Tally):
    """One step of the pi_level-reversible kernel; returns the state and, at the top, its (accepted, prob, solved)."""
    if level == 0:
        return _coarsest_step(state, target, params, gen, tally), None
    proposal = state
    for _ in range(params.subchain_lengths[level - 1]):
        proposal, _ = _level_step(proposal, target, params, level - 1, gen, tally)
    top = level == len(params.meshes)
    current = state.log_likelihood if top else state.level_log_lik[level]
    moved = (proposal.position != state.position).any(1)
    new_log_lik = current.clone()
    if bool(moved.any()):
        new_log_lik[moved] = _level_log_lik(target, params, level, proposal.position[moved])
    if not top:
        tally.coarse_solves += moved.long()
    log_ratio = two_stage_log_ratio(new_log_lik, current, proposal.level_log_lik[level - 1],
                                    state.level_log_lik[level - 1])
    accept_prob, accepted, failed = pcn.metropolis(torch.zeros_like(current), log_ratio, 0.0, gen)
    accepted &= moved
    tally.divergent |= failed
    position = where_rows(accepted, proposal.position, state.position)
    levels = torch.where(accepted[None], proposal.level_log_lik, state.level_log_lik)
    if top:
        log_lik = torch.where(accepted, new_log_lik, current)
    else:
        log_lik = state.log_likelihood  # stale for moved rows until the level above evaluates it
        levels = _replace_level(levels, level, torch.where(accepted, new_log_lik, current))
    new = DAState(position, log_lik, levels, where_rows(accepted, proposal.latent, state.latent), proposal.noise)
    return new, ((accepted, torch.where(moved, accept_prob, torch.ones_like(accept_prob)), moved) if top else None)


def step(state: DAState, target, params: DAParams, gen: torch.Generator) -> tuple[DAState, DAInfo]:
    tally = _Tally(state.log_likelihood)
    new, fine = _level_step(state, target, params, len(params.meshes), gen, tally)
    accepted, fine_prob, solved = fine
    zeros = torch.zeros(accepted.shape[0], dtype=torch.long, device=accepted.device)
    return new, DAInfo(tally.accept_sum / max(tally.moves, 1), accepted, fine_prob, tally.divergent, zeros,
                       solved.long(), tally.coarse_solves, new.log_likelihood)
