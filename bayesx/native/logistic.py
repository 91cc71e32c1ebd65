"""Fused leapfrog trajectories for Gaussian-prior logistic regression, on the CPU.

Both samplers of Deep MCMC Table 1 spend their time in leapfrog steps on a density of one form,

    log pi(u) = sum_i [y_i l_i - log(1 + e^{l_i})] - u^T P u / 2 - b^T u + const,   l = c + A u,
    grad      = A^T (y - sigmoid(l)) - P u - b,

HMC on logistic regression with A = X, c = 0, P = I / s^2, b = 0, and AE-HMC's latent chain with
A = X B, c = X a, P = B^T B / s^2, b = B^T a / s^2 (the decoder q = a + B u, 001 eq. 7). At the
sizes of that table (n = 288, k = 6 to 64, four chains) a PyTorch step is a handful of tiny kernels
whose dispatch costs more than their arithmetic, so :func:`trajectory` runs all L steps of every
chain in one C call (logistic_leapfrog.h), with the same arithmetic as the PyTorch path up to
rounding. It is used for CPU tensors of float64 or float32 when the library builds (see build.py);
otherwise callers keep their PyTorch path.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.native.build import enabled, load

_SUFFIX = {torch.float64: "f64", torch.float32: "f32"}


class LogisticForm(NamedTuple):
    """The density above: design_t = A^T (k, n), offset c (n) or None, labels y (n), precision P
    (k, k) or its diagonal (k), shift b (k) or None, and the constant the kernel leaves out.
    All tensors share one device and dtype and are contiguous (see :func:`make_form`)."""

    design_t: Tensor
    offset: Tensor | None
    labels: Tensor
    precision: Tensor
    shift: Tensor | None
    constant: float = 0.0


def make_form(design_t, offset, labels, precision, shift, constant: float = 0.0) -> LogisticForm:
    def ready(t):
        return None if t is None else t.detach().contiguous()
    return LogisticForm(ready(design_t), ready(offset), ready(labels), ready(precision), ready(shift), float(constant))


def _function(kind: str, dtype: torch.dtype):
    if not enabled() or dtype not in _SUFFIX:
        return None
    library = load("logistic_leapfrog")
    return None if library is None else getattr(library, f"{kind}_{_SUFFIX[dtype]}")


def available(dtype: torch.dtype = torch.float64) -> bool:
    """Whether the native kernels are on and built for this dtype on this machine."""
    return _function("logistic_leapfrog", dtype) is not None


SMALL_PROBLEM = 1 << 18
"""Above this many multiply-adds per gradient (chains x n x k), PyTorch's BLAS with more than one
thread beats the single-threaded kernel (bench_native.md and bench_logreg at 2 threads)."""


def supports(form: LogisticForm, position: Tensor) -> bool:
    """Whether the native kernels can and should run for this form and these chains: CPU tensors of
    float64/32, the library built, and either one torch thread or a small problem."""
    if position.device.type != "cpu" or form.design_t.device.type != "cpu" or position.dtype != form.design_t.dtype:
        return False
    small = position.shape[0] * form.design_t.numel() <= SMALL_PROBLEM
    return (small or torch.get_num_threads() == 1) and available(position.dtype)


def fused_form(density, position: Tensor) -> LogisticForm | None:
    """The density's :class:`LogisticForm` when it has one and the native kernels can run on it."""
    form_of = getattr(density, "logistic_form", None)
    if form_of is None:
        return None
    form = form_of()
    return form if supports(form, position) else None


def _ptr(t: Tensor | None):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _form_args(form: LogisticForm) -> tuple:
    return (_ptr(form.design_t), _ptr(form.offset), _ptr(form.labels), _ptr(form.precision),
            ctypes.c_int(form.precision.dim() == 2), _ptr(form.shift))


def log_prob_and_grad(form: LogisticForm, position: Tensor) -> tuple[Tensor, Tensor]:
    """log pi and grad log pi at each row of position (chains, k), in one native call."""
    u = position.detach().contiguous()
    chains, k = u.shape
    n = form.labels.shape[0]
    grad, log_prob = torch.empty_like(u), torch.empty(chains, dtype=u.dtype)
    work = torch.empty(n + k, dtype=u.dtype)
    _function("logistic_density", u.dtype)(chains, n, k, *_form_args(form), _ptr(u), _ptr(grad),
                                           _ptr(log_prob), _ptr(work))
    return log_prob + form.constant, grad


def trajectory(form: LogisticForm, position: Tensor, momentum: Tensor, grad: Tensor, step_size,
               num_steps: int, inv_mass: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``num_steps`` leapfrog steps from (position, momentum), grad = grad log pi(position), with
    velocity M^-1 p (inv_mass dense (k, k) or diagonal (k)) and a scalar or per-chain step size.

    Returns the end position, momentum, gradient and log pi; the inputs are not modified.
    """
    if num_steps < 1:
        raise ValueError("num_steps must be >= 1")
    u, p, g = (t.detach().clone(memory_format=torch.contiguous_format) for t in (position, momentum, grad))
    chains, k = u.shape
    n = form.labels.shape[0]
    if isinstance(step_size, Tensor):
        eps = step_size.detach().to(u.dtype).reshape(-1).expand(chains).contiguous()
    else:
        eps = torch.full((chains,), float(step_size), dtype=u.dtype)
    inv_mass = inv_mass.detach().contiguous()
    log_prob = torch.empty(chains, dtype=u.dtype)
    work = torch.empty(n + 2 * k, dtype=u.dtype)
    _function("logistic_leapfrog", u.dtype)(chains, n, k, num_steps, *_form_args(form), _ptr(inv_mass),
                                            ctypes.c_int(inv_mass.dim() == 2), _ptr(eps), _ptr(u), _ptr(p),
                                            _ptr(g), _ptr(log_prob), _ptr(work))
    return u, p, g, log_prob + form.constant
