"""Which backend runs a target's density in the kernels: PyTorch, or the native (C) kernels.

Every target runs on PyTorch: its ``log_prob_and_grad`` inside the integrators' loops and the NUTS trees of
bayesx.kernels. The native kernels (C NUTS trees and leapfrog trajectories, each chain on its own thread
slot, never returning to Python) run instead on two kinds of density:

- a density with a form the native code evaluates by hand: the target says so, and only that, with
  ``density_form()`` (a bayesx.targets.forms.LogisticForm, else None); it runs natively where
  bayesx.native.logistic.supports the chains (CPU tensors of float64/32, the library built, not many
  chains on a large design);
- any other density whose log_prob autograd differentiates (``autograd_log_prob()``), compiled ahead of
  time (bayesx.native.compiled: traced, written as plain C or compiled by AOTInductor, cached by content) when a
  method announces
  work enough to repay the compile (:func:`prepare_sampler`, :func:`prepare_batches`; the ``compile`` setting).

    prepare_sampler(target, q, calls)   before a sampler's run that would make ``calls`` PyTorch calls of the
                                        density (transitions x gradients per transition): compile it where
                                        the policy says so; what happened, for the run's record
    identify(target, identity)          what defines the target's density, for the compiled cache (the runner)
    prepare_batches(target, batch)      before an approximation's fit that evaluates the density's gradient
                                        at batches like ``batch``: a compiled density (plain C compiled now,
                                        AOTInductor's only from the cache, or ``compile=always``) where it is
                                        faster than PyTorch at that batch (measured)
    name(target, q)                     "native", "compiled" or "pytorch", the run's ``kernels`` tag
    native_available(dtype)             whether the native backend is on and built at all
    density_and_grad(target, q)         log pi and its gradient at each row of q by the fastest backend
                                        prepared for it (what methods call in their loops)
    trajectory(target, ...)             a whole leapfrog trajectory in one C call, or None (PyTorch's loop)
    nuts_transition(target, ...)        one NUTS transition of every chain, each chain's tree in C, or None

Never for one point (dim,) or under autograd (a caller differentiating through the density needs PyTorch).
``BAYESX_NATIVE=0`` turns the native backend off; without a C compiler it is off with one warning
(bayesx.native.build). ``BAYESX_COMPILE`` (the runner sets it from the ``compile`` setting) is the
compile policy: ``auto`` (the default), ``always`` or ``never``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bayesx.native import compiled as compiler
from bayesx.native import logistic as native
from bayesx.native.calls import Trajectory
from bayesx.native.calls import NUTSTransition, chain_seeds

if TYPE_CHECKING:
    from bayesx.targets.forms import LogisticForm

NATIVE, COMPILED, PYTORCH = "native", "compiled", "pytorch"
POLICIES = ("auto", "always", "never")
COMPILE_FROM = 5000
"""PyTorch calls of the density from which ``compile=auto`` compiles a density for a sampler: a cold compile
costs 0.1-1.4 s as plain C and 8-26 s by AOTInductor on this project's 2 cores (measured 2026-11-26), a PyTorch
call about 300 us more than the compiled path's, so 5,000 calls (a default NUTS run of 750 transitions with trees
of 8 leaves, its shallowest usual depth) lose at most a few seconds once per density and machine, and a hard
posterior (trees of 256 leaves) saves minutes."""
TIMING_REPEATS = 5
_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> CompiledDensity
_batch_limit: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> largest batch it is used for
_identities: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> what defines its density


@dataclass(frozen=True)
class Preparation:
    """What a prepare function did: ``kernels`` as :func:`name`, the compile's seconds in this process (0: it
    came from the cache), whether it came from the cache, why a density was not compiled or not used, and the
    seconds the preparation took (tracing, compiling or loading, checking, timing)."""

    kernels: str
    compile_s: float = 0.0
    cached: bool = False
    reason: str = ""
    seconds: float = 0.0
    compiler: str = ""  # which compiler made the compiled density (bayesx.native.compiled.COMPILERS)

    def timings(self) -> dict[str, float]:
        """The run's ``compile_time_s`` where the compiled density runs."""
        return {"compile_time_s": self.seconds} if self.kernels == COMPILED else {}

    def tags(self) -> dict[str, str]:
        how = "cached" if self.cached else f"compiled in {self.compile_s:.1f} s"
        if self.kernels == COMPILED:
            return {"compiled_density": how, **({"density_compiler": self.compiler} if self.compiler else {})}
        if self.cached or self.compile_s:  # compiled, and PyTorch measured faster
            return {"compiled_density": f"{how}, not used: {self.reason}"}
        return {"compiled_density": f"not compiled: {self.reason}"} if self.reason else {}


