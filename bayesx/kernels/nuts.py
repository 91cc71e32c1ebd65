"""The No-U-Turn sampler, multinomial variant (Hoffman and Gelman 2014; Betancourt 2017), as Stan runs it.

The algorithm is that of Hoffman and Gelman (2014, "The No-U-Turn sampler: adaptively setting path lengths
in Hamiltonian Monte Carlo", JMLR 15) with the changes of Betancourt (2017, "A conceptual introduction to
Hamiltonian Monte Carlo", arXiv:1701.02434, appendix A) that Stan adopted: multinomial instead of slice
sampling, and the generalized U-turn criterion.

A transition grows a trajectory through (q, p) by repeated doubling: at depth d a random direction
v in {-1, +1} is drawn and a new subtree of 2^d leapfrog steps is built from the edge of the trajectory
in that direction. Every state ("leaf") carries the weight w = exp(H0 - H(leaf)); the next state is
drawn from the leaves in proportion to w, by uniform progressive sampling inside a subtree (leaf i
replaces the subtree's draw with probability w_i / (w_1 + ... + w_i)) and biased progressive sampling
(accept the new subtree's draw with probability min(1, W_new / W_old)) when a subtree joins the
trajectory. The acceptance statistic for step-size adaptation is the mean over all leaves of
min(1, exp(H0 - H)).

Growth stops at the generalized U-turn (Betancourt 2017, sec. A.4.2): a (sub)trajectory with summed
momentum rho and end velocities p#- = M^{-1} p-, p#+ = M^{-1} p+ is turning when rho . p#- <= 0 or
rho . p#+ <= 0. It is checked wherever two balanced halves L and R merge (inside a new subtree, done
iteratively with a stack that works like a binary counter; and the trajectory with its new subtree),
on L + R and, as Stan does since stan-dev/stan#2800, on L with R's first leaf and on R with L's last
leaf, which catch U-turns between the halves that the whole misses. A subtree with a U-turn or a
divergence (H - H0 > 1000, or not finite) inside is discarded, and the transition ends. The trajectory
has at most 2^max_tree_depth - 1 leaves.

Chains are a batch dimension: every chain builds its own tree, and chains that have stopped are masked
while the others continue, so a transition costs as many gradient evaluations as the deepest tree among
the chains (``n_grad_evals`` reports each chain's own count). Where the native backend runs the density
(bayesx.kernels.backend), the same algorithm runs per chain in C instead (bayesx/native/nuts.h), every
chain's tree on its own thread slot, none waiting for another.

The two are one algorithm decision for decision, and tests/test_nuts_agreement.py checks them draw for
draw: both take the momentum from the caller and one 64-bit seed per chain (drawn from ``gen`` after the
momentum, :func:`chain_seeds`), and read every uniform from a counter-based
generator, uniform number n of a chain being the n-th output of splitmix64 started from its seed
(Steele, Lea and Flood 2014), :func:`tree_uniforms` here and common.h's splitmix64_at there. Uniform
number :func:`uniform_index` (d, j) is subtree d's direction (j = 0), its merge (j = 1) and the
progressive sampling at its leaf i (j = 2 + i), so the numbers do not depend on the order in which a
tree consumes them, nor on the other chains.
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
    no_faults,
    select,
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


NON_FINITE_ENERGY_ERROR = 1e30
"""The energy error a leaf gets where H - H0 is not finite or larger (a NaN or infinite density): divergent,
weight exp(-1e30) = 0. Finite, as in nuts.h (whose -ffast-math arithmetic cannot carry infinities)."""

_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
_UINT64 = 2**64


def _int64(value: int) -> int:
    """The two's-complement int64 with the bits of ``value`` mod 2^64."""
    value %= _UINT64
    return value - _UINT64 if value >= 2**63 else value


def _shift_right(x: Tensor, bits: int) -> Tensor:
    """x >> bits on the 64 bits of x as unsigned (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform_index(depth: int, j: int) -> int:
    """The index of the uniform decision j of subtree ``depth`` reads (0: its direction, 1: its merge, 2 + i:
    the progressive sampling at its leaf i): the subtrees' blocks of 2^d + 2 numbers one after another."""
    return 2**depth - 1 + 2 * depth + j


