"""Which backend runs a target's density in the kernels: PyTorch, or the native (C) kernels.

Every target runs on PyTorch: its ``log_prob_and_grad`` inside the integrators' loops and the NUTS trees of
bayesx.kernels. The native kernels (C NUTS trees and leapfrog trajectories, each chain on its own thread
slot, never returning to Python) run instead on two kinds of density:

- a density with a form the native code evaluates by hand: the target says so, and only that, with
  ``density_form()`` (a bayesx.targets.forms.LogisticForm, else None); it runs natively where
  bayesx.native.logistic.supports the chains (CPU tensors of float64/32, the library built, not many
  chains on a large design);
- any other density whose log_prob autograd differentiates (``autograd_log_prob()``), compiled ahead of
  time (bayesx.native.compiled: traced, compiled by AOTInductor, cached by content) when a sampler
  announces a run long enough to repay the compile (:func:`prepare`; the ``compile`` setting).

    prepare(target, position, n)    before a sampler's run of n chain-transitions: compile the density
                                    where the policy says so; what happened, for the run's record
    name(target, position)          "native", "compiled" or "pytorch", the run's ``kernels`` tag
    native_available(dtype)         whether the native backend is on and built at all
    trajectory(target, ...)         a whole leapfrog trajectory in one C call, or None (PyTorch's loop)
    nuts_transition(target, ...)    one NUTS transition of every chain, each chain's tree in C, or None
    log_prob_and_grad(form, q)      log pi and its gradient in one C call, or None (the target's own
                                    analytic PyTorch formula)
    density_and_grad(target, q)     log pi and its gradient by the compiled density where one was
                                    prepared, else by the target

Never for one point or under autograd (a caller differentiating through the density needs PyTorch).
``BAYESX_NATIVE=0`` turns the native backend off; without a C compiler it is off with one warning
(bayesx.native.build). ``BAYESX_COMPILE`` (the runner sets it from the ``compile`` setting) is the
compile policy: ``auto`` (the default: compile for runs of at least COMPILE_FROM chain-transitions), ``always`` or ``never``.
"""

from __future__ import annotations

import os
import sys
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
COMPILE_FROM = 2000
"""Chain-transitions from which ``compile=auto`` compiles a density that is not cached yet: a compile costs
10-40 s on this project's 2 cores, a PyTorch NUTS leaf about 300 us more than a compiled one, and a
default NUTS run (4 chains, 300 + 450 transitions of ~10 leaves) is 3,000."""
_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # target -> CompiledDensity


@dataclass(frozen=True)
class Preparation:
    """What :func:`prepare` did: ``kernels`` as :func:`name`, the compile's seconds in this process (0: it
    came from the cache), whether it came from the cache, and why a density was not compiled."""

    kernels: str
    compile_s: float = 0.0
    cached: bool = False
    reason: str = ""

    def tags(self) -> dict[str, str]:
        if self.kernels == COMPILED:
            return {"compiled_density": "cached" if self.cached else f"compiled in {self.compile_s:.1f} s"}
        return {"compiled_density": f"not compiled: {self.reason}"} if self.reason else {}


def compile_policy() -> str:
    policy = os.environ.get("BAYESX_COMPILE", "auto").strip().lower() or "auto"
    return {"1": "always", "true": "always", "0": "never", "false": "never"}.get(policy, policy)


def prepare(target, position: Tensor, transitions: int) -> Preparation:
    """Before a sampler runs ``transitions`` chain-transitions from ``position`` (chains, dim): compile the
    target's density for the native kernels where it has no hand-written form and the policy says so. A
    density that cannot be compiled runs on PyTorch, with the reason logged once."""
    if native_form(target, position) is not None:
        return Preparation(NATIVE)
    if target in _compiled:
        return Preparation(COMPILED, 0.0, True)
    reason = _why_not_compiled(target, position, transitions)
    if reason is None:
        try:
            density = compiler.compiled_density(target.autograd_log_prob(), target.dim, position.dtype)
        except compiler.NotCompiled as exc:
            reason = str(exc)
        else:
            _compiled[target] = density
            if not density.cached:
                _say(f"bayesx: compiled the density for the native kernels in {density.compile_s:.1f} s (cached: "
                     f"{density.library_path})")
            return Preparation(COMPILED, density.compile_s, density.cached)
    if reason and not reason.startswith("-"):
        _say(f"bayesx: the density runs on PyTorch, not compiled: {reason}")
    return Preparation(PYTORCH, reason=reason.lstrip("-") if reason else "")


def _say(line: str) -> None:
    """One line on stderr for the person running bayesx (the run's tags record the same)."""
    print(line, file=sys.stderr, flush=True)


def _why_not_compiled(target, position: Tensor, transitions: int) -> str | None:
    """None where the density is to be compiled, else why not (a leading '-': not worth a log line)."""
    policy = compile_policy()
    if policy not in POLICIES:
        return f"BAYESX_COMPILE={policy} is not one of {', '.join(POLICIES)}"
    if policy == "never":
        return "-compile=never"
    if position.device.type != "cpu" or position.dtype not in compiler.SUFFIX or position.dim() != 2:
        return "-compiled densities run on the CPU in float64 or float32"
    if target.autograd_log_prob() is None:
        return "-its log density is computed outside torch's graph"
    if policy == "auto" and transitions < COMPILE_FROM:
        return f"-a run of {transitions} chain-transitions does not repay a compile (auto compiles from {COMPILE_FROM})"
    return None


def compiled_for(target, position: Tensor):
    """The target's compiled density where one was prepared and runs for these chains, else None."""
    density = _compiled.get(target)
    if density is None or position.dim() != 2 or position.requires_grad or position.device.type != "cpu" \
            or position.dtype != density.dtype:
        return None
    return density


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
    if native_form(target, position) is not None:
        return NATIVE
    return COMPILED if compiled_for(target, position) is not None else PYTORCH


def log_prob_and_grad(form: LogisticForm | None, position: Tensor) -> tuple[Tensor, Tensor] | None:
    """log pi and grad log pi at each row of position in one native call, where the native kernels run for
    this form (a target's ``log_prob_and_grad`` tries this before its own PyTorch formula); else None."""
    return native.log_prob_and_grad(form, position) if runs_natively(form, position) else None


def density_and_grad(target, position: Tensor) -> tuple[Tensor, Tensor]:
    """log pi and its gradient at each row of position (chains, dim): the compiled density's where one was
    prepared for these chains (not under autograd), else the target's own ``log_prob_and_grad`` (which tries
    the hand-written native form itself). What optimisers and samplers call outside a trajectory."""
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
