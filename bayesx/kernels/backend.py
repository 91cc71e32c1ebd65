"""Which backend evaluates a target's density: decided once per run, by :func:`prepare`, into a Density value.

    prepare(target, workload, policy, identity=None) -> Density

is called once by each method family (the MCMC driver, the approximations' ``infer``, the trainers' ``infer``)
and the Density is passed on to every kernel and fit (bayesx.kernels.density); nothing else chooses a backend.
The choice, in order:

1. a density with a form the native code evaluates by hand (``target.density_form()``, a
   bayesx.targets.forms.LogisticForm) runs on the hand-written C kernels (bayesx.native.logistic) where they
   support the workload's points (CPU tensors of float64/32, the library built, not many chains on a large design);
2. any other density whose log_prob autograd differentiates (``target.autograd_log_prob()``) is compiled ahead of
   time (bayesx.native.compiled: traced, written as plain C or compiled by AOTInductor, cached on disk by content,
   found there by ``identity``, the runner's posterior identity) where the ``policy`` says so and the workload
   repays it (see :class:`Workload`);
3. else the target's own PyTorch code.

``policy`` is the run's ``device.compile`` setting, passed as an argument: ``auto`` (the default), ``always`` or
``never``. ``BAYESX_NATIVE=0`` turns the native library off (bayesx.native.build); without a C compiler it is off
with one warning. Whatever is chosen, a Density falls back to PyTorch for points its fast path does not take (one
point (dim,), points under autograd, another device or dtype, more chains than the native form runs).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.kernels.density import PYTORCH, Density
from bayesx.native import compiled as compiler
from bayesx.native import logistic as native
from bayesx.native.calls import NUTSTransition, Trajectory

if TYPE_CHECKING:
    from bayesx.targets.forms import LogisticForm

NATIVE, COMPILED = "native", "compiled"
POLICIES = ("auto", "always", "never")
COMPILE_FROM = 5000
"""PyTorch calls of the density from which ``compile=auto`` compiles a density for a sampler: a cold compile
costs 0.1-1.4 s as plain C and 8-26 s by AOTInductor on this project's 2 cores (measured 2026-11-26), a PyTorch
call about 300 us more than the compiled path's, so 5,000 calls (a default NUTS run of 750 transitions with trees
of 8 leaves, its shallowest usual depth) lose at most a few seconds once per density and machine, and a hard
posterior (trees of 256 leaves) saves minutes."""
TIMING_REPEATS = 5


@dataclass(frozen=True)
class Workload:
    """What a method will ask of the density, for the choice of backend.

    points      (n, dim) like the points it evaluates: a sampler's chains, or one batch of a fit
    calls       PyTorch calls of the density's gradient a sampler's run would make (transitions x gradients per
                transition): ``compile=auto`` compiles from COMPILE_FROM; the choice depends on counts, never on
                timing, so a seed gives the same draws on every run. None: a fit at batches like ``points``,
                whose compiled density (plain C compiled now, AOTInductor's only from the cache, or
                ``compile=always``) is used where it is measured faster than PyTorch at that batch
    gradients   whether the method evaluates gradients at all (False: log pi alone, which PyTorch serves)
    """

    points: Tensor
    calls: int | None = None
    gradients: bool = True


@dataclass(frozen=True)
class Preparation:
    """What :func:`prepare` did: ``kernels`` (the Density's name), the compile's seconds in this process (0: it
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
        if self.kernels == COMPILED:  # the reason, where there is one: why the compiler is not plain C
            how += f"; not plain C: {self.reason}" if self.reason else ""
            return {"compiled_density": how, **({"density_compiler": self.compiler} if self.compiler else {})}
        if self.cached or self.compile_s:  # compiled, and PyTorch measured faster
            return {"compiled_density": f"{how}, not used: {self.reason}"}
        return {"compiled_density": f"not compiled: {self.reason}"} if self.reason else {}


class NativeForm:
    """The hand-written C kernels on a density in logistic form (bayesx.native.logistic)."""

    name = NATIVE

    def __init__(self, form: LogisticForm):
        self.form = form

    def runs(self, position: Tensor) -> bool:
        return native.supports(self.form, position)

    def logp_and_grad(self, position: Tensor) -> tuple[Tensor, Tensor]:
        return native.log_prob_and_grad(self.form, position)

    def trajectory(self, position, momentum, step_size, num_steps, inv_mass, grad, log_prob) -> Trajectory:
        return native.trajectory(self.form, position, momentum, step_size, num_steps, inv_mass, grad, log_prob)

    def nuts(self, position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds) -> NUTSTransition:
        return native.nuts(self.form, position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)


class Compiled:
    """A compiled density (bayesx.native.compiled.CompiledDensity) on the CPU in its dtype, for batches of at most
    ``batch_limit`` points (None: any; a fit's density is timed at one batch size only)."""

    name = COMPILED

    def __init__(self, density: compiler.CompiledDensity, batch_limit: int | None = None):
        self.density, self.batch_limit = density, batch_limit

    def runs(self, position: Tensor) -> bool:
        return position.device.type == "cpu" and position.dtype == self.density.dtype \
            and (self.batch_limit is None or position.shape[0] <= self.batch_limit)

    def logp_and_grad(self, position: Tensor) -> tuple[Tensor, Tensor]:
        return self.density.log_prob_and_grad(position)

    def trajectory(self, position, momentum, step_size, num_steps, inv_mass, grad, log_prob) -> Trajectory:
        return self.density.trajectory(position, momentum, step_size, num_steps, inv_mass, grad, log_prob)

    def nuts(self, position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds) -> NUTSTransition:
        return self.density.nuts(position, momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)


def on_pytorch(target) -> Density:
    """The target's density on its own PyTorch code, nothing prepared (tests, and densities made inside a method
    that are cheap beside the method's own work)."""
    return Density(target.log_prob, target.log_prob_and_grad, target.dim, target.dtype, target.device)


def prepare(target, workload: Workload, policy: str = "auto", identity: str | None = None) -> Density:
    """The target's density as a value on the backend chosen for ``workload`` under ``policy`` (see the module
    docstring); its ``tags()`` and ``timings()`` say what was done, for the run's record. ``identity``: what
    defines the target's density (the runner's posterior identity), so its compiled library is found in the disk
    cache without tracing the density again."""
    start = time.perf_counter()
    if policy not in POLICIES:
        raise BayesxError(f"compile policy '{policy}' (device.compile or $BAYESX_COMPILE) is not one of "
                          f"{', '.join(POLICIES)}; use one of them")
    fast, record = _choose(target, workload, policy, identity)
    record = replace(record, seconds=time.perf_counter() - start)
    return Density(target.log_prob, target.log_prob_and_grad, target.dim, target.dtype, target.device, fast, record)


def _choose(target, workload: Workload, policy: str, identity: str | None):
    """(the fast path or None, the Preparation) for this workload: the chain of the module docstring."""
    points = workload.points
    form = target.density_form()
    if form is not None and points.dim() == 2 and native.supports(form, points):
        return NativeForm(form), Preparation(NATIVE)
    if not workload.gradients:
        return None, Preparation(PYTORCH)
    sampler = workload.calls is not None
    reason = _why_not_compiled(target, points, policy)
    if reason is None and sampler and policy == "auto" and workload.calls < COMPILE_FROM:
        reason = (f"-a run of about {workload.calls} density calls does not repay a compile (auto compiles from "
                  f"{COMPILE_FROM})")
    if reason is not None:
        return None, _not_compiled(reason)
    quick_only = not sampler and policy == "auto"
    try:
        density = compiler.compiled_density(target.autograd_log_prob(), target.dim, points.dtype, identity=identity,
                                            quick_only=quick_only, points=points)  # checked where the chains start
    except compiler.NotCompiled as exc:
        return None, _not_compiled(str(exc))
    not_plain_c = f" because plain C could not: {density.plain_c_reason}" if density.plain_c_reason else ""
    if not density.cached:
        _say(f"bayesx: compiled the density for the native kernels ({density.compiler}{not_plain_c}) in "
             f"{density.compile_s:.1f} s (cached: {density.library_path})")
    elif not_plain_c:
        _say(f"bayesx: the density runs compiled by {density.compiler}{not_plain_c}")
    prepared = Preparation(COMPILED, density.compile_s, density.cached, density.plain_c_reason,
                           compiler=density.compiler)
    if sampler or policy != "auto":
        return Compiled(density), prepared
    compiled_s = _best_time(density.log_prob_and_grad, points)
    pytorch_s = _best_time(target.log_prob_and_grad, points)
    if compiled_s >= pytorch_s:
        return None, Preparation(PYTORCH, density.compile_s, density.cached,
                                 f"PyTorch is faster at {points.shape[0]} points per call ({pytorch_s * 1e6:.0f} "
                                 f"against {compiled_s * 1e6:.0f} us)")
    return Compiled(density, batch_limit=points.shape[0]), prepared


def _not_compiled(reason: str) -> Preparation:
    """The PyTorch Preparation with why not; a reason worth telling the user (no leading '-') is said on stderr."""
    if not reason.startswith("-"):
        _say(f"bayesx: the density runs on PyTorch, not compiled: {reason}")
    return Preparation(PYTORCH, reason=reason.lstrip("-"))


def _why_not_compiled(target, points: Tensor, policy: str) -> str | None:
    """None where the density may be compiled, else why not (a leading '-': not worth a log line)."""
    if policy == "never":
        return "-compile=never"
    if points.device.type != "cpu" or points.dtype not in compiler.SUFFIX or points.dim() != 2:
        return "-compiled densities run on the CPU in float64 or float32"
    if target.autograd_log_prob() is None:
        return "-its log density is computed outside torch's graph"
    return None


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


def native_available(dtype: torch.dtype = torch.float64) -> bool:
    """Whether the native backend is on and built for this dtype on this machine (for any form)."""
    return native.available(dtype)
