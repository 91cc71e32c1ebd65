"""Auto-encoding HMC (Shahbaba, Lomeli, Chen and Lan, "Deep Markov Chain Monte Carlo", Alg. 1).

The parameter q_v in R^D is standardized by the pre-sample mean m and standard deviation s, and the
momentum p_v ~ N(0, M) with M^-1 = diag(s^2) by its own scale 1/s:

    phi_q(q) = enc((q - m) / s)      psi_q(z) = m + s * dec(z)
    phi_p(p) = enc(s * p)            psi_p(z) = dec(z) / s

One iteration draws p_v, encodes q_h = phi_q(q_v), p_h = phi_p(p_v), runs L leapfrog steps on

    U_h(q_h) = U(psi_q(q_h))              (Deep MCMC eq. 2)
    K_h(p_h) = K(psi_p(p_h)) = |W g(p_h)|^2 / 2   (Deep MCMC eq. 1 and 3; non-quadratic for tanh maps)

and decodes q_v* = psi_q(q_h*), p_v* = psi_p(p_h*). The proposal is accepted with probability
min(1, exp(H_start - H(q_v*, p_v*)) * V), where V is the Gram-determinant volume ratio of Deep MCMC
eq. 5-6 (``volume_correction``; V = 1 is the "approximate Bayes" variant of Deep MCMC sec. 3.3):

    log V = 1/2 [ log det G(dpsi_q(q_h*)) + log det G(dpsi_p(p_h*))
                + log det G(dphi_q(q_v))^T + log det G(dphi_p(p_v))^T ]

with G(J) = J^T J for the tall decoder Jacobians and J J^T for the wide encoder ones (a k-volume,
a correction of the printed formula). H_start is H(q_v, p_v) in the original space (``energy_at_start="original"``, Deep MCMC
Alg. 1 as printed) or H at the reconstructed point (psi_q(q_h), psi_p(p_h))
(``"reconstructed"``, the default). With latent_dim < D the printed form compares a full
D-dimensional momentum with a decoded d-dimensional one, so its acceptance carries a drift of about
(D - d)/2 nats and step-size adaptation runs away; the reconstructed form is the latent chain's own
energy error. The two coincide when psi = phi^-1, where the sampler is exact.

All products with the D-dimensional maps are precomputed once (Deep MCMC eq. 7): the target is restricted
to the decoder's last linear layer, q = m + (s W) u with u = g(z), so a latent gradient costs
O(n h) for logistic regression; the Gram matrices fold in W^T diag(s^{+-2}) W and
E1 diag(s^{-+2}) E1^T (h x h).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesx.kernels.density import Density
from bayesx.kernels.common import (
    Kernel,
    DIVERGENCE_THRESHOLD,
    energy_error,
    metropolis_accept,
    where_rows,
)
from bayesx.kernels.common import log_density  # noqa: F401  (the state carries log_prob)
from bayesx.nn.autoencoder import AutoEncoder

ENERGY_AT_START = ("reconstructed", "original")


def gram_logdet(gram: Tensor) -> Tensor:
    """log det of symmetric positive definite matrices (..., k, k) by Cholesky; -inf where singular."""
    chol, info = torch.linalg.cholesky_ex(gram)
    logdet = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    return torch.where(info == 0, logdet, torch.full_like(logdet, -float("inf")))


class LatentSpace:
    """The latent Hamiltonian of one trained auto-encoder on one target, with its precomputations."""

    def __init__(self, target, ae: AutoEncoder, mean: Tensor, scale: Tensor):
        self.target, self.ae, self.mean, self.scale = target, ae, mean, scale
        self.dim, self.latent_dim = mean.shape[0], ae.latent_dim
        W, E1 = ae.W.detach(), ae.E1.detach()
        self.decoder_basis = scale[:, None] * W  # psi_q(z) = m + (s W) g(z)
        self.encoder_weight = E1
        self.encoder_rows = E1 / scale  # phi_q(q) = f(E1 diag(1/s) q - E1 diag(1/s) m)
        self.encoder_bias = -(self.encoder_rows @ mean)
        self.restricted = target.restrict(mean, self.decoder_basis)  # q = m + (s W) u
        self.kinetic_gram = W.T @ W  # K_h = g^T (W^T W) g / 2
        self.decoder_gram_q = W.T @ (scale[:, None] ** 2 * W)  # W^T diag(s^2) W
        self.decoder_gram_p = W.T @ (W / scale[:, None] ** 2)
        self.encoder_gram_q = (E1 / scale**2) @ E1.T  # E1 diag(s^-2) E1^T
        self.encoder_gram_p = (E1 * scale**2) @ E1.T
        if not ae.nonlinear:  # every Jacobian is constant: the volume term is one number
            self.constant_log_volume = 0.5 * (gram_logdet(self.decoder_gram_q) + gram_logdet(self.decoder_gram_p)
                                              + gram_logdet(self.encoder_gram_q) + gram_logdet(self.encoder_gram_p))

    # --- maps between the spaces (batched over chains) --------------------------------------------
    def encode_position(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """q_h = phi_q(q) and the first-layer activation E1 x (for the encoder volume)."""
        v = F.linear(q, self.encoder_rows, self.encoder_bias)
        return self.ae.f(v), v

    def encode_momentum(self, p: Tensor) -> tuple[Tensor, Tensor]:
        return self.encode_noise(p * self.scale)

    def encode_noise(self, noise: Tensor) -> tuple[Tensor, Tensor]:
        """phi_p(p) for p = noise / s, p ~ N(0, M): the encoder sees s p = noise itself."""
        v = F.linear(noise, self.encoder_weight)
        return self.ae.f(v), v

    def decode_position(self, z: Tensor) -> Tensor:
        return F.linear(self.ae.g(z), self.decoder_basis, self.mean)

    def decode_momentum(self, z: Tensor) -> Tensor:
        return self.ae.decode(z) / self.scale

    # --- the latent Hamiltonian -----------------------------------------------------------------------
    def potential_and_grad(self, z: Tensor, restricted: Density) -> tuple[Tensor, Tensor]:
        """U_h(z) = -log pi(psi_q(z)) and its gradient J_g^T grad_u (Deep MCMC eq. 2); ``restricted`` is the
        prepared density of ``self.restricted`` (bayesx.kernels.backend.prepare)."""
        u, jac = self.ae.g_and_jacobian(z)
        log_prob, grad_u = restricted.logp_and_grad(u)
        grad = -grad_u if jac is None else -torch.einsum("ch,chd->cd", grad_u, jac)
        return -log_prob, grad

    def potential_grad(self, z: Tensor) -> Tensor:
        """grad U_h(z) alone (inner leapfrog steps need no density value)."""
        u, jac = self.ae.g_and_jacobian(z)
        grad_u = self.restricted.potential_grad(u)
        return grad_u if jac is None else torch.einsum("ch,chd->cd", grad_u, jac)

    def kinetic(self, p: Tensor) -> Tensor:
        """K_h(p) = |W g(p)|^2 / 2 (Deep MCMC eq. 1); its gradient J_g^T W^T W g drives ``drift`` (eq. 3)."""
        u = self.ae.g(p)
        return 0.5 * (u * (u @ self.kinetic_gram)).sum(-1)

    def drift(self, z: Tensor, p: Tensor, step_size: float) -> Tensor:
        """The leapfrog position update z + eps grad K_h(p); one fused kernel for linear maps."""
        u, jac = self.ae.g_and_jacobian(p)
        if jac is None:
            return torch.addmm(z, u, self.kinetic_gram, alpha=step_size)
        return z + step_size * torch.einsum("ch,chd->cd", u @ self.kinetic_gram, jac)

    def log_volume(self, v_q: Tensor, v_p: Tensor, z_end: Tensor, p_end: Tensor) -> Tensor:
        """log V of Deep MCMC eq. 5-6 for each chain (see the module docstring)."""
        if not self.ae.nonlinear:
            return self.constant_log_volume.expand(z_end.shape[0])
        _, jq = self.ae.g_and_jacobian(z_end)
        _, jp = self.ae.g_and_jacobian(p_end)
        fq, fp = self.ae.f_jacobian(v_q), self.ae.f_jacobian(v_p)
        total = (gram_logdet(jq.mT @ self.decoder_gram_q @ jq) + gram_logdet(jp.mT @ self.decoder_gram_p @ jp)
                 + gram_logdet(fq @ self.encoder_gram_q @ fq.mT) + gram_logdet(fp @ self.encoder_gram_p @ fp.mT))
        return 0.5 * total


# --- the kernel, in the shape of hmc.py -----------------------------------------------------------------
class LatentState(NamedTuple):
    position: Tensor  # (chains, D)
    log_prob: Tensor  # (chains,)


class LatentInfo(NamedTuple):
    accept_prob: Tensor
    accepted: Tensor
    energy: Tensor
    divergent: Tensor
    n_grad_evals: Tensor
    log_volume: Tensor


class LatentParams(NamedTuple):
    step_size: float
    num_steps: int
    volume_correction: bool = True
    energy_at_start: str = "reconstructed"


def init(space: LatentSpace, position: Tensor, density: Density) -> LatentState:
    """The state at points q (chains, D) of the target's own space, with log pi(q) there."""
    return LatentState(position, space.target.log_prob(position))


