"""MAMS: the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon and Seljak 2025, "Metropolis
Adjusted Microcanonical Hamiltonian Monte Carlo"), BlackJAX's ``adjusted_mclmc_dynamic`` kernel.

The chain moves with the isokinetic (energy-sampling, ESH) dynamics of microcanonical HMC (Ver Steeg and
Galstyan 2021; Robnik et al. 2023): a velocity u of unit length, |u| = 1, and, in the coordinates y = C^-1 x
whitened by the metric (C C^T = M^-1, the inverse mass matrix: a diagonal sqrt or a Cholesky factor),

    dy/dt = u,    du/dt = (I - u u^T) g / (d - 1),    g = C^T grad log pi(x)   (the whitened gradient).

For a constant gradient the velocity flow has a closed form. With e = g / |g|, delta = t |g| / (d - 1) and
zeta = exp(-delta),

    u(t) = [e (1 - zeta)(1 + zeta + (u.e)(1 - zeta)) + 2 zeta u] / norm,              (|u(t)| = 1)
    K(t) - K(0) = (d - 1) [delta - log 2 + log(1 + u.e + (1 - u.e) zeta^2)]
                = (d - 1) log(cosh delta + (u.e) sinh delta),

the "kinetic energy" change, whose rate is dK/dt = u.g. (BlackJAX's esh_dynamics_momentum_update_one_step
writes it without e^delta, which overflows for large gradients.) A step of size eps composes this velocity
map V(c eps) with the position map x <- x + c eps C u, as a symmetric splitting:

    leapfrog:  V(eps/2) X(eps) V(eps/2)                                     one gradient per step
    mclachlan: V(b eps) X(eps/2) V((1 - 2b) eps) X(eps/2) V(b eps),  b = 0.1931833275037836
               (McLachlan's minimal-norm integrator, BlackJAX's default for this kernel)   two per step

Both are time reversible (flip u at the end and integrate again: back at the start, u flipped) and second
order: the energy error of a trajectory of fixed length falls as eps^2.

One transition of every chain, in lock-step:

1. refresh the velocity fully: u = z / |z|, z ~ N(0, I) (uniform on the sphere);
2. n steps of the integrator, n = ceil(U s), U ~ Uniform(0, 1) shared by the chains, s chosen so that
   E n = L / eps (BlackJAX's ``rescale``; L the trajectory length, tuned in bayesx.adaptation.mams);
3. accept the end point with probability min(1, exp(-W)), the energy error
       W = sum of the velocity updates' kinetic changes - (log pi(x_n) - log pi(x_0)).
   With the velocity's flip this is the Metropolis-Hastings ratio of the reversible proposal: exp(-Delta K)
   is the Jacobian of the isokinetic map on (x, u in the sphere), so the chain leaves pi exactly.
   W > 1000 (or not finite) marks a divergent transition, as for HMC.

Pure functions of batched tensors (chains, dim), in BlackJAX's shape: ``init``, ``step``, ``log_density``.
Gradients come from the Density's ``logp_and_grad`` (native, compiled or PyTorch: bayesx.kernels.density), as for
the HMC kernels.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.density import Density
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
from bayesx.kernels.hmc import HMCState as MAMSState  # position, log pi and its (unwhitened) gradient, as HMC's
from bayesx.kernels.hmc import init  # noqa: F401  (the same state, made the same way)
from bayesx.kernels.metric import Metric

MCLACHLAN_B = 0.1931833275037836
"""The minimal-norm two-stage coefficient (McLachlan 1995; Omelyan, Mryglod and Folk 2003)."""
INTEGRATORS = {
    # (velocity fraction, position fraction) pairs, then a final velocity fraction: one step
    "leapfrog": ((0.5, 1.0),), "mclachlan": ((MCLACHLAN_B, 0.5), (1.0 - 2.0 * MCLACHLAN_B, 0.5)),
}
FINAL = {"leapfrog": 0.5, "mclachlan": MCLACHLAN_B}


def grads_per_step(integrator: str) -> int:
    """Gradient evaluations per integrator step (one per position update)."""
    return len(INTEGRATORS[integrator])


class MAMSInfo(NamedTuple):
    accept_prob: Tensor  # (chains,) min(1, exp(-W))
    accepted: Tensor  # (chains,) bool
    energy_change: Tensor  # (chains,) W of the proposal (inf where it failed)
    divergent: Tensor  # (chains,) bool: W > 1000 or not finite
    n_grad_evals: Tensor  # (chains,) int
    num_steps: Tensor  # (chains,) int: the integrator steps of this transition (shared)
    faults: DensityFaults  # proposals whose density is NaN or +inf (not a per-draw statistic)


class MAMSParams(NamedTuple):
    step_size: float  # eps, in the metric's whitened units
    metric: Metric  # diagonal or dense; C = metric.chol
    trajectory_length: float  # L: the mean trajectory time, E n = L / eps
    integrator: str = "mclachlan"  # leapfrog | mclachlan
    max_steps: int = 1024  # cap on the integrator steps of one transition


# --- the isokinetic dynamics --------------------------------------------------------------------------
def whitened_gradient(metric: Metric, grad: Tensor) -> Tensor:
    """g_y = C^T grad log pi for each row (the row form: grad C)."""
    return grad @ metric.chol if metric.dense else grad * metric.chol


def displacement(metric: Metric, u: Tensor) -> Tensor:
    """dx/dt = C u for each row (the row form: u C^T)."""
    return u @ metric.chol.T if metric.dense else u * metric.chol


def velocity_update(u: Tensor, g: Tensor, time) -> tuple[Tensor, Tensor]:
    """The exact isokinetic velocity flow for time ``time`` (a scalar) under the constant whitened gradient g
    (rows): the new unit velocities and each row's kinetic-energy change (module docstring). A zero gradient
    leaves u and K unchanged."""
    dim = u.shape[-1]
    norm = torch.linalg.vector_norm(g, dim=-1, keepdim=True)
    e = torch.where(norm > 1e-13, g / norm.clamp(min=1e-300), g)
    ue = (u * e).sum(-1, keepdim=True)
    delta = time * norm / (dim - 1)
    zeta = torch.exp(-delta)
    raw = e * (1.0 - zeta) * (1.0 + zeta + ue * (1.0 - zeta)) + 2.0 * zeta * u
    new = raw / torch.linalg.vector_norm(raw, dim=-1, keepdim=True)
    change = (delta - math.log(2.0) + torch.log(1.0 + ue + (1.0 - ue) * zeta * zeta)) * (dim - 1)
    return new, change.squeeze(-1)


def unit_velocity(shape, dtype, device, gen: torch.Generator) -> Tensor:
    """Rows uniform on the unit sphere: z / |z|, z ~ N(0, I)."""
    z = torch.randn(shape, generator=gen, dtype=dtype, device=device)
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True)


class Trajectory(NamedTuple):
    position: Tensor
    velocity: Tensor
    log_prob: Tensor
    grad: Tensor
    kinetic_change: Tensor  # (chains,) the sum of the velocity updates' Delta K
    faults: DensityFaults


def integrate(state: MAMSState, u: Tensor, step_size: float, num_steps: int, metric: Metric, integrator: str,
              density: Density) -> Trajectory:
    """``num_steps`` steps of the isokinetic integrator from (state, u): the end point, its velocity and the
    total kinetic change; grads_per_step(integrator) * num_steps gradient evaluations."""
    stages, final = INTEGRATORS[integrator], FINAL[integrator]
    x, log_prob, grad = state.position, state.log_prob, state.grad
    kinetic = torch.zeros_like(log_prob)
    faults = no_faults(x)
    for _ in range(num_steps):
        for b, a in stages:
            u, dk = velocity_update(u, whitened_gradient(metric, grad), b * step_size)
            kinetic = kinetic + dk
            x = x + a * step_size * displacement(metric, u)
            log_prob, grad = density.logp_and_grad(x)
            faults = add_faults(faults, x, log_prob, grad)
        u, dk = velocity_update(u, whitened_gradient(metric, grad), final * step_size)
        kinetic = kinetic + dk
    return Trajectory(x, u, log_prob, grad, kinetic, faults)


# --- the transition -------------------------------------------------------------------------------------
def rescale(mean_steps: float) -> float:
    """s such that ceil(U s), U ~ Uniform(0, 1), has expectation ``mean_steps`` (>= 1): with k = floor(2m - 1)
    and s = k + x, ceil(U s) is 1..k with probability 1/s each and k + 1 with x/s (BlackJAX's ``rescale``)."""
    m = max(1.0, float(mean_steps))
    k = math.floor(2.0 * m - 1.0)
    return k + k * (m - 0.5 * (k + 1)) / (k + 1 - m)


def num_steps(jitter: float, params: MAMSParams) -> int:
    """n = ceil(U s) for the jitter U, at least 1 and at most ``max_steps``: E n = L / eps (below the cap)."""
    s = rescale(params.trajectory_length / params.step_size)
    return int(min(params.max_steps, max(1, math.ceil(jitter * s))))


def energy_change(start: MAMSState, end: Trajectory) -> Tensor:
    """W = Delta K - (log pi(end) - log pi(start)), NaN mapped to +inf (a failed density is rejected)."""
    return energy_error(end.kinetic_change - end.log_prob, -start.log_prob)


def propose(state: MAMSState, density: Density, params: MAMSParams, gen: torch.Generator) -> tuple[Trajectory, int]:
    """A fresh unit velocity and one jittered trajectory: the proposal and its number of steps."""
    jitter = float(torch.rand((), generator=gen, device=gen.device))
    n = num_steps(jitter, params)
    u = unit_velocity(state.position.shape, state.position.dtype, state.position.device, gen)
    return integrate(state, u, params.step_size, n, params.metric, params.integrator, density), n


def accept(state: MAMSState, end: Trajectory, n: int, params: MAMSParams,
           gen: torch.Generator) -> tuple[MAMSState, MAMSInfo]:
    """The Metropolis decision on each chain's energy error, and what happened."""
    w = energy_change(state, end)
    accept_prob, accepted = metropolis_accept(-w, gen)
    new_state = select(accepted, MAMSState(end.position, end.log_prob, end.grad), state)
    chains = state.position.shape[0]
    info = MAMSInfo(
        accept_prob=accept_prob,
        accepted=accepted,
        energy_change=w,
        divergent=w > DIVERGENCE_THRESHOLD,
        n_grad_evals=torch.full((chains,), n * grads_per_step(params.integrator), device=w.device),
        num_steps=torch.full((chains,), n, device=w.device),
        faults=end.faults,
    )
    return new_state, info


def step(state: MAMSState, density: Density, params: MAMSParams, gen: torch.Generator) -> tuple[MAMSState, MAMSInfo]:
    end, n = propose(state, density, params, gen)
    return accept(state, end, n, params, gen)
