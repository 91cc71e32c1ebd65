"""Fused leapfrog trajectories and NUTS transitions for densities in logistic form, on the CPU.

Both samplers of Deep MCMC Table 1 spend their time in leapfrog steps on a density of one form
(bayesx.targets.forms.LogisticForm),

    log pi(u) = sum_i [y_i l_i - log(1 + e^{l_i})] - u^T P u / 2 - b^T u + const,   l = c + A u,
    grad      = A^T (y - sigmoid(l)) - P u - b,

HMC on logistic regression with A = X, c = 0, P = I / s^2, b = 0, and AE-HMC's latent chain with
A = X B, c = X a, P = B^T B / s^2, b = B^T a / s^2 (the decoder q = a + B u, Deep MCMC eq. 7). At the
sizes of that table (n = 288, k = 6 to 64, four chains) a PyTorch step is a handful of tiny kernels
whose dispatch costs more than their arithmetic, so :func:`trajectory` runs all L steps of every
chain in one C call (leapfrog.h on the logistic form of logistic_form.h), and :func:`nuts` each chain's whole tree (nuts.h, which takes
any density with a native gradient), with the same arithmetic as the PyTorch path up to rounding. The
kernels choose this backend from a target's form (bayesx.kernels.backend): for CPU tensors of float64
or float32 when the library builds (see build.py). Chains are independent, so one call splits them over
torch's thread count (:func:`kernel_threads`) with OpenMP, in the same thread pool as PyTorch's
own parallel operations (see build.py). The C functions' types are declared once, in entry_points.py.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from bayesx.memory import usable_cores
from bayesx.native.build import enabled, load
from bayesx.native.entry_points import bind
from bayesx.native.calls import NUTSTransition, Trajectory, leapfrog, ptr, transition

if TYPE_CHECKING:
    from bayesx.targets.forms import LogisticForm

_SUFFIX = {torch.float64: "f64", torch.float32: "f32"}


class _Kernels(NamedTuple):
    density: ctypes._CFuncPtr
    leapfrog: ctypes._CFuncPtr
    nuts: ctypes._CFuncPtr
    work_size: ctypes._CFuncPtr  # (n, k) -> scratch numbers one thread of the functions needs
    openmp: bool  # whether one call can split its chains over threads


@cache
def kernels(dtype: torch.dtype) -> _Kernels | None:
    """The library's functions for one precision, typed and checked against the library's own signatures
    (bayesx.native.entry_points; a difference raises NativeSignatureError), or None where it cannot be built."""
    library = load("kernels") if dtype in _SUFFIX else None
    if library is None:
        return None
    functions = bind(library, _SUFFIX[dtype], library._name)
    return _Kernels(functions["logistic_density"], functions["logistic_leapfrog"], functions["logistic_nuts"],
                    functions["logistic_work_size"], bool(functions["logistic_openmp"]()))


def available(dtype: torch.dtype = torch.float64) -> bool:
    """Whether the native kernels are on and built for this dtype on this machine."""
    return enabled() and kernels(dtype) is not None


def kernel_threads(dtype: torch.dtype, chains: int) -> int:
    """Threads one native call splits its chains over: torch's thread count, at most the CPUs this process
    may run on (bayesx.memory.usable_cores: more threads than cores only wait on each other) and one per
    chain; one where the library was built without OpenMP. On this project's two cores splitting never
    lost, down to two chains of 1,728 multiply-adds each and one leapfrog step (11 against 12 us
    per density call, 25 against 26 us per one-step trajectory, measured 2026-11-21)."""
    library = kernels(dtype)
    if library is None or not library.openmp:
        return 1
    return max(1, min(torch.get_num_threads(), usable_cores(), chains))


LARGE_DESIGN = 1 << 17
"""Design matrices (n x k) from this many entries on stop fitting in a core's cache, where
PyTorch's BLAS, which reuses each block of the design across chains, wins from some chain count on."""
HUGE_DESIGN = 1 << 20
MANY_CHAINS = {LARGE_DESIGN: 56, HUGE_DESIGN: 12}
"""From how many chains PyTorch runs, by design size (the largest key not above the design's entries).
Native (chains in pairs, see :func:`pairs_pay`) against PyTorch per HMC leapfrog step at 2 threads
(float64, measured 2026-11-24): on synthetic (550 x 500) 1.66x with 8 chains, 1.38x with 16, 1.09x
with 32, 1.04x with 48, 0.87x with 64; on mnist01 (1703 x 784) 1.49x with 4, 1.15x with 8, 0.94x with
12, 0.98x with 16; on digits (288 x 64) the kernel is 3-8x faster at every count up to 32. (Before
the pairs, the crossovers were 12 and 5 chains.)"""