def identify(target, identity: str) -> None:
    """Tell the backend what defines the target's density (the runner's posterior identity: the model's
    options, the digests of a user's files, the data's options, the dtype): its compiled library is then found
    in the cache without tracing the density again (bayesx.native.compiled.compiled_density)."""
    _identities[target] = identity


def compile_policy() -> str:
    policy = os.environ.get("BAYESX_COMPILE", "auto").strip().lower() or "auto"
    return {"1": "always", "true": "always", "0": "never", "false": "never"}.get(policy, policy)


def _timed(prepare):
    """The prepare function, its Preparation carrying the seconds it took."""
    @functools.wraps(prepare)
    def timed(*args, **kwargs) -> Preparation:
        start = time.perf_counter()
        return dataclasses.replace(prepare(*args, **kwargs), seconds=time.perf_counter() - start)
    return timed


@_timed
def prepare_sampler(target, position: Tensor, calls: int) -> Preparation:
    """Before a sampler's run from ``position`` (chains, dim) that would make about ``calls`` PyTorch calls
    of the density: compile the target's density for the native kernels where it has no hand-written form
    and the policy says so (``auto``: from COMPILE_FROM calls). A density that cannot be compiled runs on
    PyTorch, with the reason logged once. The choice depends on counts (and on what this process compiled for
    the same target object already), never on timing or on the cache, so a seed gives the same draws on
    every run."""
    if native_form(target, position) is not None:
        return Preparation(NATIVE)
    policy = compile_policy()
    if policy == "auto" and calls < COMPILE_FROM and target not in _compiled \
            and _why_not_compiled(target, position, policy) is None:
        return Preparation(PYTORCH, reason=f"a run of about {calls} density calls does not repay a compile (auto "
                                           f"compiles from {COMPILE_FROM})")
    density, prepared = _obtain(target, position, policy)
    if density is not None:
        _batch_limit.pop(target, None)
    return prepared


@_timed
def prepare_batches(target, batch: Tensor) -> Preparation:
    """Before an approximation's fit that evaluates log pi and its gradient at batches like ``batch``
    (points, dim), through :func:`density_and_grad`: its compiled density (``auto``: compiled now where it can be
    written as plain C, about a second; an AOTInductor library, 8-26 s, which a fit's few thousand calls rarely
    repay, only from the cache; ``compile=always`` compiles either), used where it is faster than the target's PyTorch code at
    that batch (timed here, best of TIMING_REPEATS; a vectorized density at a batch of hundreds runs faster in
    PyTorch than point by point). The choice changes the gradients only by rounding."""
    if native_form(target, batch) is not None:
        return Preparation(NATIVE)
    policy = compile_policy()
    density, prepared = _obtain(target, batch, policy, quick_only=policy == "auto")
    if density is None:
        return prepared
    if policy == "auto":
        compiled_s = _best_time(density.log_prob_and_grad, batch)
        pytorch_s = _best_time(target.log_prob_and_grad, batch)
        if compiled_s >= pytorch_s:
            _batch_limit[target] = min(_batch_limit.get(target, batch.shape[0]), batch.shape[0] - 1)
            return Preparation(PYTORCH, prepared.compile_s, prepared.cached,
                               f"PyTorch is faster at {batch.shape[0]} points per call ({pytorch_s * 1e6:.0f} "
                               f"against {compiled_s * 1e6:.0f} us)")
    _batch_limit[target] = max(_batch_limit.get(target, 0), batch.shape[0])
    return prepared


def _obtain(target, position: Tensor, policy: str, quick_only: bool = False) -> tuple:
    """(the target's compiled density, how it was had: compiled now, from the cache, or prepared earlier in this
    process, which counts as cached) or (None, the PyTorch Preparation with why not); a reason worth telling the
    user is said once on stderr. ``quick_only``: compiled now only as plain C (about a second), by AOTInductor
    only from the cache (no reason told where it is not there)."""
    if target in _compiled:
        return _compiled[target], Preparation(COMPILED, 0.0, True, compiler=_compiled[target].compiler)
    reason = _why_not_compiled(target, position, policy)
    if reason is None:
        try:
            density = compiler.compiled_density(target.autograd_log_prob(), target.dim, position.dtype,
                                                identity=_identities.get(target), quick_only=quick_only,
                                                points=position)  # checked where the chains start too
        except compiler.NotCompiled as exc:
            reason = str(exc)
        else:
            _compiled[target] = density
            if not density.cached:
                _say(f"bayesx: compiled the density for the native kernels ({density.compiler}) in "
                     f"{density.compile_s:.1f} s (cached: "
                     f"{density.library_path})")
            return density, Preparation(COMPILED, density.compile_s, density.cached, compiler=density.compiler)
    if not reason.startswith("-"):
        _say(f"bayesx: the density runs on PyTorch, not compiled: {reason}")
    return None, Preparation(PYTORCH, reason=reason.lstrip("-"))