def make_kernel(space: LatentSpace) -> Kernel:
    """The kernel on one trained auto-encoder's latent space (the space is built once, then fixed); its ``density``
    argument is the prepared density of ``space.restricted``, the target on the decoder's affine image."""
    return Kernel(partial(init, space), partial(step, space), log_density)


class LatentTrajectory(NamedTuple):
    position: Tensor  # (chains, d) the end point z
    momentum: Tensor  # (chains, d)
    potential: Tensor  # (chains,) U_h at the end
    grad: Tensor  # (chains, d) grad U_h at the end
    start_energy: Tensor  # (chains,) H_h = U_h + K_h at the start
    end_energy: Tensor  # (chains,) H_h at the end = H(psi_q(z), psi_p(p)) in the original space


def latent_leapfrog(space: LatentSpace, density: Density, z: Tensor, p: Tensor, step_size: float, num_steps: int,
                    potential: Tensor | None = None, grad_u: Tensor | None = None) -> LatentTrajectory:
    """num_steps leapfrog steps on U_h + K_h from (z, p); the position update uses grad K_h (Deep MCMC
    Alg. 1). U_h(z) and its gradient are evaluated first unless given (both or neither).

    For a linear auto-encoder K_h(p) = p^T (W^T W) p / 2 is quadratic, so where the restricted density was
    prepared on a native backend (``density.trajectory``: logistic regression on the CPU) the trajectory, with the
    energies at both ends, is one native call with M^-1 = W^T W."""
    if not space.ae.nonlinear and density.trajectory is not None:
        known = grad_u is not None
        end = density.trajectory(z, p, step_size, num_steps, space.kinetic_gram,
                                    -grad_u if known else None, -potential if known else None)
        if end is not None:
            return LatentTrajectory(end.position, end.momentum, -end.log_prob, -end.grad, end.start_energy,
                                    end.end_energy)
    if grad_u is None:
        potential, grad_u = space.potential_and_grad(z, density)
    start_energy = potential + space.kinetic(p)
    p = p.add(grad_u, alpha=-0.5 * step_size)
    for _ in range(num_steps - 1):
        z = space.drift(z, p, step_size)
        p = p.add(space.potential_grad(z), alpha=-step_size)
    z = space.drift(z, p, step_size)
    potential, grad_u = space.potential_and_grad(z, density)
    p = p.add(grad_u, alpha=-0.5 * step_size)
    return LatentTrajectory(z, p, potential, grad_u, start_energy, potential + space.kinetic(p))


