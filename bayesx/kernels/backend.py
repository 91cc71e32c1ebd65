"""Which backend runs a target's density in the kernels: PyTorch, or the native (C) kernels.

Every target runs on PyTorch: its ``log_prob_and_grad`` inside the integrators' loops and the NUTS trees of
bayesx.kernels. A target whose density has a form the native code evaluates says so, and only that, with
``density_form()`` (a bayesx.targets.forms.LogisticForm, else None); this module decides from that form
and the chains whether the native kernels run instead (bayesx.native.logistic.supports: CPU tensors of
float64/32, the library built, not many chains on a large design) and runs them:

    name(target, position)          "native" or "pytorch", the run's ``kernels`` tag
    native_available(dtype)         whether the native backend is on and built at all
    trajectory(target, ...)         a whole leapfrog trajectory in one C call, or None (PyTorch's loop)
    nuts_transition(target, ...)    one NUTS transition of every chain, each chain's tree in C, or None
    log_prob_and_grad(form, q)      log pi and its gradient in one C call, or None (the target's own
                                    analytic PyTorch formula)

Never for one point or under autograd (a caller differentiating through the density needs PyTorch).
``BAYESX_NATIVE=0`` turns the native backend off; without a C compiler it is off with one warning
(bayesx.native.build).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bayesx.native import logistic as native
from bayesx.native.logistic import Trajectory
from bayesx.native.nuts import NUTSTransition, chain_seeds

if TYPE_CHECKING:
    from bayesx.targets.forms import LogisticForm

NATIVE, PYTORCH = "native", "pytorch"


def native_available(dtype: torch.dtype = torch.float64) -> bool:
    """Whether the native backend is on and built for this dtype on this machine (for any form)."""
    return native.available(dtype)


def runs_natively(form: LogisticForm | None, position: Tensor) -> bool:
    """Whether the native kernels evaluate a density of this form at these chains (chains, dim)."""
    return (form is not None and position.dim() == 2 and not position.requires_grad
            and native.supports(form, position))


def native_form(target, position: Tensor) -> LogisticForm | None:
    """The target's density form where the native kernels run for these chains, else None."""
    form = target.density_form()
    return form if runs_natively(form, position) else None


def name(target, position: Tensor) -> str:
    """Which backend runs this target's density for these chains (the run's ``kernels`` tag)."""
    return NATIVE if native_form(target, position) is not None else PYTORCH


def log_prob_and_grad(form: LogisticForm | None, position: Tensor) -> tuple[Tensor, Tensor] | None:
    """log pi and grad log pi at each row of position in one native call, where the native kernels run for
    this form (a target's ``log_prob_and_grad`` tries this before its own PyTorch formula); else None."""
    return native.log_prob_and_grad(form, position) if runs_natively(form, position) else None


def trajectory(target, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
               grad: Tensor | None = None, log_prob: Tensor | None = None) -> Trajectory | None:
    """``num_steps`` leapfrog steps of every chain with velocity M^-1 p (inv_mass dense or diagonal) in one
    native call, with H = -log pi + p^T M^-1 p / 2 at both ends; None where the native kernels do not run
    (then bayesx.kernels.integrators runs its PyTorch loop). grad and log_prob: at the start, if known."""
    form = native_form(target, position)
    if form is None:
        return None
    return native.trajectory(form, position, momentum, step_size, num_steps, inv_mass, grad, log_prob)


def nuts_transition(target, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
                    inv_mass: Tensor, max_depth: int, gen: torch.Generator) -> NUTSTransition | None:
    """One NUTS transition of every chain in one native call, each chain's tree on its own (its uniforms from
    a seed per chain drawn from ``gen``); None where the native kernels do not run (then bayesx.kernels.nuts
    builds the trees in PyTorch, chains in lock-step)."""
    form = native_form(target, position)
    if form is None:
        return None
    return native.nuts(form, position, momentum, log_prob, grad, step_size, inv_mass, max_depth,
                       chain_seeds(position.shape[0], gen))