def many_chains(form: LogisticForm) -> int | None:
    """The chain count from which PyTorch runs on this form's design; None: the kernel always runs."""
    entries = form.design_t.numel()
    sizes = [size for size in MANY_CHAINS if size <= entries]
    return MANY_CHAINS[max(sizes)] if sizes else None


def supports(form: LogisticForm, position: Tensor) -> bool:
    """Whether the native kernels can and should run for this form and these chains: CPU tensors of
    float64/32, the library built, and not many chains on a large design (see :data:`MANY_CHAINS`)."""
    if position.device.type != "cpu" or form.design_t.device.type != "cpu" or position.dtype != form.design_t.dtype:
        return False
    many = many_chains(form)
    if many is not None and position.shape[0] >= many:
        return False
    return available(position.dtype)


def _form_args(form: LogisticForm) -> tuple:
    return (ptr(form.design_t), ptr(form.offset), ptr(form.labels), ptr(form.precision),
            form.precision.dim() == 2, ptr(form.shift), form.constant)


def _work(library: _Kernels, form: LogisticForm, like: Tensor, threads: int) -> Tensor:
    return torch.empty(threads * 2 * library.work_size(form.rows, like.shape[-1]), dtype=like.dtype)


def log_prob_and_grad(form: LogisticForm, position: Tensor) -> tuple[Tensor, Tensor]:
    """log pi and grad log pi at each row of position (chains, k), in one native call. The caller
    has checked :func:`supports`."""
    library = kernels(position.dtype)
    u = position.detach().contiguous()
    chains, k = u.shape
    grad, log_prob = torch.empty_like(u), torch.empty(chains, dtype=u.dtype)
    threads = kernel_threads(u.dtype, chains)
    work = _work(library, form, u, threads)  # held here: a pointer does not keep its tensor alive
    library.density(threads, chains, form.rows, k, *_form_args(form), ptr(u), ptr(grad), ptr(log_prob),
                    ptr(work))
    return log_prob, grad


def trajectory(form: LogisticForm, position: Tensor, momentum: Tensor, step_size, num_steps: int,
               inv_mass: Tensor, grad: Tensor | None = None, log_prob: Tensor | None = None,
               pairs: bool | None = None) -> Trajectory:
    """``num_steps`` leapfrog steps from (position, momentum) with velocity M^-1 p (inv_mass dense
    (k, k) or diagonal (k)) and a scalar or per-chain step size, in one native call. grad and
    log_prob are log pi and its gradient at the start where the caller has them; otherwise the
    kernel evaluates them first. ``pairs``: run the chains two at a time per thread (None:
    :func:`pairs_pay`). The inputs are not modified; the caller has checked :func:`supports`.
    """
    library = kernels(position.dtype)
    chains, k = position.shape
    threads = kernel_threads(position.dtype, chains)
    paired = pairs_pay(chains, threads) if pairs is None else pairs
    work = _work(library, form, position, threads)  # held here: a pointer does not keep its tensor alive
    return leapfrog(lambda steps, *tail: library.leapfrog(threads, paired, chains, form.rows, k, steps,
                                                          *_form_args(form), *tail, ptr(work)),
                    position, momentum, step_size, num_steps, inv_mass, grad, log_prob)


PAIR_COST = 1.5
"""The cost of a pair's two gradients (add_product2 / transpose_product2) in units of one gradient: on
synthetic (550 x 500, double, two threads) 0.394 against 0.258 ns per design entry (measured 2026-11-24)."""


def pairs_pay(chains: int, threads: int) -> bool:
    """Whether the kernels run the chains two at a time per thread (HMC trajectories in lock-step, NUTS
    trees leaf by leaf), each pair's gradients reading the design once: where the pairs' makespan,
    ceil(ceil(chains / 2) / threads) x PAIR_COST, beats the single chains', ceil(chains / threads). Four
    chains on two threads: 1.5 against 2, so pairs; two chains on two threads: 1.5 against 1, so not."""
    def rounds(tasks: int) -> int:
        return -(-tasks // threads)
    return chains > 1 and rounds(-(-chains // 2)) * PAIR_COST < rounds(chains)


def nuts(form: LogisticForm, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
         inv_mass: Tensor, max_depth: int, seeds: Tensor, pairs: bool | None = None) -> NUTSTransition:
    """One NUTS transition of every chain in one native call, each chain's tree built on its own (nuts.h),
    or two in lock-step per thread (``pairs``; None: :func:`pairs_pay`); ``seeds`` (chains,) int64 seed each
    chain's uniforms. The inputs are not modified; the caller has checked :func:`supports`."""
    run = kernels(position.dtype).nuts
    (chains, k), n = position.shape, form.rows
    threads = kernel_threads(position.dtype, chains)
    paired = pairs_pay(chains, threads) if pairs is None else pairs
    return transition(lambda *tail: run(threads, paired, chains, n, k, *_form_args(form), *tail),
                      position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)