def tree_uniforms(seeds: Tensor, first: int, count: int, dtype: torch.dtype) -> Tensor:
    """Uniforms number first, ..., first + count - 1 of each chain's stream, (count, chains), on (0, 1).

    Number n of the chain with seed s is splitmix64's n-th output from s (Steele, Lea and Flood 2014),
    z = mix(s + (n + 1) * 0x9e3779b97f4a7c15) in arithmetic mod 2^64, read as (m + 1/2) 2^-b from its top
    b bits m (b = 52 in float64, 23 in float32: exact, never 0 or 1): the function nuts.h computes in C."""
    bits = 52 if dtype == torch.float64 else 23
    steps = torch.arange(first + 1, first + count + 1, dtype=torch.int64, device=seeds.device)
    z = seeds.to(torch.int64).unsqueeze(0) + steps.unsqueeze(1) * _int64(_GOLDEN_GAMMA)  # wraps mod 2^64
    z = (z ^ _shift_right(z, 30)) * _int64(_MIX[0])
    z = (z ^ _shift_right(z, 27)) * _int64(_MIX[1])
    z = z ^ _shift_right(z, 31)
    return (_shift_right(z, 64 - bits).to(dtype) + 0.5) * 2.0**-bits


class _Node(NamedTuple):
    """A complete balanced subtree on the stack: its summed momentum and its first and last leaves'
    momentum and velocity."""

    rho: Tensor
    first_momentum: Tensor
    first_velocity: Tensor
    last_momentum: Tensor
    last_velocity: Tensor


class _Subtree(NamedTuple):
    edge: PhaseState  # the last leaf, the new edge of the trajectory
    edge_velocity: Tensor
    first_momentum: Tensor  # the first leaf's, next to the old edge
    first_velocity: Tensor
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


def merge_turns(earlier: _Node, later: _Node) -> Tensor:
    """Whether the trajectory of two adjacent halves has turned: the criterion on the whole, and (Stan's
    checks across the halves) on each half extended by the adjacent leaf of the other. The three criteria's
    six inner products are taken in one batched product (a third of the small tensor operations of three
    :func:`is_turning` calls, which dominate a PyTorch leaf's cost on small densities)."""
    rho = torch.stack((earlier.rho + later.rho, earlier.rho + later.first_momentum, later.rho + earlier.last_momentum))
    ends = torch.stack((earlier.first_velocity, earlier.first_velocity, earlier.last_velocity,
                        later.last_velocity, later.first_velocity, later.last_velocity)).view(2, *rho.shape)
    return ((rho * ends).sum(-1) <= 0).flatten(0, 1).any(0)


def _energy_error(h: Tensor, h0: Tensor) -> Tensor:
    """H - H0, with NON_FINITE_ENERGY_ERROR where it is not finite or larger (nuts.h's NUTS_BIG)."""
    big = NON_FINITE_ENERGY_ERROR
    return torch.nan_to_num(h - h0, nan=big, posinf=big, neginf=big).clamp(max=big)


class _Leaves(NamedTuple):
    """What a subtree has gathered over its leaves so far: the summed momentum, the log of the summed weights, the
    leaf drawn in proportion to its weight, the summed acceptance statistics and the number of leaves."""

    rho: Tensor
    log_weight: Tensor
    draw: _Draw
    accept_sum: Tensor
    n_leaves: Tensor


def _add_leaf(leaves: _Leaves, phase: PhaseState, h: Tensor, delta: Tensor, log_u: Tensor, running: Tensor,
              masked: bool) -> _Leaves:
    """``leaves`` with a new leaf (energy ``h``, energy error ``delta``) for the chains still ``running`` (all of
    them unless ``masked``); it replaces the draw with probability w / (w_1 + ... + w) (uniform progressive
    sampling, ``log_u``: the log of the leaf's uniform)."""
    leaf_accept = torch.exp(torch.clamp(-delta, max=0.0))
    if masked:
        leaf_accept = torch.where(running, leaf_accept, 0.0)
        rho = leaves.rho + where_rows(running, phase.momentum, torch.zeros_like(leaves.rho))
        n_leaves = leaves.n_leaves + running.long()
    else:
        rho = leaves.rho + phase.momentum
        n_leaves = leaves.n_leaves + 1
    log_weight = torch.logaddexp(leaves.log_weight, -delta)
    take = log_u < -delta - log_weight
    if masked:
        take = take & running
        log_weight = torch.where(running, log_weight, leaves.log_weight)
    draw = select(take, _Draw(phase.position, phase.log_prob, phase.grad, h), leaves.draw)
    return _Leaves(rho, log_weight, draw, leaves.accept_sum + leaf_accept, n_leaves)


def _close_subtrees(stack: list[_Node], node: _Node, i: int) -> Tensor | None:
    """Push leaf ``i``'s ``node`` onto ``stack``, the complete balanced subtrees of a subtree (a binary counter),
    merging each pair it completes; whether any merge has turned (None: it completed none)."""
    turned = None
    bits = i
    while bits & 1:
        earlier = stack.pop()
        turns = merge_turns(earlier, node)
        turned = turns if turned is None else turned | turns
        node = _Node(earlier.rho + node.rho, earlier.first_momentum, earlier.first_velocity, node.last_momentum,
                     node.last_velocity)
        bits >>= 1
    stack.append(node)
    return turned


