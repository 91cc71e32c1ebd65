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

The subchain is a power of a pi_{k-1}-reversible kernel (level 1's: a palindrome of pi_0-reversible
moves, below), hence itself pi_{k-1}-reversible, so its proposal density satisfies
pi_{k-1}(q) Q(q, q*) = pi_{k-1}(q*) Q(q*, q); substituting into the Metropolis-Hastings ratio
pi_k(q*) Q(q*, q) / (pi_k(q) Q(q, q*)) gives the ratio above. Every level k is therefore
pi_k-reversible, and the top level K samples the exact posterior, whatever the coarse levels'
error. With n = 1 and two levels this is Christen and Fox's two-stage algorithm: a proposal the
coarse level rejects costs no fine solve. A subchain that did not move costs none either; the
coarse levels' error shows only in the top level's acceptance.

The level-0 step may split the prior into a subspace and its complement (``SubspaceProposal``,
method=dapcn proposal=ae): in whitened coordinates v = L^-1 q (prior N(0, I)), with Q (D, d)
orthonormal, a = Q^T v and the complement v - Q a are independent under the prior. A pCN move of
one part with the other held is a pi_0-reversible block update (Metropolis within Gibbs). A
product of reversible kernels in palindromic order is reversible again (its adjoint is the product
reversed), so level 1's subchain of n steps is latent, (complement, latent) n times: 2n + 1 coarse
solves, where n self-contained latent-complement-latent steps would take 3n; the ratios above stay
exact. The latent directions (AE-pCN's auto-encoder) can take bold steps
(``latent_step_size``) while the complement's h adapts on its own moves, without confining the
chain to the decoder's subspace as AE-pCN does.

Within a step the position is kept as q = position + offset (L Q)^T: a latent move only changes the
offset (d numbers), a complement move scales both parts, and a coarse level reads its inputs as
level_inputs(position) + offset level_inputs((L Q)^T), which is exact because a level's inputs are
linear in q (the field at its nodes). The full field, D numbers per chain, is formed once per step,
for the exact level; before, every level-0 move formed it (a (d, D) product each time). For the same
reason the state carries the coarsest level's inputs of ``position`` (``coarse_inputs``) and each
block of proposal noise its restriction: a move is linear in (position, noise), so applying it to
their restrictions gives the new position's, and the level-0 moves never restrict a whole field.

Levels are Gaussian likelihoods of the model's predictions F_k(q) at the sensors,
l_k(q) = -|W_k^T (y - F_k(q) - mu_k)|^2 / 2 (a :class:`Misfit`); without correction mu_k = 0 and
W_k = I / sigma. The adaptive error model of Cui, Fox and O'Sullivan (2011) treats the coarse
model's error B = F_K(q) - F_k(q) as Gaussian, N(mu_k, Sigma_k), estimated from the pairs
(F_K, F_k) that every fine solve yields (:class:`ErrorModel`), so the corrected level-k likelihood
is y ~ N(F_k(q) + mu_k, sigma^2 I + Sigma_k): W_k W_k^T = (sigma^2 I + Sigma_k)^-1. Every coarse
level is corrected towards the exact one. A correction changes the coarse levels, never the top
one, so the chain stays exact for any fixed correction; it is learnt during warm-up and frozen for
sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels import pcn
from bayesx.kernels.common import where_rows


class Misfit(NamedTuple):
    """l(F) = -|W^T (y - F - mu)|^2 / 2 for predictions F (..., m) of the observations y (m,)."""

    observations: Tensor
    bias: Tensor  # mu (m,)
    whitener: Tensor  # W (m, m)

    def __call__(self, predictions: Tensor) -> Tensor:
        r = (self.observations - predictions - self.bias) @ self.whitener
        return -0.5 * (r * r).sum(-1)


def plain_misfit(observations: Tensor, noise_sd: float) -> Misfit:
    """The uncorrected Gaussian likelihood with noise sd sigma: mu = 0, W = I / sigma."""
    m = observations.shape[0]
    eye = torch.eye(m, dtype=observations.dtype, device=observations.device)
    return Misfit(observations, torch.zeros_like(observations), eye / noise_sd)


class ErrorModel:
    """The adaptive error model (Cui, Fox and O'Sullivan 2011): the running mean mu_k and covariance
    Sigma_k of B = F_K(q) - F_k(q) over the fine solves seen, one per coarse level, and the corrected
    misfits they give (see the module docstring). A level stays uncorrected until ``min_pairs`` pairs."""

    def __init__(self, observations: Tensor, noise_sd: float, levels: int, min_pairs: int | None = None):
        m = observations.shape[0]
        self.observations, self.noise_sd = observations, float(noise_sd)
        self.min_pairs = 2 * m if min_pairs is None else min_pairs
        self.count = 0
        self.sum = observations.new_zeros((levels, m))
        self.outer = observations.new_zeros((levels, m, m))
        self._misfits: tuple[int, tuple[Misfit, ...]] | None = None  # (count, misfits) last made

    def add(self, fine: Tensor, coarse: Tensor) -> None:
        """Pairs at the rows where the fine solve ran: fine (n, m), coarse (levels, n, m); rows with a
        non-finite value (a failed solve) are skipped."""
        keep = torch.isfinite(fine).all(-1) & torch.isfinite(coarse).all(-1).all(0)
        bias = (fine[keep][None] - coarse[:, keep]).to(self.sum.dtype)
        self.count += int(keep.sum())
        self.sum += bias.sum(1)
        self.outer += bias.transpose(1, 2) @ bias

    def state(self) -> dict:
        """The pairs' count and sums, as a checkpoint stores them (:meth:`restore` takes them back)."""
        return {"count": self.count, "sum": self.sum.detach().cpu(), "outer": self.outer.detach().cpu()}

    def restore(self, state: dict) -> None:
        self.count = int(state["count"])
        self.sum = state["sum"].to(self.sum.device, self.sum.dtype)
        self.outer = state["outer"].to(self.outer.device, self.outer.dtype)
        self._misfits = None

    def misfits(self) -> tuple[Misfit, ...]:
        """One Misfit per coarse level, corrected once enough pairs are in, and the exact level's (plain);
        made again only when pairs were added since the last call."""
        if self._misfits is None or self._misfits[0] != self.count:
            self._misfits = (self.count, self._make_misfits())
        return self._misfits[1]

    def _make_misfits(self) -> tuple[Misfit, ...]:
        plain = plain_misfit(self.observations, self.noise_sd)
        if self.count < self.min_pairs:
            return (plain,) * (self.sum.shape[0] + 1)
        out = []
        eye = torch.eye(self.sum.shape[1], dtype=self.sum.dtype, device=self.sum.device)
        for total, outer in zip(self.sum, self.outer):
            mean = total / self.count
            cov = outer / self.count - torch.outer(mean, mean)
            factor = torch.linalg.cholesky(self.noise_sd ** 2 * eye + cov)  # L L^T = sigma^2 I + Sigma
            whitener = torch.linalg.solve_triangular(factor, eye, upper=False).T  # L^-T: |r L^-T|^2 = r C^-1 r^T
            out.append(Misfit(self.observations, mean, whitener))
        return (*out, plain)


class PriorProposal(NamedTuple):
    """pCN's proposal: xi ~ N(0, C) from the target's prior sampler."""

    def noise(self, density, n: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        return pcn.prior_draws(density)(n, gen)

    def latent(self, position: Tensor) -> Tensor:
        return position.new_zeros((position.shape[0], 0))

    def materialize(self, position: Tensor, offset: Tensor) -> Tensor:
        return position  # no offset: every move forms the whole position

    def offset_inputs(self, density, offset: Tensor, mesh: int | None) -> Tensor | float:
        return 0.0

    def level_inputs(self, density, position: Tensor, offset: Tensor, mesh: int | None) -> Tensor:
        return density.level_inputs(position, mesh)

    def subchain_moves(self, n: int, h: float, h_latent: float | None) -> tuple[tuple[float, float | None, bool], ...]:
        """Level 1's subchain: n pCN moves with h (the moves h adapts to)."""
        return ((h, None, True),) * n

    def move(self, position: Tensor, offset: Tensor, latent: Tensor, noise: tuple[Tensor, ...], h: float,
             h_latent: float | None):
        r = pcn.rho(h)
        return r * position + math.sqrt(1.0 - r * r) * noise[0], offset, latent


class SubspaceProposal:
    """pCN with its own step in span(L Q) (see the module docstring); ``latent`` is a = Q^T L^-1 q. Made for
    one target: it keeps the levels' inputs of L Q once computed."""

    def __init__(self, colored_basis: Tensor, dual_basis: Tensor):
        self.colored_basis = colored_basis  # L Q (D, d): the latent directions in the target's coordinates
        self._colored_rows = colored_basis.T.contiguous()  # (L Q)^T, stored row-major: offset @ it is 2x faster
        self.dual_basis = dual_basis  # L^-T Q (D, d): a = Q^T L^-1 q = q @ (L^-T Q)
        self._level_bases: dict[int | None, Tensor] = {}  # mesh -> level_inputs((L Q)^T) (d, the level's inputs)

    @classmethod
    def from_directions(cls, chol: Tensor, directions: Tensor) -> SubspaceProposal:
        """The whitened, orthonormalized span of ``directions`` (D, d) in the target's coordinates (C = L L^T)."""
        whitened = torch.linalg.solve_triangular(chol, directions, upper=False)
        return cls.from_whitened_basis(chol, torch.linalg.qr(whitened)[0])

    @classmethod
    def from_whitened_basis(cls, chol: Tensor, basis: Tensor) -> SubspaceProposal:
        """The span of Q = ``basis`` (D, d), orthonormal columns in whitened coordinates v = L^-1 q."""
        return cls(chol @ basis, torch.linalg.solve_triangular(chol.T, basis, upper=True))

    def noise(self, density, n: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        """A prior draw eta = L xi (the target's own sampler: circulant embedding on the elliptic model) and
        its latent part Q^T xi = (L^-T Q)^T eta."""
        colored = density.sample_prior(n, gen)
        return colored, colored @ self.dual_basis

    def latent(self, position: Tensor) -> Tensor:
        return position @ self.dual_basis

    def materialize(self, position: Tensor, offset: Tensor) -> Tensor:
        """q = position + offset (L Q)^T."""
        return torch.addmm(position, offset, self._colored_rows)

    def offset_inputs(self, density, offset: Tensor, mesh: int | None) -> Tensor:
        """What level ``mesh`` reads of offset (L Q)^T: offset level_inputs((L Q)^T), by linearity."""
        if mesh not in self._level_bases:
            self._level_bases[mesh] = density.level_inputs(self._colored_rows, mesh)
        return offset @ self._level_bases[mesh]

    def level_inputs(self, density, position: Tensor, offset: Tensor, mesh: int | None) -> Tensor:
        """What level ``mesh`` reads of q = position + offset (L Q)^T, by linearity without forming q."""
        return density.level_inputs(position, mesh) + self.offset_inputs(density, offset, mesh)

    def subchain_moves(self, n: int, h: float, h_latent: float | None) -> tuple[tuple[float, float | None, bool], ...]:
        """Level 1's subchain of n steps: latent, then (complement, latent) n times (h = 0 holds a part still),
        a palindrome of pi_0-reversible block updates; h adapts to the complement moves' acceptance."""
        latent_only = (0.0, h if h_latent is None else h_latent, False)
        return (latent_only,) + ((h, 0.0, True), latent_only) * n

    def move(self, position: Tensor, offset: Tensor, latent: Tensor, noise: tuple[Tensor, ...], h: float,
             h_latent: float | None):
        """q* = r_b q + s_b eta + ((r_a - r_b) a + (s_a - s_b) xi_a) (L Q)^T, with q = position + offset (L Q)^T:
        the new offset is r_b offset + (r_a - r_b) a + (s_a - s_b) xi_a, the position r_b position + s_b eta."""
        colored, latent_noise = noise
        r_b = pcn.rho(h)
        r_a = pcn.rho(h if h_latent is None else h_latent)
        s_a, s_b = math.sqrt(1.0 - r_a * r_a), math.sqrt(1.0 - r_b * r_b)
        shift = (r_a - r_b) * latent + (s_a - s_b) * latent_noise
        if colored is None:  # h = 0: the complement is held
            return position, offset + shift, r_a * latent + s_a * latent_noise
        return r_b * position + s_b * colored, r_b * offset + shift, r_a * latent + s_a * latent_noise


class DAState(NamedTuple):
    position: Tensor  # (chains, dim); within a step, with ``offset``: q = position + offset (L Q)^T
    log_likelihood: Tensor  # (chains,) the exact (top-level) l
    level_predictions: Tensor  # (levels, chains, m): F_0 .. F_{K-1} at position (stale above a level during its subchain)
    level_log_lik: Tensor  # (levels, chains): l_0 .. l_{K-1} from them, under the step's misfits
    latent: Tensor  # (chains, d) the subspace coordinates (d = 0 for plain pCN proposals)
    noise: pcn.PriorNoise  # level-0 proposal noise made ahead, in blocks, each with its coarsest-level inputs
    offset: Tensor  # (chains, d) latent moves not yet added to position (zero between steps)
    coarse_inputs: Tensor  # (chains, n_0) what the coarsest level reads of ``position`` (without the offset)


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
    misfits: tuple[Misfit, ...] | None = None  # one per coarse level and the exact level's; None: all plain


class _Tally:
    """What one step's recursion counts per chain."""

    def __init__(self, like: Tensor):
        zeros = lambda dtype: torch.zeros(like.shape[0], dtype=dtype, device=like.device)  # noqa: E731
        self.accept_sum, self.moves = zeros(like.dtype), 0
        self.coarse_solves, self.divergent = zeros(torch.long), zeros(torch.bool)


def _predictions(density, position: Tensor, mesh: int | None) -> Tensor:
    """F_mesh at ``position`` through the density's coarse levels: the level's inputs, then its solve."""
    return density.level_predictions_at(density.level_inputs(position, mesh), mesh)


def init(position: Tensor, density: pcn.PriorLikelihood, meshes: tuple[int, ...],
         proposal: PriorProposal | SubspaceProposal) -> DAState:
    """The state at ``position``: the exact log-likelihood, every coarse level's predictions, the subspace
    coordinates (the levels' log-likelihoods are filled in by each step, under its misfits)."""
    predictions = torch.stack([_predictions(density, position, mesh) for mesh in meshes])
    latent = proposal.latent(position)
    return DAState(position, density.log_likelihood(position), predictions, predictions.new_zeros(predictions.shape[:2]),
                   latent, pcn.EMPTY_NOISE, torch.zeros_like(latent), density.level_inputs(position, meshes[0]))


def log_density(state: DAState) -> Tensor:
    """The exact log-likelihood (the prior is in the proposal)."""
    return state.log_likelihood


def level_misfits(density, params: DAParams) -> tuple[Misfit, ...]:
    """The params' misfits, or the plain one of the target's observations at every level."""
    if params.misfits is not None:
        return params.misfits
    observations, noise_sd = density.sensor_data()
    return (plain_misfit(observations, noise_sd),) * (len(params.meshes) + 1)


def _evaluate(density, params: DAParams, misfits, level: int, position: Tensor,
              offset: Tensor) -> tuple[Tensor, Tensor]:
    """Predictions F_level(q) (NaN where a solve failed) and l_level(q) under the step's misfit, at a coarse
    level's q = position + offset (L Q)^T, or at the exact level's q = position (formed by the caller)."""
    if level == len(params.meshes):
        predictions = _predictions(density, position, None)
    else:
        mesh = params.meshes[level]
        predictions = density.level_predictions_at(params.proposal.level_inputs(density, position, offset, mesh), mesh)
    return predictions, misfits[level](predictions)


def _noise_with_inputs(density, params: DAParams) -> Callable[[int, torch.Generator], tuple[Tensor, ...]]:
    """The proposal's noise maker, each block followed by the coarsest level's inputs of its first tensor (the
    draws the position moves with), restricted in one batch."""
    def make(n: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        noise = params.proposal.noise(density, n, gen)
        return (*noise, density.level_inputs(noise[0], params.meshes[0]))

    return make


def _replace_level(levels: Tensor, level: int, values: Tensor) -> Tensor:
    out = levels.clone()
    out[level] = values
    return out


def _coarsest_subchain(state: DAState, density, params: DAParams, misfits, n: int, gen, tally: _Tally) -> DAState:
    """Level 1's proposal, a pi_0-reversible subchain of n steps: the proposal's pCN moves, each accepted on l_0."""
    mesh = params.meshes[0]
    for h, h_latent, adapted in params.proposal.subchain_moves(n, params.step_size, params.latent_step_size):
        if h == 0.0 and h_latent is not None:  # latent-only (complement held): only the latent noise, N(0, I_d)
            noise, block = (None, torch.randn(state.latent.shape, generator=gen, dtype=state.latent.dtype,
                                              device=state.latent.device), None), state.noise
        else:
            noise, block = pcn.draw_noise(state.noise, _noise_with_inputs(density, params), state.position.shape[0],
                                          params.noise_block, gen)
        noise, noise_inputs = tuple(noise[:-1]), noise[-1]
        proposal, offset, latent = params.proposal.move(state.position, state.offset, state.latent, noise, h, h_latent)
        # the move is linear in (position, noise[0]), row by row: applied to their inputs, it gives the proposal's
        inputs = params.proposal.move(state.coarse_inputs, state.offset, state.latent, (noise_inputs, *noise[1:]), h,
                                      h_latent)[0]
        predictions = density.level_predictions_at(inputs + params.proposal.offset_inputs(density, offset, mesh), mesh)
        log_lik = misfits[0](predictions)
        tally.coarse_solves += 1
        current = state.level_log_lik[0]
        accept_prob, accepted, failed = pcn.metropolis(current, log_lik, 0.0, gen)
        if adapted:
            tally.accept_sum += accept_prob
            tally.moves += 1
        tally.divergent |= failed
        state = DAState(where_rows(accepted, proposal, state.position), state.log_likelihood,
                        _replace_level(state.level_predictions, 0,
                                       where_rows(accepted, predictions, state.level_predictions[0])),
                        _replace_level(state.level_log_lik, 0, torch.where(accepted, log_lik, current)),
                        where_rows(accepted, latent, state.latent), block, where_rows(accepted, offset, state.offset),
                        where_rows(accepted, inputs, state.coarse_inputs))
    return state


def two_stage_log_ratio(fine_new: Tensor, fine_old: Tensor, coarse_new: Tensor, coarse_old: Tensor) -> Tensor:
    """log alpha_k = [l_k(q*) - l_k(q)] - [l_{k-1}(q*) - l_{k-1}(q)] (the module docstring)."""
    return (fine_new - fine_old) - (coarse_new - coarse_old)


class FineSolves(NamedTuple):
    """What the top level's step saw: the chains it solved and, there, the exact predictions and every coarse
    level's at the same proposal (the pairs the adaptive error model learns from)."""

    accepted: Tensor
    accept_prob: Tensor  # 1 where the subchain did not move
    solved: Tensor
    fine: Tensor  # (chains, m), NaN where not solved
    coarse: Tensor  # (levels, chains, m)


def _level_step(state: DAState, density, params: DAParams, misfits, level: int, gen, tally: _Tally):
    """One step of the pi_level-reversible kernel (level >= 1); returns the state and, at the top, its FineSolves."""
    n = params.subchain_lengths[level - 1]
    if level == 1:
        proposal = _coarsest_subchain(state, density, params, misfits, n, gen, tally)
    else:
        proposal = state
        for _ in range(n):
            proposal, _ = _level_step(proposal, density, params, misfits, level - 1, gen, tally)
    top = level == len(params.meshes)
    current = state.log_likelihood if top else state.level_log_lik[level]
    moved = (proposal.position != state.position).any(1) | (proposal.offset != state.offset).any(1)
    # the exact level reads the whole field: form it (a step starts with a zero offset, so state.position is q)
    position, offset, inputs = proposal.position, proposal.offset, proposal.coarse_inputs
    if top:  # the offset moves into the position, and its inputs into the coarsest level's
        inputs = inputs + params.proposal.offset_inputs(density, offset, params.meshes[0])
        position, offset = params.proposal.materialize(position, offset), torch.zeros_like(offset)
    new_log_lik = current.clone()
    new_predictions = torch.full_like(state.level_predictions[0], math.nan)
    if bool(moved.any()):
        new_predictions[moved], new_log_lik[moved] = _evaluate(density, params, misfits, level, position[moved],
                                                               offset[moved])
    if not top:
        tally.coarse_solves += moved.long()
    log_ratio = two_stage_log_ratio(new_log_lik, current, proposal.level_log_lik[level - 1],
                                    state.level_log_lik[level - 1])
    accept_prob, accepted, failed = pcn.metropolis(torch.zeros_like(current), log_ratio, 0.0, gen)
    accepted &= moved
    tally.divergent |= failed
    position, offset = where_rows(accepted, position, state.position), where_rows(accepted, offset, state.offset)
    predictions = torch.where(accepted[None, :, None], proposal.level_predictions, state.level_predictions)
    levels = torch.where(accepted[None], proposal.level_log_lik, state.level_log_lik)
    if top:
        log_lik = torch.where(accepted, new_log_lik, current)
    else:
        log_lik = state.log_likelihood  # stale for moved rows until the level above evaluates it
        predictions = _replace_level(predictions, level,
                                     where_rows(accepted, new_predictions, state.level_predictions[level]))
        levels = _replace_level(levels, level, torch.where(accepted, new_log_lik, current))
    new = DAState(position, log_lik, predictions, levels, where_rows(accepted, proposal.latent, state.latent),
                  proposal.noise, offset, where_rows(accepted, inputs, state.coarse_inputs))
    if not top:
        return new, None
    prob = torch.where(moved, accept_prob, torch.ones_like(accept_prob))
    return new, FineSolves(accepted, prob, moved, new_predictions, proposal.level_predictions)


def step_with_solves(state: DAState, density: pcn.PriorLikelihood, params: DAParams,
                     gen: torch.Generator) -> tuple[DAState, DAInfo, FineSolves]:
    """One step (see :func:`step`) and what its fine solves saw."""
    misfits = level_misfits(density, params)
    levels = torch.stack([misfit(predictions) for misfit, predictions in zip(misfits, state.level_predictions)])
    state = state._replace(level_log_lik=levels)  # under this step's misfits (the error model may have moved)
    tally = _Tally(state.log_likelihood)
    new, fine = _level_step(state, density, params, misfits, len(params.meshes), gen, tally)
    zeros = torch.zeros(fine.accepted.shape[0], dtype=torch.long, device=fine.accepted.device)
    info = DAInfo(tally.accept_sum / max(tally.moves, 1), fine.accepted, fine.accept_prob, tally.divergent, zeros,
                  fine.solved.long(), tally.coarse_solves, new.log_likelihood)
    return new, info, fine


def step(state: DAState, density: pcn.PriorLikelihood, params: DAParams, gen: torch.Generator) -> tuple[DAState, DAInfo]:
    new, info, _ = step_with_solves(state, density, params, gen)
    return new, info
