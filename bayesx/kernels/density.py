"""The density a method moves on or fits, as a value: what every kernel, fit and trainer takes in place of the target.

A :class:`Density` is made once per run by bayesx.kernels.backend.prepare and passed on, as BlackJAX's kernels take
``logdensity_fn``: nothing below it looks a backend up again. It evaluates

    logp_and_grad(q)   log pi and its gradient at each row of q (n, dim) -> (n,), (n, dim)
    logp(q)            log pi alone (the target's PyTorch code: a random walk needs no gradient)
    differentiable_logp(q)
                       log pi as a node of torch's graph whose backward is the prepared gradient
                       (:class:`_PreparedLogProb`, first order only), for fits that need autograd through log pi

by its fast path where one was prepared and runs for these points (the hand-written C form, or the compiled
density, in C), else by the target's own PyTorch code; ``trajectory`` and ``nuts_transition`` are the
fast path's native leapfrog trajectories and NUTS transitions, None on PyTorch. ``name`` (the run's ``kernels``
tag), ``tags()`` and ``timings()`` are its provenance for the run record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

PYTORCH = "pytorch"


class FastPath(Protocol):
    """A native evaluation of one density (bayesx.kernels.backend's NativeForm and Compiled); its trajectories and
    NUTS transitions return the native calls' Trajectory and NUTSTransition (named tuples)."""

    name: str

    def runs(self, position: Tensor) -> bool:
        """Whether this path evaluates these points (n, dim): their device, dtype and count."""

    def logp_and_grad(self, position: Tensor) -> tuple[Tensor, Tensor]: ...

    def trajectory(self, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
                   grad: Tensor | None, log_prob: Tensor | None) -> tuple: ...

    def nuts(self, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
             inv_mass: Tensor, max_depth: int, gen: torch.Generator) -> tuple:
        """Each chain's tree in C, its uniforms from a seed per chain drawn from ``gen``."""


class Density:
    """log pi over R^dim, batched, by one prepared backend (see the module docstring).

    ``log_prob`` and ``log_prob_and_grad`` are the PyTorch implementation (a target's methods, or any functions
    of the same shapes: a tempered density, a test's counting density); ``fast`` the native path or None;
    ``record`` the preparation's tags and timings (bayesx.kernels.backend.Preparation) or None."""

    def __init__(self, log_prob: Callable[[Tensor], Tensor],
                 log_prob_and_grad: Callable[[Tensor], tuple[Tensor, Tensor]],
                 dim: int, dtype: torch.dtype, device: torch.device, fast: FastPath | None = None, record=None):
        self._log_prob, self._log_prob_and_grad = log_prob, log_prob_and_grad
        self.dim, self.dtype, self.device = dim, dtype, device
        self.fast, self.record = fast, record
        self.name = fast.name if fast is not None else PYTORCH
        self.trajectory = self._trajectory if fast is not None else None
        self.nuts_transition = self._nuts_transition if fast is not None else None

    def __repr__(self) -> str:
        return f"Density({self.name}, dim={self.dim}, {self.dtype})"

    def _fast_for(self, position: Tensor) -> FastPath | None:
        fast = self.fast
        if fast is None or position.dim() != 2 or position.requires_grad or not fast.runs(position):
            return None
        return fast

    def logp_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """log pi and its gradient at each row of q (n, dim): the prepared fast path where it runs for these
        points (never under autograd or for one point (dim,)), else the PyTorch implementation."""
        fast = self._fast_for(q)
        return fast.logp_and_grad(q) if fast is not None else self._log_prob_and_grad(q)

    def logp(self, q: Tensor) -> Tensor:
        """log pi at each row of q (..., dim), by the PyTorch implementation (differentiable where it is)."""
        return self._log_prob(q)

    def differentiable_logp(self, q: Tensor) -> Tensor:
        """log pi at each row of q (n, dim) as a node of torch's graph whose gradient is this density's
        (the compiled one where prepared): for fits that backpropagate through log pi. First order only."""
        return _PreparedLogProb.apply(q, self)

    def _trajectory(self, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
                    grad: Tensor | None = None, log_prob: Tensor | None = None) -> tuple | None:
        """``num_steps`` leapfrog steps of every chain in one native call (velocity M^-1 p, inv_mass dense or
        diagonal), with H = -log pi + p^T M^-1 p / 2 at both ends; None where the fast path does not run for
        these chains (the caller then runs PyTorch's loop)."""
        fast = self._fast_for(position)
        if fast is None:
            return None
        return fast.trajectory(position, momentum, step_size, num_steps, inv_mass, grad, log_prob)

    def _nuts_transition(self, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor,
                         step_size: float, inv_mass: Tensor, max_depth: int,
                         seeds: Tensor) -> tuple | None:
        """One NUTS transition of every chain in one native call, each chain's tree on its own (its uniforms
        from its 64-bit seed in ``seeds``, as bayesx.kernels.nuts draws them); None where the fast path does not
        run for these chains."""
        fast = self._fast_for(position)
        if fast is None:
            return None
        return fast.nuts(position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)

    def tags(self) -> dict[str, str]:
        """What the preparation did, for the run's tags (``compiled_density``, ``density_compiler``)."""
        return self.record.tags() if self.record is not None else {}

    def timings(self) -> dict[str, float]:
        """The preparation's seconds where the compiled density runs (``compile_time_s``)."""
        return self.record.timings() if self.record is not None else {}


class _PreparedLogProb(torch.autograd.Function):
    """log pi(q) with backward v -> v[:, None] * grad log pi(q), the gradient from Density.logp_and_grad (the
    compiled or hand-written C one where prepared), so a fit that backpropagates through log pi reaches it."""

    @staticmethod
    def forward(ctx, q: Tensor, density: Density) -> Tensor:
        lp, grad = density.logp_and_grad(q.detach())
        ctx.save_for_backward(grad)
        return lp

    @staticmethod
    def backward(ctx, upstream: Tensor):
        (grad,) = ctx.saved_tensors
        return upstream[:, None] * grad, None