def _build_subtree(start: PhaseState, signed_step: Tensor, n_steps: int, h0: Tensor, building: Tensor, metric: Metric,
                   density: Density, log_u: Tensor, faults: DensityFaults) -> _Subtree:
    """Take up to ``n_steps`` leapfrog steps from ``start`` for the chains in ``building``; ``log_u``
    (n_steps, chains): the logs of the uniforms of the leaves' progressive sampling. A chain stops at a divergence
    or a U-turn inside, which discards its subtree.

    While every chain is still building (the common case) the per-chain masking is skipped;
    ``n_running`` is the one host-device synchronization per leaf.
    """
    n_chains = h0.shape[0]
    running = building.clone()
    n_running = int(running.sum())
    phase = start
    leaves = _Leaves(torch.zeros_like(start.momentum), torch.full_like(h0, -float("inf")),
                     _Draw(start.position, start.log_prob, start.grad, h0), torch.zeros_like(h0),
                     torch.zeros(n_chains, dtype=torch.long, device=h0.device))
    divergent = torch.zeros_like(running)
    broken = torch.zeros_like(running)  # a U-turn or divergence inside: the subtree is discarded
    edge_velocity = velocity(metric, start.momentum)
    stack: list[_Node] = []
    first = None
    for i in range(n_steps):
        if n_running == 0:
            break
        masked = n_running < n_chains
        new_phase = leapfrog(phase, signed_step, metric, density)
        phase = select(running, new_phase, phase) if masked else new_phase
        if not bool(torch.isfinite(phase.log_prob).all() and torch.isfinite(phase.grad).all()):  # rare: the
            faults = add_faults(faults, phase.position, phase.log_prob, phase.grad,  # bookkeeping only then
                                running if masked else None)
        edge_velocity = velocity(metric, phase.momentum)
        h = 0.5 * (phase.momentum * edge_velocity).sum(-1) - phase.log_prob
        delta = _energy_error(h, h0)
        leaf_divergent = delta > DIVERGENCE_THRESHOLD
        if masked:
            leaf_divergent = leaf_divergent & running
        leaves = _add_leaf(leaves, phase, h, delta, log_u[i], running, masked)
        node = _Node(phase.momentum, phase.momentum, edge_velocity, phase.momentum, edge_velocity)
        first = node if first is None else first
        turned = _close_subtrees(stack, node, i)
        stop = (leaf_divergent if turned is None else leaf_divergent | turned) & running
        divergent = divergent | leaf_divergent
        broken = broken | stop
        running = running & ~stop
        n_running = int(running.sum())
    return _Subtree(phase, edge_velocity, first.first_momentum, first.first_velocity, leaves.rho, leaves.log_weight,
                    leaves.draw, building & ~broken, leaves.accept_sum, leaves.n_leaves, divergent, faults)


def chain_seeds(n_chains: int, gen: torch.Generator) -> Tensor:
    """One 64-bit seed per chain for its trees' uniforms (:func:`tree_uniforms`), drawn from the run's generator."""
    return torch.randint(-(2**63), 2**63 - 1, (n_chains,), generator=gen, dtype=torch.int64, device=gen.device).cpu()


def step(state: HMCState, density: Density, params: NUTSParams, gen: torch.Generator) -> tuple[HMCState, NUTSInfo]:
    """One transition of every chain: a momentum p ~ N(0, M), then one seed per chain (both from ``gen``, in
    this order, whichever backend builds the trees), then :func:`transition`'s trees, in C where the native
    backend runs the density."""
    metric = params.metric
    q = state.position
    p0 = sample_momentum(metric, q.shape, gen)
    seeds = chain_seeds(q.shape[0], gen)
    native = None if density.nuts_transition is None else density.nuts_transition(
        q, p0, state.log_prob, state.grad, params.step_size, metric.inv_mass, params.max_tree_depth, seeds)
    if native is not None:
        return HMCState(native.position, native.log_prob, native.grad), NUTSInfo(
            native.accept_prob, native.moved, native.energy, native.divergent, native.n_leaves, native.depth,
            DensityFaults(native.nan_leaves, native.posinf_leaves, native.fault_position))
    return transition(state, p0, seeds.to(q.device), density, params)


