"""AE-pCN (Deep MCMC sec. 4.2): the pCN proposal made in an auto-encoder's latent space, decoded and
accepted in the original space. The stages (pCN pre-samples, training, timing) are those of AE-HMC
(``bayesx.methods.mcmc.autoencoding.AutoEncodingMethod``).

The chain lives on the decoder's manifold q = psi(z) (bayesx.kernels.latent_hmc.LatentSpace). Its target is
the posterior pulled back to the latent chart, pi_h(z) = exp(l(psi(z))) pi_0(psi(z)) vol(z), with
vol(z) = det(J_psi^T J_psi)^(1/2). The latent reference measure is the prior restricted to the
decoder's linearization at z = 0, q = m + B z (B = d psi / dz; exact for linear decoders):

    P = B^T C^-1 B,   mu = -P^-1 B^T C^-1 m,   reference N(mu, P^-1)

and one iteration proposes

    z* = mu + rho (z - mu) + sqrt(1 - rho^2) xi_h,   xi_h ~ N(0, P^-1),   q* = psi(z*)

The proposal is reversible with respect to N(mu, P^-1), so the exact acceptance ratio is

    log a = l(q*) - l(q) + c(z*) - c(z),   c(z) = log pi_0(psi(z)) + log vol(z) - log N(z; mu, P^-1)

For a linear (or PCA) decoder c is constant: the reference is exactly the restricted prior, and the
likelihood ratio alone (pCN's own rule) is exact on the manifold. For a tanh decoder c varies;
``volume_correction: true`` includes it, false drops it (approximate, as Deep MCMC sec. 3.3).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels import pcn
from bayesx.kernels.common import Kernel, where_rows
from bayesx.kernels.latent_hmc import LatentSpace, gram_logdet

JITTER = 1e-10


def decoder_linearization(space: LatentSpace) -> tuple[Tensor, Tensor]:
    """m and B of the decoder's linearization q = m + B z at z = 0 (exact for linear decoders)."""
    zero = torch.zeros(space.latent_dim, dtype=space.mean.dtype, device=space.mean.device)
    offset = space.decode_position(zero[None])[0]  # m (bias-free decoders map 0 to the pre-sample mean)
    basis = torch.func.jacrev(lambda z: space.decode_position(z[None])[0])(zero)  # B (D, d)
    return offset, basis


class LatentReference:
    """N(mu, P^-1): the prior restricted to the decoder's linearization (see the module docstring)."""

    def __init__(self, space: LatentSpace, prior):
        offset, basis = decoder_linearization(space)
        chol_prior = prior.prior_factor()
        y = torch.linalg.solve_triangular(chol_prior, basis, upper=False)  # L^-1 B
        w = torch.linalg.solve_triangular(chol_prior, offset[:, None], upper=False)  # L^-1 m
        precision = y.T @ y
        precision = precision + JITTER * precision.diagonal().mean() * torch.eye(
            precision.shape[0], dtype=precision.dtype, device=precision.device)
        self.chol = torch.linalg.cholesky(precision)  # P = R R^T
        self.mean = -torch.cholesky_solve(y.T @ w, self.chol)[:, 0]

    def sample(self, n: int, gen: torch.Generator) -> Tensor:
        """xi_h ~ N(0, P^-1) as R^-T eps."""
        eps = torch.randn((n, self.chol.shape[0]), generator=gen, dtype=self.chol.dtype, device=self.chol.device)
        return torch.linalg.solve_triangular(self.chol.T, eps.T, upper=True).T

    def log_density(self, z: Tensor) -> Tensor:
        """log N(z; mu, P^-1) up to a constant: -1/2 |R^T (z - mu)|^2."""
        d = (z - self.mean) @ self.chol
        return -0.5 * (d * d).sum(-1)


class LatentPCNState(NamedTuple):
    position: Tensor  # (chains, D) = psi(z)
    log_likelihood: Tensor  # (chains,)
    latent: Tensor  # (chains, d)
    correction: Tensor  # (chains,) the bracket of the exact ratio at z (0 without volume correction)


class LatentPCNParams(NamedTuple):
    step_size: float  # h


class LatentProposal(NamedTuple):
    """What a latent pCN kernel is built around: the latent space, its reference measure, and whether
    the acceptance ratio includes the prior and volume correction."""

    space: LatentSpace
    reference: LatentReference
    volume_correction: bool


def decoder_log_volume(space: LatentSpace, z: Tensor) -> Tensor:
    """1/2 log det(J_psi^T J_psi) at z; a constant (returned as 0) for linear decoders."""
    if not space.ae.nonlinear:
        return torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
    _, jac = space.ae.g_and_jacobian(z)
    return 0.5 * gram_logdet(jac.mT @ space.decoder_gram_q @ jac)


def correction(density: pcn.PriorLikelihood, proposal: LatentProposal, z: Tensor, q: Tensor) -> Tensor:
    if not (proposal.volume_correction and proposal.space.ae.nonlinear):  # constant for linear decoders
        return torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
    return density.prior_log_prob(q) + decoder_log_volume(proposal.space, z) - proposal.reference.log_density(z)


def init(proposal: LatentProposal, position: Tensor, density: pcn.PriorLikelihood) -> LatentPCNState:
    """Project the start onto the decoder's manifold, q = psi(phi(position))."""
    z, _ = proposal.space.encode_position(position)
    q = proposal.space.decode_position(z)
    return LatentPCNState(q, density.log_likelihood(q), z, correction(density, proposal, z, q))


def step(proposal: LatentProposal, state: LatentPCNState, density: pcn.PriorLikelihood, params: LatentPCNParams,
         gen: torch.Generator):
    r = pcn.rho(params.step_size)
    ref = proposal.reference
    z_new = ref.mean + r * (state.latent - ref.mean) + math.sqrt(1.0 - r * r) * ref.sample(state.latent.shape[0], gen)
    q_new = proposal.space.decode_position(z_new)
    log_lik = density.log_likelihood(q_new)
    corr = correction(density, proposal, z_new, q_new)
    accept_prob, accepted, failed = pcn.metropolis(state.log_likelihood, log_lik, corr - state.correction, gen)
    new = LatentPCNState(where_rows(accepted, q_new, state.position),
                         torch.where(accepted, log_lik, state.log_likelihood),
                         where_rows(accepted, z_new, state.latent), torch.where(accepted, corr, state.correction))
    zeros = torch.zeros(accepted.shape[0], dtype=torch.long, device=accepted.device)
    return new, pcn.PCNInfo(accept_prob, accepted, failed, zeros, new.log_likelihood)


def make_kernel(proposal: LatentProposal) -> Kernel:
    return Kernel(partial(init, proposal), partial(step, proposal), pcn.log_density)
