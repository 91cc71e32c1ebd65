"""Neal's funnel on the native kernels (funnel.h): its log density and gradient, and NUTS transitions.

The funnel's gradient costs O(dim) arithmetic, so in PyTorch every NUTS leaf is a few dozen tiny
operations whose dispatch dominates; in C a 10-d leaf is tens of nanoseconds. Used for CPU tensors of
float64/32 when the library builds (bayesx.native.build); otherwise the target keeps its PyTorch path.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bayesx.native import logistic
from bayesx.native.nuts import NUTSTransition, ptr, transition

LOG_2PI = math.log(2.0 * math.pi)


def constant(dim: int) -> float:
    """The normalizers of v ~ N(0, 3^2) and of the dim - 1 coordinates x_j | v ~ N(0, e^v)."""
    return -math.log(3.0) - 0.5 * dim * LOG_2PI


def supports(position: Tensor) -> bool:
    """CPU chains of float64/32 (a batch, not one point) with the library built."""
    return position.dim() == 2 and position.device.type == "cpu" and logistic.available(position.dtype)


def log_prob_and_grad(position: Tensor) -> tuple[Tensor, Tensor]:
    """log pi and its gradient at each row of position (chains, dim); the caller has checked :func:`supports`."""
    u = position.detach().contiguous()
    grad, log_prob = torch.empty_like(u), torch.empty(u.shape[0], dtype=u.dtype)
    logistic.kernels(u.dtype).funnel_density(u.shape[0], u.shape[1], constant(u.shape[1]), ptr(u), ptr(grad),
                                             ptr(log_prob))
    return log_prob, grad


def nuts(position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float, inv_mass: Tensor,
         max_depth: int, seeds: Tensor) -> NUTSTransition:
    """One NUTS transition of every chain in one native call (see bayesx.native.nuts.transition)."""
    run = logistic.kernels(position.dtype).funnel_nuts
    chains, dim = position.shape
    threads = logistic.kernel_threads(position.dtype, chains)
    return transition(lambda *tail: run(threads, chains, dim, constant(dim), *tail),
                      position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)
