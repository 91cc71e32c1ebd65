"""The Python side of the native kernels' calls, whatever the density (the logistic form,
:mod:`bayesx.native.logistic`; a compiled density, :mod:`bayesx.native.compiled`): the arguments every
density's evaluation of log pi and its gradient (:func:`evaluate`), NUTS transition (nuts.h: each chain's tree on its own thread slot, or two chains' trees in
lock-step where the density evaluates two gradients in one pass) and leapfrog trajectory (leapfrog.h)
share, and what the calls return."""

from __future__ import annotations

import ctypes
from typing import Callable, NamedTuple

import torch
from torch import Tensor


class NUTSTransition(NamedTuple):
    """Each chain's draw after one NUTS transition and what the tree did (bayesx.kernels.nuts.NUTSInfo)."""

    position: Tensor  # (chains, k)
    log_prob: Tensor  # (chains,)
    grad: Tensor
    accept_prob: Tensor  # mean over the leaves of min(1, exp(H0 - H))
    moved: Tensor  # bool
    energy: Tensor  # H at the draw
    divergent: Tensor  # bool
    n_leaves: Tensor  # long: leapfrog steps
    depth: Tensor  # long: doublings
    nan_leaves: Tensor  # long: leaves whose log pi or gradient was NaN
    posinf_leaves: Tensor  # long: leaves whose log pi was +inf
    fault_position: Tensor  # (chains, k): the last such leaf (NaN where none)


def info_rows(k: int) -> int:
    """Rows of the info buffer a NUTS transition of k coordinates writes per chain (nuts.h's nuts_chains): six
    statistics, the NaN and +inf leaf counts, and the k coordinates of the last such leaf. A caller of the C
    entry points must allocate this many rows: the tree writes all of them."""
    return 8 + k


def ptr(t: Tensor | None) -> int | None:
    """The address a C function receives for a tensor (NULL for None); the caller keeps the tensor alive."""
    return None if t is None else t.data_ptr()


def evaluate(run: Callable, position: Tensor) -> tuple[Tensor, Tensor]:
    """Call ``run`` (a density's evaluation with its leading, density-specific arguments bound, and any scratch
    after) with the arguments every density shares: the points (n, k), the gradient's and log pi's output rows;
    returns (log pi (n,), grad (n, k)). The points are not modified."""
    u = position.detach().contiguous()
    grad, log_prob = torch.empty_like(u), torch.empty(u.shape[0], dtype=u.dtype)
    run(ptr(u), ptr(grad), ptr(log_prob))
    return log_prob, grad


def transition(run: Callable, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
               inv_mass: Tensor, max_depth: int, seeds: Tensor) -> NUTSTransition:
    """Call ``run`` (a density's NUTS function with its leading, density-specific arguments bound) with the
    arguments every density shares: M^-1 and whether it is dense, the step size, the maximum depth, the
    chains' seeds, then the point, momentum, gradient and log pi (copied: the inputs are not modified),
    the info rows and the failure flag."""
    u, p, g = (t.detach().clone(memory_format=torch.contiguous_format) for t in (position, momentum, grad))
    lp = log_prob.detach().clone().contiguous()
    info = torch.full((info_rows(u.shape[1]), u.shape[0]), float("nan"), dtype=u.dtype)
    inv_mass = inv_mass.detach().contiguous()
    seeds = seeds.to(torch.int64).contiguous()
    failed = ctypes.c_int(0)
    run(ptr(inv_mass), inv_mass.dim() == 2, float(step_size), int(max_depth), ptr(seeds), ptr(u), ptr(p), ptr(g),
        ptr(lp), ptr(info), ctypes.addressof(failed))
    if failed.value:
        raise MemoryError("the native NUTS kernel could not allocate its scratch memory")
    return NUTSTransition(u, lp, g, info[0], info[1] > 0, info[2], info[3] > 0, info[4].long(), info[5].long(),
                          info[6].long(), info[7].long(), info[8:].T.contiguous())


class Trajectory(NamedTuple):
    """The end of a leapfrog trajectory and the Hamiltonian H = -log pi + p^T M^-1 p / 2 at both ends."""

    position: Tensor  # (chains, k)
    momentum: Tensor
    grad: Tensor  # grad log pi at the end
    log_prob: Tensor  # (chains,) at the end
    start_log_prob: Tensor
    start_energy: Tensor
    end_energy: Tensor


def leapfrog(run: Callable, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
             grad: Tensor | None, log_prob: Tensor | None) -> Trajectory:
    """Call ``run`` (a density's leapfrog function with its leading arguments bound, taking the number of steps
    first) with the arguments every density shares: M^-1 and whether it is dense, one step size per chain,
    the point, momentum and gradient (copied: the inputs are not modified), whether log pi and its gradient
    at the start are known (else the kernel evaluates them first) and the output rows."""
    if num_steps < 1:
        raise ValueError("num_steps must be >= 1")
    u, p = (t.detach().clone(memory_format=torch.contiguous_format) for t in (position, momentum))
    chains = u.shape[0]
    out = torch.empty(4, chains, dtype=u.dtype)  # log pi start, end; H start, end
    start_known = grad is not None
    if start_known:
        g = grad.detach().clone(memory_format=torch.contiguous_format)
        out[0] = log_prob
    else:
        g = torch.empty_like(u)
    if isinstance(step_size, Tensor):
        eps = step_size.detach().to(u.dtype).reshape(-1).expand(chains).contiguous()
    else:
        eps = torch.full((chains,), float(step_size), dtype=u.dtype)
    inv_mass = inv_mass.detach().contiguous()
    run(num_steps, ptr(inv_mass), inv_mass.dim() == 2, ptr(eps), ptr(u), ptr(p), ptr(g), start_known, ptr(out))
    return Trajectory(u, p, g, out[1], out[0], out[2], out[3])