def _best_time(function, batch: Tensor) -> float:
    function(batch)
    best = float("inf")
    for _ in range(TIMING_REPEATS):
        start = time.perf_counter()
        function(batch)
        best = min(best, time.perf_counter() - start)
    return best


def _say(line: str) -> None:
    """One line on stderr for the person running bayesx (the run's tags record the same)."""
    print(line, file=sys.stderr, flush=True)


def _why_not_compiled(target, position: Tensor, policy: str) -> str | None:
    """None where the density may be compiled, else why not (a leading '-': not worth a log line)."""
    if policy not in POLICIES:
        return f"BAYESX_COMPILE={policy} is not one of {', '.join(POLICIES)}"
    if policy == "never":
        return "-compile=never"
    if position.device.type != "cpu" or position.dtype not in compiler.SUFFIX or position.dim() != 2:
        return "-compiled densities run on the CPU in float64 or float32"
    if target.autograd_log_prob() is None:
        return "-its log density is computed outside torch's graph"
    return None


def compiled_for(target, position: Tensor):
    """The target's compiled density where one was prepared and runs for these chains, else None."""
    density = _compiled.get(target)
    if density is None or position.dim() != 2 or position.requires_grad or position.device.type != "cpu" \
            or position.dtype != density.dtype or position.shape[0] > _batch_limit.get(target, position.shape[0]):
        return None
    return density


def native_available(dtype: torch.dtype = torch.float64) -> bool:
    """Whether the native backend is on and built for this dtype on this machine (for any form)."""
    return native.available(dtype)


def native_form(target, position: Tensor) -> LogisticForm | None:
    """The target's density form where the native kernels run for these chains (chains, dim), else None."""
    form = target.density_form()
    if form is None or position.dim() != 2 or position.requires_grad or not native.supports(form, position):
        return None
    return form


def name(target, position: Tensor) -> str:
    """Which backend runs this target's density for these chains (the run's ``kernels`` tag)."""
    if native_form(target, position) is not None:
        return NATIVE
    return COMPILED if compiled_for(target, position) is not None else PYTORCH


def density_and_grad(target, position: Tensor) -> tuple[Tensor, Tensor]:
    """log pi and its gradient at each row of position (points, dim) in one call: by the hand-written native
    form where the target has one, by its compiled density where one was prepared for batches like this (not
    under autograd), else by the target's own ``log_prob_and_grad``. What methods call in their loops."""
    form = native_form(target, position)
    if form is not None:
        return native.log_prob_and_grad(form, position)
    density = compiled_for(target, position)
    if density is not None:
        return density.log_prob_and_grad(position)
    return target.log_prob_and_grad(position)


def trajectory(target, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
               grad: Tensor | None = None, log_prob: Tensor | None = None) -> Trajectory | None:
    """``num_steps`` leapfrog steps of every chain with velocity M^-1 p (inv_mass dense or diagonal) in one
    native call, with H = -log pi + p^T M^-1 p / 2 at both ends; None where the native kernels do not run
    (then bayesx.kernels.integrators runs its PyTorch loop). grad and log_prob: at the start, if known."""
    form = native_form(target, position)
    if form is not None:
        return native.trajectory(form, position, momentum, step_size, num_steps, inv_mass, grad, log_prob)
    density = compiled_for(target, position)
    if density is None:
        return None
    return density.trajectory(position, momentum, step_size, num_steps, inv_mass, grad, log_prob)


def nuts_transition(target, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
                    inv_mass: Tensor, max_depth: int, gen: torch.Generator) -> NUTSTransition | None:
    """One NUTS transition of every chain in one native call, each chain's tree on its own (its uniforms from
    a seed per chain drawn from ``gen``); None where the native kernels do not run (then bayesx.kernels.nuts
    builds the trees in PyTorch, chains in lock-step)."""
    form = native_form(target, position)
    if form is not None:
        return native.nuts(form, position, momentum, log_prob, grad, step_size, inv_mass, max_depth,
                           chain_seeds(position.shape[0], gen))
    density = compiled_for(target, position)
    if density is None:
        return None
    return density.nuts(position, momentum, log_prob, grad, step_size, inv_mass, max_depth,
                        chain_seeds(position.shape[0], gen))
