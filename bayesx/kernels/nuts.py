"""The No-U-Turn sampler with multinomial sampling (Hoffman and Gelman 2014; Betancourt 2017).

A transition grows a trajectory through (q, p) by repeated doubling: at depth d a random
direction v in {-1, +1} is drawn and a new subtree of 2^d leapfrog steps is built from the edge
of the trajectory in that direction. Every state ("leaf") carries the weight
w = exp(H0 - H(leaf)); the next state is drawn from the leaves in proportion to w, by uniform
progressive sampling inside a subtree and biased progressive sampling (accept the new subtree's
draw with probability min(1, W_new / W_old)) when a subtree joins the trajectory.

Growth stops at the generalized U-turn (Betancourt 2017, sec. A.4.2): a (sub)trajectory with
summed momentum rho and end velocities p#- = M^{-1} p-, p#+ = M^{-1} p+ is turning when
rho . p#- <= 0 or rho . p#+ <= 0. The criterion is checked for the whole trajectory after every
doubling and, inside a new subtree, for every balanced binary sub-subtree (the checks of the
recursive algorithm, done iteratively with a stack that works like a binary counter). A subtree
with a U-turn or a divergence inside is discarded, and the transition ends.

Chains are a batch dimension: every chain builds its own tree, and chains that have stopped are
masked while the others continue, so a transition costs as many gradient evaluations as the
deepest tree among the chains (``n_grad_evals`` reports each chain's own count). Where the density was
prepared on a native backend (bayesx.kernels.backend.prepare: its ``nuts_transition``), the
same algorithm runs per chain in C instead, every chain's tree on its own thread slot, none waiting
for another; its uniforms come from its own generator seeded from ``gen``, so its draws agree with
this module's in distribution, not draw for draw.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.density import Density
from bayesx.kernels.common import (
    DIVERGENCE_THRESHOLD,
    DensityFaults,
    add_faults,
    energy_error,
    no_faults,
    select,
    uniform,
    where_rows,
)
from bayesx.kernels.hmc import HMCState, init, log_density  # noqa: F401  (NUTS shares HMC's state)
from bayesx.kernels.integrators import PhaseState, leapfrog
from bayesx.kernels.metric import Metric, kinetic_energy, sample_momentum, velocity


class NUTSInfo(NamedTuple):
    accept_prob: Tensor  # (chains,) mean over the tree's leaves of min(1, exp(H0 - H))
    accepted: Tensor  # (chains,) bool: the draw differs from the starting point
    energy: Tensor  # (chains,) H at the drawn state
    divergent: Tensor  # (chains,) bool
    n_grad_evals: Tensor  # (chains,) leapfrog steps this chain took
    tree_depth: Tensor  # (chains,) number of doublings
    faults: DensityFaults  # leaves where the density was NaN or +inf (not a per-draw statistic)


class NUTSParams(NamedTuple):
    step_size: float
    metric: Metric
    max_tree_depth: int


class _Draw(NamedTuple):
    position: Tensor
    log_prob: Tensor
    grad: Tensor
    energy: Tensor


class _Subtree(NamedTuple):
    edge: PhaseState  # the last leaf, the new edge of the trajectory
    edge_velocity: Tensor
    rho: Tensor  # summed momentum of the subtree
    log_weight: Tensor  # log sum of the leaves' weights
    draw: _Draw  # a leaf drawn in proportion to its weight
    valid: Tensor  # no U-turn inside and no divergence
    accept_sum: Tensor
    n_leaves: Tensor
    divergent: Tensor
    faults: DensityFaults


def is_turning(rho: Tensor, velocity_a: Tensor, velocity_b: Tensor) -> Tensor:
    """Generalized no-U-turn criterion; True where the trajectory has turned back."""
    return ((rho * velocity_a).sum(-1) <= 0) | ((rho * velocity_b).sum(-1) <= 0)


def _build_subtree(
    start: PhaseState,
    signed_step: Tensor,
    n_steps: int,
    h0: Tensor,
    building: Tensor,
    metric: Metric,
    density: Density,
    gen: torch.Generator,
    faults: DensityFaults,
) -> _Subtree:
    """Take up to ``n_steps`` leapfrog steps from ``start`` for the chains in ``building``.

    While every chain is still building (the common case) the per-chain masking is skipped;
    ``n_running`` is the one host-device synchronization per leaf.
    """
    n_chains = h0.shape[0]
    running = building.clone()
    n_running = int(running.sum())
    phase = start
    rho = torch.zeros_like(start.momentum)
    log_weight = torch.full_like(h0, -float("inf"))
    draw = _Draw(start.position, start.log_prob, start.grad, h0)
    accept_sum = torch.zeros_like(h0)
    n_leaves = torch.zeros(n_chains, dtype=torch.long, device=h0.device)
    divergent = torch.zeros_like(running)
    broken = torch.zeros_like(running)  # a U-turn or divergence inside: the subtree is discarded
    edge_velocity = velocity(metric, start.momentum)
    log_u = torch.log(torch.rand((n_steps, n_chains), generator=gen, dtype=h0.dtype, device=h0.device))
    stack: list[tuple[Tensor, Tensor]] = []  # (rho, first velocity) of complete balanced subtrees
    for i in range(n_steps):
        if n_running == 0:
            break
        masked = n_running < n_chains
        new_phase = leapfrog(phase, signed_step, metric, density)
        phase = select(running, new_phase, phase) if masked else new_phase
        if not bool(torch.isfinite(phase.log_prob).all() and torch.isfinite(phase.grad).all()):  # rare: the
            faults = add_faults(faults, phase.position, phase.log_prob, phase.grad,  # bookkeeping only then
                                running if masked else None)
        vel = velocity(metric, phase.momentum)
        h = 0.5 * (phase.momentum * vel).sum(-1) - phase.log_prob
        delta = energy_error(h, h0)
        leaf_accept = torch.exp(torch.clamp(-delta, max=0.0))
        leaf_divergent = delta > DIVERGENCE_THRESHOLD
        if masked:
            leaf_divergent = leaf_divergent & running
            leaf_accept = torch.where(running, leaf_accept, 0.0)
            rho = rho + where_rows(running, phase.momentum, torch.zeros_like(rho))
            n_leaves = n_leaves + running.long()
        else:
            rho = rho + phase.momentum
            n_leaves = n_leaves + 1
        accept_sum = accept_sum + leaf_accept

        # uniform progressive sampling among the subtree's leaves
        new_log_weight = torch.logaddexp(log_weight, -delta)
        take = log_u[i] < -delta - new_log_weight
        if masked:
            take = take & running
            log_weight = torch.where(running, new_log_weight, log_weight)
        else:
            log_weight = new_log_weight
        draw = select(take, _Draw(phase.position, phase.log_prob, phase.grad, h), draw)

        # U-turn checks of the balanced sub-subtrees completed by this leaf
        edge_velocity = vel
        node_rho, node_first = phase.momentum, vel
        stop = leaf_divergent
        bits = i
        while bits & 1:
            prev_rho, prev_first = stack.pop()
            node_rho, node_first = prev_rho + node_rho, prev_first
            stop = stop | is_turning(node_rho, node_first, vel)
            bits >>= 1
        stack.append((node_rho, node_first))

        stop = stop & running
        divergent = divergent | leaf_divergent
        broken = broken | stop
        running = running & ~stop
        n_running = int(running.sum())
    valid = building & ~broken
    return _Subtree(phase, edge_velocity, rho, log_weight, draw, valid, accept_sum, n_leaves, divergent, faults)


def step(state: HMCState, density: Density, params: NUTSParams, gen: torch.Generator) -> tuple[HMCState, NUTSInfo]:
    metric = params.metric
    q = state.position
    n_chains = q.shape[0]
    p0 = sample_momentum(metric, q.shape, gen)
    native = None if density.nuts_transition is None else density.nuts_transition(
        q, p0, state.log_prob, state.grad, params.step_size, metric.inv_mass, params.max_tree_depth, gen)
    if native is not None:
        return HMCState(native.position, native.log_prob, native.grad), NUTSInfo(
            native.accept_prob, native.moved, native.energy, native.divergent, native.n_leaves, native.depth,
            DensityFaults(native.nan_leaves, native.posinf_leaves, native.fault_position))
    h0 = -state.log_prob + kinetic_energy(metric, p0)
    v0 = velocity(metric, p0)

    left = right = PhaseState(q, p0, state.log_prob, state.grad)
    left_velocity = right_velocity = v0
    rho = p0
    draw = _Draw(q, state.log_prob, state.grad, h0)
    log_weight = torch.zeros_like(h0)  # the starting leaf has weight exp(H0 - H0) = 1
    moved = torch.zeros(n_chains, dtype=torch.bool, device=q.device)
    done = torch.zeros_like(moved)
    divergent = torch.zeros_like(moved)
    depth = torch.zeros(n_chains, dtype=torch.long, device=q.device)
    accept_sum = torch.zeros_like(h0)
    n_leaves = torch.zeros_like(depth)
    faults = no_faults(q)

    for d in range(params.max_tree_depth):
        active = ~done
        if not bool(active.any()):
            break
        forward = uniform(n_chains, h0, gen) < 0.5
        signed_step = (torch.where(forward, 1.0, -1.0).to(h0.dtype) * params.step_size).unsqueeze(-1)
        start = select(forward, right, left)
        sub = _build_subtree(start, signed_step, 2**d, h0, active, metric, density, gen, faults)
        faults = sub.faults

        grow_right, grow_left = active & forward, active & ~forward
        right = select(grow_right, sub.edge, right)
        right_velocity = where_rows(grow_right, sub.edge_velocity, right_velocity)
        left = select(grow_left, sub.edge, left)
        left_velocity = where_rows(grow_left, sub.edge_velocity, left_velocity)
        accept_sum = accept_sum + sub.accept_sum
        n_leaves = n_leaves + sub.n_leaves
        divergent = divergent | sub.divergent
        depth = depth + active.long()

        merge = sub.valid
        # biased progressive sampling: prefer the new subtree by min(1, W_new / W_old)
        take = merge & (torch.log(uniform(n_chains, h0, gen)) < sub.log_weight - log_weight)
        draw = select(take, sub.draw, draw)
        moved = moved | take
        log_weight = torch.where(merge, torch.logaddexp(log_weight, sub.log_weight), log_weight)
        rho = where_rows(merge, rho + sub.rho, rho)
        turned = is_turning(rho, left_velocity, right_velocity)
        done = done | (active & (~merge | turned))

    info = NUTSInfo(
        accept_prob=accept_sum / n_leaves.clamp(min=1).to(h0.dtype),
        accepted=moved,
        energy=draw.energy,
        divergent=divergent,
        n_grad_evals=n_leaves,
        tree_depth=depth,
        faults=faults,
    )
    return HMCState(draw.position, draw.log_prob, draw.grad), info