class _Trajectory(NamedTuple):
    """A transition's trajectory so far, per chain: its two ends (and their velocities), its summed momentum, the
    leaf drawn from it and the log of its summed weights, and what the transition reports."""

    left: PhaseState
    right: PhaseState
    left_velocity: Tensor
    right_velocity: Tensor
    rho: Tensor
    draw: _Draw
    log_weight: Tensor
    moved: Tensor
    done: Tensor
    divergent: Tensor
    depth: Tensor
    accept_sum: Tensor
    n_leaves: Tensor
    faults: DensityFaults


def transition(state: HMCState, p0: Tensor, seeds: Tensor, density: Density, params: NUTSParams) -> tuple[HMCState, NUTSInfo]:
    """The PyTorch trees of one transition from momentum ``p0`` (chains, dim), every uniform from the chains'
    ``seeds`` (chains,) int64 (:func:`tree_uniforms`): the same draws as nuts.h's from the same inputs."""
    metric, q = params.metric, state.position
    h0 = -state.log_prob + kinetic_energy(metric, p0)
    v0 = velocity(metric, p0)
    start = PhaseState(q, p0, state.log_prob, state.grad)
    stopped = torch.zeros(q.shape[0], dtype=torch.bool, device=q.device)
    depth = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
    # the starting leaf has weight exp(H0 - H0) = 1
    path = _Trajectory(start, start, v0, v0, p0, _Draw(q, state.log_prob, state.grad, h0), torch.zeros_like(h0),
                       stopped, stopped, stopped, depth, torch.zeros_like(h0), torch.zeros_like(depth), no_faults(q))
    for d in range(params.max_tree_depth):
        if not bool((~path.done).any()):
            break
        path = _double(path, d, seeds, h0, params.step_size, metric, density)
    info = NUTSInfo(accept_prob=path.accept_sum / path.n_leaves.clamp(min=1).to(h0.dtype), accepted=path.moved,
                    energy=path.draw.energy, divergent=path.divergent, n_grad_evals=path.n_leaves,
                    tree_depth=path.depth, faults=path.faults)
    return HMCState(path.draw.position, path.draw.log_prob, path.draw.grad), info


def _double(path: _Trajectory, d: int, seeds: Tensor, h0: Tensor, step_size: float, metric: Metric,
            density: Density) -> _Trajectory:
    """The trajectory after doubling ``d``: a subtree of 2^d leaves built in a random direction from that end, joined
    where it is valid, its draw taken with probability min(1, W_new / W_old) (biased progressive sampling), and
    growth stopped where it is invalid or the joined trajectory has turned."""
    active = ~path.done
    u = tree_uniforms(seeds, uniform_index(d, 0), 2**d + 2, h0.dtype)  # the subtree's block, in one call
    forward, merge_u, log_u = u[0] < 0.5, u[1], torch.log(u[2:])
    signed_step = (torch.where(forward, 1.0, -1.0).to(h0.dtype) * step_size).unsqueeze(-1)
    start = select(forward, path.right, path.left)
    far_momentum = where_rows(forward, path.left.momentum, path.right.momentum)
    start_velocity = where_rows(forward, path.right_velocity, path.left_velocity)
    far_velocity = where_rows(forward, path.left_velocity, path.right_velocity)
    sub = _build_subtree(start, signed_step, 2**d, h0, active, metric, density, log_u, path.faults)

    grow_right, grow_left = active & forward, active & ~forward
    merge = sub.valid
    take = merge & (torch.log(merge_u) < sub.log_weight - path.log_weight)
    # the trajectory so far (far end ... start) merged with the subtree (its first leaf ... its edge)
    old = _Node(path.rho, far_momentum, far_velocity, start.momentum, start_velocity)
    new = _Node(sub.rho, sub.first_momentum, sub.first_velocity, sub.edge.momentum, sub.edge_velocity)
    turned = merge_turns(old, new)
    return _Trajectory(
        left=select(grow_left, sub.edge, path.left), right=select(grow_right, sub.edge, path.right),
        left_velocity=where_rows(grow_left, sub.edge_velocity, path.left_velocity),
        right_velocity=where_rows(grow_right, sub.edge_velocity, path.right_velocity),
        rho=where_rows(merge, path.rho + sub.rho, path.rho), draw=select(take, sub.draw, path.draw),
        log_weight=torch.where(merge, torch.logaddexp(path.log_weight, sub.log_weight), path.log_weight),
        moved=path.moved | take, done=path.done | (active & (~merge | turned)),
        divergent=path.divergent | sub.divergent, depth=path.depth + active.long(),
        accept_sum=path.accept_sum + sub.accept_sum, n_leaves=path.n_leaves + sub.n_leaves, faults=sub.faults)
