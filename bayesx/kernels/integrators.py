"""The leapfrog (velocity Verlet) integrator for H(q, p) = U(q) + K(p), U = -log pi.

One step of size eps:
    p_{1/2} = p + eps/2 * grad log pi(q)
    q'      = q + eps * M^{-1} p_{1/2}
    p'      = p_{1/2} + eps/2 * grad log pi(q')
It is volume preserving and time reversible, which is what makes the Metropolis correction of
HMC exact. ``step_size`` may be a scalar or a (chains, 1) tensor of signed per-chain sizes (NUTS
integrates some chains backwards in time).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from bayesx.kernels.density import Density
from bayesx.kernels.metric import Metric, kinetic_energy, velocity


class PhaseState(NamedTuple):
    position: Tensor  # (chains, dim)
    momentum: Tensor  # (chains, dim)
    log_prob: Tensor  # (chains,)
    grad: Tensor  # (chains, dim), gradient of log_prob


def leapfrog(state: PhaseState, step_size, metric: Metric, density: Density) -> PhaseState:
    """One leapfrog step; one gradient evaluation."""
    p = state.momentum + 0.5 * step_size * state.grad
    q = state.position + step_size * velocity(metric, p)
    log_prob, grad = density.logp_and_grad(q)
    p = p + 0.5 * step_size * grad
    return PhaseState(q, p, log_prob, grad)


def leapfrog_trajectory(state: PhaseState, step_size, num_steps: int, metric: Metric,
                        density: Density) -> tuple[PhaseState, Tensor, Tensor]:
    """``num_steps`` leapfrog steps with the inner half steps of the momentum fused; returns the end
    state and the Hamiltonian H = -log pi(q) + K(p) at the start and at the end.

    Equal to ``num_steps`` calls of :func:`leapfrog` up to rounding, with one fewer vector update
    per step; ``num_steps`` gradient evaluations. Where the density was prepared on a native backend that runs
    these chains (``density.trajectory``), the whole trajectory, energies included, is one call.
    """
    native = density.trajectory
    end = None if native is None else native(state.position, state.momentum, step_size, num_steps,
                                             metric.inv_mass, state.grad, state.log_prob)
    if end is not None:
        return PhaseState(end.position, end.momentum, end.log_prob, end.grad), end.start_energy, end.end_energy
    start_energy = -state.log_prob + kinetic_energy(metric, state.momentum)
    p = state.momentum + 0.5 * step_size * state.grad
    q = state.position
    for i in range(num_steps):
        q = q + step_size * velocity(metric, p)
        log_prob, grad = density.logp_and_grad(q)
        p = p + (step_size if i < num_steps - 1 else 0.5 * step_size) * grad
    return PhaseState(q, p, log_prob, grad), start_energy, -log_prob + kinetic_energy(metric, p)