def step(space: LatentSpace, state: LatentState, density: Density, params: LatentParams,
         gen: torch.Generator) -> tuple[LatentState, LatentInfo]:
    n_chains = state.position.shape[0]
    noise = torch.randn(state.position.shape, generator=gen, dtype=state.position.dtype, device=state.position.device)
    z0, v_q = space.encode_position(state.position)
    p0, v_p = space.encode_noise(noise)  # the momentum p_v = noise / s ~ N(0, M), M^-1 = diag(s^2)
    end = latent_leapfrog(space, density, z0, p0, params.step_size, params.num_steps)
    if params.energy_at_start == "original":
        h0 = -state.log_prob + 0.5 * (noise * noise).sum(-1)
    else:
        h0 = end.start_energy
    h1 = end.end_energy  # = H(psi_q(z1), psi_p(p1)) in the original space
    log_volume = space.log_volume(v_q, v_p, end.position, end.momentum) if params.volume_correction else torch.zeros_like(h1)
    delta = energy_error(h1, h0) - log_volume
    delta = torch.nan_to_num(delta, nan=float("inf"))  # a NaN proposal is a rejection, counted below
    accept_prob, accepted = metropolis_accept(-delta, gen)
    new_state = LatentState(where_rows(accepted, space.decode_position(end.position), state.position),
                            torch.where(accepted, -end.potential, state.log_prob))
    info = LatentInfo(
        accept_prob=accept_prob,
        accepted=accepted,
        energy=torch.where(accepted, h1, h0),
        divergent=delta > DIVERGENCE_THRESHOLD,
        n_grad_evals=torch.full((n_chains,), params.num_steps, device=delta.device),
        log_volume=log_volume,
    )
    return new_state, info
