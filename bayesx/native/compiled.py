"""Any PyTorch density as a native density: its gradient compiled ahead of time, driven from C.

The PyTorch NUTS tree returns to Python at every leaf and dispatches a dozen small tensor operations, about
300 us per gradient on a 26-parameter regression where NumPyro's compiled tree spends 7 us. This module
takes a target's ``log_prob`` (any torch code without data-dependent Python control flow) out of Python:

1. trace: eager autograd at one point (dim,), recorded operation by operation (bayesx.native.recorder; ``make_fx``
   of ``torch.func.grad_and_value(log_prob)`` where that fails, 10-20x slower) gives the forward and backward pass
   as one graph of ATen operations, the data as constants; Cholesky factorizations and triangular solves are
   traced unrolled (bayesx.native.unrolled_linalg), and operations on constants alone are evaluated once (folded);
   a Python loop's repeated block is written as one C loop (bayesx.native.loops);
2. compile: bayesx.native.codegen writes the graph as one plain C function (the system C compiler builds it
   in 0.1-1.4 s for the posteriordb suite); where it has no C for an operator, ``torch.export`` and
   AOTInductor (``torch._inductor.aoti_compile_and_package``) turn the graph into C++ and a shared library
   whose model container computes (log pi, grad) for one point (8-26 s);
3. cache: the library is stored under the digest of the graph's code, its constants' bytes, the dtype,
   torch's version and the CPU, so the same density (the same code and data, whatever the file's name)
   compiles once per machine (``bayesx.native.build.cache_dir()``'s sibling ``compiled/``); its size and sha256
   are written beside it (``.sha256``) and checked before it is loaded, so a damaged library is built again,
   never loaded; a cache that cannot be written (read-only, a full disk) is one line and the PyTorch path;
4. check: the compiled (log pi, grad) must equal autograd's, point by point, at scales 0.1 to 10 and where the
   chains start, else it is not used; where PyTorch raises at a point (an index past a table) the compiled code
   must fail there too: plain C checks every index computed from the parameters and reports the fault, which
   ends the run in one line as PyTorch's IndexError does (:meth:`CompiledDensity.raise_fault`). A graph whose
   shapes depend on the parameters' values (``nonzero``, a boolean mask) is not compiled at all;
5. run: the C kernels (nuts.h, leapfrog.h) call it through compiled_density.h without returning to Python
   (plain C: about 1 us per gradient on that regression, the chains split over threads; AOTInductor: 5.6 us,
   the chains on one thread).

:func:`compiled_density` returns the compiled density or None with the reason (a density that cannot be
traced, such as one that calls numpy or branches on values, or no C++ compiler; torch.distributions are traced with
their argument validation off, which branches on values); the caller logs the
reason once and runs the PyTorch path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from bayesx.errors import DensityError
from bayesx.native.build import (PLAIN_C_FLAGS, _compiler, _cpu_signature, build, cache_dir, enabled, load,
                                 simd_declarations, vector_math)
from bayesx.native.logistic import kernel_threads
from bayesx.native.calls import NUTSTransition, Trajectory, evaluate, leapfrog, ptr, transition
from bayesx.native import codegen, recorder, unrolled_linalg
from bayesx.native.entry_points import bind

SUFFIX = {torch.float64: "f64", torch.float32: "f32"}
CHECK_TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-3}
THREADS = 1
"""Threads a call splits its chains over, and models in the container: one. The compiled code links torch's own
OpenMP runtime, and its evaluations on the kernels' OpenMP threads (another runtime) were 20-300x slower per
gradient than on one thread (eight schools, 4 chains, 2 threads: 110 against 6 us per NUTS leaf, measured
2026-11-25), so the chains take turns on the calling thread."""

COMPILER_SETTINGS = {
    # serial kernels: an OpenMP region inside each evaluation (torch's own OpenMP runtime, not the kernels')
    # cost 300x per gradient on 2 threads
    "cpp.threads": 1,
    # trust the CPU flags for the vector ISA instead of test-compiling and loading one library per ISA in
    # subprocesses (seconds per process)
    "cpp.vec_isa_ok": True,
    # AOTInductor's own wrapper settings stay: an unoptimized wrapper (-O0) compiled 1 s faster of 7 but cost
    # 50% more per gradient (7.5 -> 11.3 us on a 26-parameter regression); without frame pointers and line
    # tables it compiled no faster (measured 2026-11-25)
}


class _Fault(ctypes.Structure):
    """compiled_fault of compiled_density.h: where an evaluation failed as PyTorch raises (code FAULT_INDEX: an index
    out of bounds, detail = the bounds check's number, the index, the size, the dimension; FAULT_RUN: AOTInductor's
    run returned an error), and the point (``position``: dim numbers of the density's dtype)."""

    _fields_ = [("code", ctypes.c_int64), ("detail", ctypes.c_int64 * 4), ("position", ctypes.c_void_p)]


FAULT_INDEX, FAULT_RUN = 1, 2


class _Model(ctypes.Structure):
    """compiled_model of compiled_density.h."""

    _fields_ = [("container", ctypes.c_void_p), ("run", ctypes.c_void_p), ("blob", ctypes.c_void_p),
                ("data", ctypes.c_void_p), ("free_tensor", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("device", ctypes.c_int32), ("fault", ctypes.POINTER(_Fault))]


class _GeneratedModel(ctypes.Structure):
    """generated_model of compiled_density.h: the plain C function, its workspace bytes, its fault and its data (the
    address of the run-time data blob, or NULL)."""

    _fields_ = [("function", ctypes.c_void_p), ("work", ctypes.c_size_t), ("fault", ctypes.POINTER(_Fault)),
                ("data", ctypes.c_void_p)]


AOTINDUCTOR, PLAIN_C = 0, 1
"""The kinds of compiled model (compiled_density.h's ``kind``): AOTInductor's container, or plain C
(bayesx.native.codegen)."""
COMPILERS = {AOTINDUCTOR: "AOTInductor", PLAIN_C: "plain C"}


@dataclass
class CompiledDensity:
    """A target's density and gradient as a compiled library, ready for the C kernels.

    ``model`` is what the C functions receive, ``kind`` which kind it is (AOTINDUCTOR: a container of THREADS
    models, so the chains take turns on one thread; PLAIN_C: reentrant, the chains split over torch's threads);
    ``compile_s`` is the time this process spent tracing and compiling (0 when the library came from the cache);
    ``cached`` says whether it did; ``plain_c_reason`` why an AOTInductor density is not plain C ('' for plain C);
    ``data`` the plain C density's run-time data (held here: the model holds only its address)."""

    dim: int
    dtype: torch.dtype
    library_path: Path
    compile_s: float
    cached: bool
    functions: dict = field(repr=False)
    _library: ctypes.CDLL = field(repr=False)
    _model: ctypes.Structure = field(repr=False)
    kind: int = AOTINDUCTOR
    plain_c_reason: str = ""
    data: object = field(default=None, repr=False)
    _fault: _Fault = field(default_factory=_Fault, repr=False)
    _fault_position: Tensor | None = field(default=None, repr=False)

    def __post_init__(self):
        self._fault_position = torch.full((self.dim,), float("nan"), dtype=self.dtype)
        self._fault.position = self._fault_position.data_ptr()
        self._model.fault = ctypes.pointer(self._fault)

    @property
    def model(self) -> int:
        return ctypes.addressof(self._model)

    @property
    def compiler(self) -> str:
        return COMPILERS[self.kind]

    def threads(self, chains: int) -> int:
        """Threads one call splits ``chains`` over: THREADS for AOTInductor, else as the logistic kernels."""
        return THREADS if self.kind == AOTINDUCTOR else kernel_threads(self.dtype, chains)

    @functools.cached_property
    def scratch(self) -> int:
        """Scratch numbers one evaluation needs (the C side's, asked once)."""
        return self.functions["compiled_scratch"](self.model, self.kind)

    def log_prob_and_grad(self, position: Tensor) -> tuple[Tensor, Tensor]:
        """log pi and its gradient at every row of position (chains, dim), in one native call; raises DensityError
        where the compiled code failed at a row as PyTorch would raise (:meth:`raise_fault`)."""
        lp, grad = self._evaluate(position)
        self.raise_fault()
        return lp, grad

    def _evaluate(self, position: Tensor) -> tuple[Tensor, Tensor]:
        chains = position.shape[0]
        return evaluate(lambda *tail: self.functions["compiled_density"](self.threads(chains), chains, self.dim,
                                                                         self.model, self.kind, *tail),
                        position.to(self.dtype))

    def fault(self) -> str | None:
        """Why the compiled code failed (one line, with the point) since the fault was last cleared, else None;
        clears it."""
        code = self._fault.code
        if code == 0:
            return None
        where = _point(self._fault_position)
        if code == FAULT_INDEX:
            check, index, size, dim = self._fault.detail
            try:
                operator = self._library.bayesx_density_check
                operator.restype = ctypes.c_char_p
                name = (operator(ctypes.c_int64(check)) or b"").decode()
            except AttributeError:
                name = ""
            reason = (f"index {index} is out of bounds for dimension {dim} with size {size} in the compiled density"
                      f"{f' ({name})' if name else ''} at theta={where}, where PyTorch raises IndexError")
        else:
            reason = (f"the compiled density ({self.compiler}) failed at theta={where} (its error is on the line above), "
                      f"where PyTorch raises")
        self._fault.code = 0
        self._fault_position.fill_(float("nan"))
        return reason

    def raise_fault(self) -> None:
        """Raise DensityError (the run ends FAILED with this line, as it does where the PyTorch density raises)
        where the compiled code failed since the last call."""
        reason = self.fault()
        if reason is not None:
            raise DensityError(f"{reason}; the run stopped with what it had")

    def trajectory(self, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
                   grad: Tensor | None = None, log_prob: Tensor | None = None) -> Trajectory:
        """``num_steps`` leapfrog steps of every chain in one native call (as bayesx.native.logistic.trajectory)."""
        chains, k = position.shape
        threads = self.threads(chains)
        work = torch.empty(threads * 2 * (k + self.scratch), dtype=self.dtype)  # held here: a pointer does not
        run = self.functions["compiled_leapfrog"]  # keep its tensor alive
        end = leapfrog(lambda steps, *tail: run(threads, chains, k, steps, self.model, self.kind, *tail, ptr(work)),
                       position, momentum, step_size, num_steps, inv_mass, grad, log_prob)
        self.raise_fault()
        return end

    def nuts(self, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
             inv_mass: Tensor, max_depth: int, seeds: Tensor) -> NUTSTransition:
        """One NUTS transition of every chain in one native call, each chain's tree on its own (nuts.h)."""
        chains, k = position.shape
        run = self.functions["compiled_nuts"]
        step = transition(lambda *tail: run(self.threads(chains), chains, k, self.model, self.kind, *tail), position,
                          momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)
        self.raise_fault()
        return step


class NotCompiled(Exception):
    """Why a density was not compiled (one line, for the run's log)."""


class CacheUnwritable(NotCompiled):
    """The compile cache cannot take a new library (a read-only folder, a full disk): the PyTorch path runs this
    time, nothing is remembered (no ``.failed`` mark), and the other compiler is not tried (it would meet the same
    folder)."""


UNWRITABLE = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST}
"""What an OSError from the cache's folder means when a library cannot be written there: the folder, not the
density (EEXIST, ENOTDIR: a file where the folder should be)."""
UNWRITABLE_MESSAGES = ("No space left on device", "Read-only file system", "Disk quota exceeded", "Permission denied")
"""The same, as a compiler's own error line says it (it writes the library, not Python)."""


def _unwritable(folder: Path, exc: BaseException) -> CacheUnwritable | None:
    """The CacheUnwritable an error while writing into ``folder`` amounts to, else None (the density's own)."""
    text = str(getattr(exc, "stderr", "") or "") + " " + str(exc)
    if isinstance(exc, OSError) and exc.errno in UNWRITABLE:
        why = exc.strerror or type(exc).__name__
    else:
        why = next((message for message in UNWRITABLE_MESSAGES if message in text), None)
        if why is None:
            return None
    return CacheUnwritable(f"the compile cache {folder} cannot be written ({why})")


@contextlib.contextmanager
def _writing(folder: Path):
    """Around a write into the cache: an error of the folder's (read-only, full) becomes CacheUnwritable."""
    try:
        yield
    except (OSError, subprocess.SubprocessError) as exc:
        unwritable = _unwritable(folder, exc)
        if unwritable is None:
            raise
        raise unwritable from None


def _seal(path: Path) -> None:
    """Write the library's size and sha256 beside it (``.sha256``, atomically), once it is whole: what
    :func:`_sealed` checks before a library is loaded."""
    _write_atomically(path.with_suffix(".sha256"), f"{path.stat().st_size} {_sha256(path)}\n")


def _sealed(path: Path) -> bool:
    """Whether the library at ``path`` is the one that was built: its size and sha256 equal its seal's. A truncated
    or overwritten library (a full disk, a copy cut short) loaded in-process crashes it (SIGBUS) or runs other code;
    one without a seal (built before seals, or its build cut short) is built again."""
    try:
        size, digest = path.with_suffix(".sha256").read_text().split()
        return path.stat().st_size == int(size) and _sha256(path) == digest
    except (OSError, ValueError):
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _discard(path: Path) -> None:
    """Remove a damaged library and what was said about it (its seal, its load mark), where the folder lets us."""
    for stale in (path, path.with_suffix(".sha256"), path.with_suffix(".loads")):
        with contextlib.suppress(OSError):
            stale.unlink()


NOT_CACHED = "-"  # no reason to tell: the caller asked for an AOTInductor library from the cache only


def compiled_density(log_prob, dim: int, dtype: torch.dtype, identity: str | None = None,
                     quick_only: bool = False, points: Tensor | None = None) -> CompiledDensity:
    """The compiled density and gradient of ``log_prob`` (q (..., dim) -> (...)) in ``dtype``; raises
    NotCompiled with the reason where it cannot be had. ``identity``: what defines the density where the caller knows it (the runner's posterior identity:
    model options, the digests of a user's files, the data's options): a library compiled for the same identity
    is found without tracing the density (about 1 s), then checked like any. ``quick_only``: compile now only as
    plain C (about a second); an AOTInductor library (8-26 s) only from the cache (NOT_CACHED otherwise).
    ``points`` (n, dim): where the caller will start (the chains' first points), checked too (:func:`_check`). A
    cache that cannot be written (read-only, full) raises CacheUnwritable; a damaged library in it is built
    again."""
    if dtype not in SUFFIX:
        raise NotCompiled(f"dtype {dtype} is not compiled (float64 or float32 only)")
    if not enabled():
        raise NotCompiled("native kernels are turned off (BAYESX_NATIVE=0)")
    library = load("kernels")
    if library is None:
        raise NotCompiled("the native kernels could not be built")
    functions = bind(library, SUFFIX[dtype], library._name)
    folder = cache_dir().parent / "compiled"
    index = folder / f"identity-{_identity_digest(identity, dtype)}.txt" if identity is not None else None
    if index is not None and index.exists():
        known = _known(folder, index, log_prob, dim, dtype, functions, points)
        if known is not None:
            return known
    started = time.perf_counter()
    graph = _trace(log_prob, dim, dtype)
    try:  # plain C first: compiled in about a second where AOTInductor takes 8-26 s
        if os.environ.get("BAYESX_PLAIN_C", "1") == "0":
            raise codegen.Unsupported("turned off (BAYESX_PLAIN_C=0)")
        path, cached, data = _write_plain_c(graph, dim, dtype, folder)
        density = _load(path, dim, dtype, 0.0 if cached else time.perf_counter() - started, cached, functions, data)
        _check(density, log_prob, dim, dtype, points)
        data_path = _store_data(folder, data) if index is not None and data is not None else None
    except CacheUnwritable:
        raise
    except (codegen.Unsupported, NotCompiled) as exc:
        plain_c_reason = str(exc)
    else:
        _remember(index, path, data_path)
        return density
    try:
        density = _aotinductor(log_prob, graph, dim, dtype, folder, quick_only, started, functions, points)
    except CacheUnwritable:
        raise
    except NotCompiled as exc:
        if str(exc) == NOT_CACHED:
            raise
        raise NotCompiled(f"{exc} (and as plain C: {plain_c_reason})") from None
    density.plain_c_reason = plain_c_reason
    _remember(index, density.library_path)
    return density


def _remember(index: Path | None, path: Path, data: Path | None = None) -> None:
    """Point the identity's index at the library and its data file (where the folder lets us: a read-only cache
    traces next time)."""
    if index is not None:
        with contextlib.suppress(OSError):
            _write_atomically(index, path.name + (f" {data.name}" if data is not None else ""))


def _store_data(folder: Path, data: Tensor) -> Path | None:
    """The plain C density's run-time data as a file in the cache, named by its digest and sealed like a library,
    so that a density found by its identity maps its data instead of tracing the density for it; None where the
    folder does not take it (the density is traced next time)."""
    raw = data.numpy()
    path = folder / f"data-{hashlib.sha256(raw.data).hexdigest()[:20]}.bin"
    if path.exists() and _sealed(path):
        return path
    try:
        with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as tmp:
            tmp.write(raw.data)
        os.replace(tmp.name, path)
        _seal(path)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp.name)
        return None
    return path


def _aotinductor(log_prob, graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, folder: Path,
                 cached_only: bool, started: float, functions: dict, points: Tensor | None = None) -> CompiledDensity:
    """The density compiled by AOTInductor (or found whole in the cache), checked against autograd. A density it
    cannot compile is remembered (a ``.failed`` mark with the reason); a cache it cannot write to is not."""
    path = folder / f"density-{_digest(graph, dtype)}.so"
    failed = path.with_suffix(".failed")  # a density AOTInductor could not compile is not tried again
    reason = _remembered(failed)
    if reason:
        raise NotCompiled(reason + f" (remembered: delete {failed} to try again)")
    cached = path.exists() and _sealed(path)
    if not cached and cached_only:
        raise NotCompiled(NOT_CACHED)
    if not cached:
        _discard(path)
        try:
            with _writing(folder):
                _compile(graph, dim, dtype, path)
                _seal(path)
        except CacheUnwritable:
            raise
        except NotCompiled as exc:
            with contextlib.suppress(OSError):
                _write_atomically(failed, str(exc) + "\n")
            raise
    compile_s = 0.0 if cached else time.perf_counter() - started
    density = _load(path, dim, dtype, compile_s, cached, functions)
    _check(density, log_prob, dim, dtype, points)
    return density


def _remembered(mark: Path) -> str:
    """The reason a ``.failed`` mark holds ('' where there is none, or it is empty: a mark cut short says
    nothing, and the density is tried again)."""
    try:
        return mark.read_text().strip()
    except OSError:
        return ""


GENERATED_FLAGS = PLAIN_C_FLAGS
"""Plain C densities (bayesx.native.build.PLAIN_C_FLAGS). -O2 compiled the largest suite density (hmm_example, 1,450
lines) in 1.4 s."""
OPTIMIZATION_LIMITS = ((4_000, "-O2"), (20_000, "-O1"))
"""The C compiler's time bounded: a generated source above 4,000 lines (what is left of a graph after its loops are
folded, bayesx.native.loops) is compiled at -O1, above 20,000 at -O0 (GCC's time grows faster than linearly with
a function's size at -O2: an unrolled 416-step HMM, 48,000 lines, did not finish in 120 s); the run's log says so."""
_log = logging.getLogger(__name__)


def _optimization(lines: int) -> str:
    """The optimization level for a generated source of ``lines`` lines (OPTIMIZATION_LIMITS)."""
    return next((level for limit, level in OPTIMIZATION_LIMITS if lines <= limit), "-O0")


def plain_c(graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype,
            compiler: str) -> tuple[codegen.Generated, tuple[str, ...]]:
    """The graph's plain C as this compiler builds it, and the libraries it links: the math functions vectorized
    through libmvec where this compiler and C library have it (bayesx.native.build.vector_math)."""
    vectorized = vector_math(compiler)
    generated = codegen.generate(graph, dim, dtype, simd_math=simd_declarations(vectorized))
    return generated, ("-lmvec",) if vectorized else ()


def _write_plain_c(graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype,
                   folder: Path) -> tuple[Path, bool, Tensor | None]:
    """The graph as plain C (bayesx.native.codegen) compiled to a library in the cache, named by the digest of
    its source and the compiler's settings, whether it was there already, and the data it reads at run time (the
    source holds only the data's shapes: the same library serves other data of the same shapes); raises
    codegen.Unsupported with the reason where it cannot be written or compiled."""
    compiler = _compiler()
    if compiler is None:
        raise codegen.Unsupported("no C compiler (install gcc or set CC)")
    generated, libraries = plain_c(graph, dim, dtype, compiler)
    lines = generated.source.count("\n")
    level = _optimization(lines)
    flags = tuple(level if flag == "-O2" else flag for flag in GENERATED_FLAGS)
    folded = generated.folded.describe() if generated.folded is not None else "not folded"
    say = _log.warning if level != "-O2" else _log.info
    say("bayesx: the density's plain C: %s; %d lines, compiled at %s%s", folded, lines, level,
        f" (above {OPTIMIZATION_LIMITS[0][0]:,} lines: the compiler's time bounded)" if level != "-O2" else "")
    digest = hashlib.sha256()
    for part in (generated.source, compiler, " ".join(flags), *_environment(dtype)):
        digest.update(part.encode())
    path = folder / f"generated-{digest.hexdigest()[:20]}.so"
    if path.exists() and _sealed(path):
        return path, True, generated.data
    _discard(path)
    with _writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            source = Path(tmp) / "density.c"
            source.write_text(generated.source)
            try:
                build(compiler, source, path, compile_flags=flags, libraries=libraries)
            except (OSError, subprocess.SubprocessError) as exc:
                unwritable = _unwritable(folder, exc)
                if unwritable is not None:
                    raise unwritable from None
                detail = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()
                raise codegen.Unsupported(f"the C compiler failed ({detail[-1] if detail else type(exc).__name__})") \
                    from None
        _seal(path)
    return path, False, generated.data


def _known(folder: Path, index: Path, log_prob, dim: int, dtype: torch.dtype, functions: dict,
           points: Tensor | None = None) -> CompiledDensity | None:
    """The library an identity points to (and its data file, mapped), where both are whole, load and still agree
    with autograd; else None (traced)."""
    try:
        names = index.read_text().split()
    except OSError:
        return None
    paths = [folder / name for name in names]
    if not 1 <= len(paths) <= 2 or not all(path.exists() and _sealed(path) for path in paths):
        return None
    try:
        data = _mapped(paths[1]) if len(paths) == 2 else None
        density = _load(paths[0], dim, dtype, 0.0, True, functions, data)
        _check(density, log_prob, dim, dtype, points)
    except Exception:  # noqa: BLE001 - stale, unloadable, or the density itself failed: trace it afresh
        return None
    return density


def _write_atomically(path: Path, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, renamed; removed where the write
    fails: a full disk leaves nothing behind)."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        try:
            tmp.write(text)
            tmp.flush()
        except BaseException:
            tmp.close()
            os.unlink(tmp.name)
            raise
    try:
        os.replace(tmp.name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name)
        raise


@functools.lru_cache(maxsize=1)
def _own_code_digest() -> str:
    """The digest of what else decides a library for an identity: bayesx's target code and vendored data
    (bayesx/targets, every file) and this tracer (bayesx/native's Python: folding, unrolling). A change to
    either invalidates every identity, so an index never hands back a library an older tracer made."""
    package = Path(__file__).resolve().parents[1]
    files = [*(package / "targets").rglob("*"), *(package / "native").glob("*.py")]
    digest = hashlib.sha256()
    for path in sorted(f for f in files if f.is_file() and "__pycache__" not in f.parts):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _environment(dtype: torch.dtype) -> tuple[str, ...]:
    """What besides the density decides a compiled library: the dtype, torch's version, the CPU and the
    compiler settings."""
    settings = repr(sorted(COMPILER_SETTINGS.items()))
    return str(dtype), torch.__version__, platform.machine(), _cpu_signature(), settings


def _identity_digest(identity: str, dtype: torch.dtype) -> str:
    digest = hashlib.sha256()
    for part in (identity, *_environment(dtype), _own_code_digest()):
        digest.update(part.encode())
    return digest.hexdigest()[:20]


def _grad_and_value(log_prob):
    def joint(q: Tensor) -> tuple[Tensor, Tensor]:
        grad, value = torch.func.grad_and_value(lambda x: log_prob(x).sum())(q)
        return value, grad
    return joint


@functools.lru_cache(maxsize=1)
def _decompositions() -> dict:
    """Core ATen (about 180 operators, what the plain C writer covers a part of) and the unrolled Cholesky
    factorizations and triangular solves."""
    from torch._decomp import core_aten_decompositions

    return {**core_aten_decompositions(), **recorder.QUICK_DECOMPOSITIONS, **unrolled_linalg.DECOMPOSITIONS}


def _trace(log_prob, dim: int, dtype: torch.dtype) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    point = torch.zeros(dim, dtype=dtype)
    graph = None
    if os.environ.get("BAYESX_RECORDER", "1") != "0":
        try:  # eager autograd recorded (bayesx.native.recorder): 10-20x faster than make_fx, constants folded
            with warnings.catch_warnings(), _distributions_unvalidated():
                warnings.simplefilter("ignore")
                graph = recorder.record(log_prob, dim, dtype, _decompositions())
        except Exception:  # noqa: BLE001 - make_fx traces it, or says why it cannot, in its own words
            graph = None
    if graph is None:
        try:
            with warnings.catch_warnings(), _distributions_unvalidated():
                warnings.simplefilter("ignore")
                graph = make_fx(_grad_and_value(log_prob), decomposition_table=_decompositions())(point)
        except Exception as exc:  # whatever the user's code raises under tracing: the reason is the message
            raise NotCompiled(f"its log density could not be traced ({type(exc).__name__}: "
                              f"{_first_line(exc)}); {_untraceable_because(exc)}") from None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != 1:
            raise NotCompiled("its log density has inputs besides the parameters")
        try:
            _fold_constants(graph)
        except Exception as exc:  # an operation on constants that fails when evaluated eagerly
            raise NotCompiled(f"its constants could not be folded ({type(exc).__name__}: {_first_line(exc)})") \
                from None
    shaped = _data_dependent_shape(graph)
    if shaped is not None:
        raise NotCompiled(f"it uses {shaped}, whose output shape depends on the parameters")
    return graph


@contextlib.contextmanager
def _distributions_unvalidated():
    """torch.distributions' argument validation off while tracing (``Distribution.set_default_validate_args``):
    it tests the values (``if not valid: raise``), which a trace cannot follow, so every density built from
    distributions would be refused. The compile check still evaluates the density as written, validation on: where
    validation raises at a point and the compiled code does not fail, the density is not compiled."""
    from torch.distributions import Distribution

    previous = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(previous)


def _untraceable_because(exc: BaseException) -> str:
    """Why a trace failed, from where: in torch.distributions, its argument validation (a distribution made with
    ``validate_args=True`` tests values); elsewhere, the user's code."""
    frames = traceback.extract_tb(exc.__traceback__)
    if any(f"torch{os.sep}distributions{os.sep}" in frame.filename for frame in frames):
        return ("torch.distributions' argument validation tests values, which cannot be traced: make the "
                "distributions with validate_args=False (or call "
                "torch.distributions.Distribution.set_default_validate_args(False))")
    return "it may call numpy or branch on values"


SHAPE_BY_INDEX = {torch.ops.aten.index.Tensor, torch.ops.aten._unsafe_index.Tensor, torch.ops.aten.index_put.default,
                  torch.ops.aten._unsafe_index_put.default, torch.ops.aten.index_put_.default}
"""Operators whose output shape depends on the values only where an index is a boolean mask."""


def _data_dependent_shape(graph: torch.fx.GraphModule) -> str | None:
    """The first operator whose output shape depends on the values of the parameters (``nonzero``,
    ``masked_select``, ``unique``, indexing by a boolean mask of them: operators tagged
    ``dynamic_output_shape``), else None. The trace records the shape it met at the traced point as a constant,
    so compiled code would compute with that shape everywhere (plain C) or fail its shape guard at every other
    point (AOTInductor: "Expected Eq(u0, 0)", returning garbage): such a density runs on PyTorch."""
    dynamic: set[torch.fx.Node] = set()
    for node in graph.graph.nodes:
        if node.op == "placeholder" or (node.op == "call_function" and any(n in dynamic for n in node.all_input_nodes)):
            dynamic.add(node)
        else:
            continue
        target = node.target
        if node.op != "call_function" or torch.Tag.dynamic_output_shape not in getattr(target, "tags", ()):
            continue
        if target in SHAPE_BY_INDEX:
            indices = node.args[1] if len(node.args) > 1 else ()
            masks = [i for i in indices if isinstance(i, torch.fx.Node)
                     and getattr(i.meta.get("val"), "dtype", None) in (torch.bool, torch.uint8)
                     and i in dynamic]
            if not masks:
                continue
            return "boolean-mask indexing"
        packet = getattr(target, "overloadpacket", None)
        return getattr(packet, "__name__", str(target))
    return None


def _fold_constants(graph: torch.fx.GraphModule) -> None:
    """Evaluate once, at trace time, every operation whose inputs are all constants (what a density computes
    from its data alone: sigma_1^2, X^T y, a log of a constant), in place: fewer kernels per gradient, and no
    arithmetic on 0-d constants, which this torch's AOTInductor fails to lower (garch11's sigma_1^2:
    ``aten.pow.Tensor_Scalar`` on a 0-d constant, a LoweringException). A result larger than its largest
    input (a broadcast) stays an operation; random and in-place operations stay too, and views (a transposed
    design matrix read in the gradient: folded, it doubled the memory a gradient reads, 241 against 130 us for
    a 550 x 500 logistic regression)."""
    values: dict[torch.fx.Node, object] = {}
    for index, node in enumerate(list(graph.graph.nodes)):
        if node.op == "get_attr":
            values[node] = getattr(graph, node.target)
            continue
        inputs = node.all_input_nodes
        if node.op != "call_function" or not inputs or any(n not in values for n in inputs) or _impure(node) \
                or node.target in codegen.VIEWS:  # a view of the data stays one: no second copy to read
            continue
        args = torch.fx.node.map_arg(node.args, values.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, values.__getitem__)
        value = node.target(*args, **kwargs)
        largest = max((values[n].numel() for n in inputs if isinstance(values[n], Tensor)), default=0)
        if not isinstance(value, Tensor) or value.numel() > max(largest, 1):
            continue
        value = value.clone()  # a view would alias the constant it was taken from
        name = f"_folded_constant_{index}"
        graph.register_buffer(name, value)
        with graph.graph.inserting_before(node):
            constant = graph.graph.get_attr(name)
        node.replace_all_uses_with(constant)
        graph.graph.erase_node(node)
        values[constant] = value
    graph.graph.eliminate_dead_code()
    graph.recompile()


def _impure(node: torch.fx.Node) -> bool:
    """Whether evaluating the node once at trace time would change what it computes: a random draw or an
    in-place update."""
    return recorder.impure(node.target)


def _first_line(exc: Exception) -> str:
    """The first sentence of an exception's message, at most 120 characters."""
    text = str(exc).strip().splitlines()
    first = text[0].split(". ")[0] if text else ""
    return first if len(first) <= 120 else first[:117] + "..."


def _constants(graph: torch.fx.GraphModule) -> list[Tensor]:
    return [getattr(graph, node.target) for node in graph.graph.nodes if node.op == "get_attr"]


def _digest(graph: torch.fx.GraphModule, dtype: torch.dtype) -> str:
    """What identifies the compiled library: the graph's code, its constants' values, the dtype, torch's
    version, the CPU and the compiler settings."""
    digest = hashlib.sha256()
    for part in (graph.code, *_environment(dtype)):
        digest.update(part.encode())
    for constant in _constants(graph):
        if isinstance(constant, Tensor):
            digest.update(str((constant.dtype, tuple(constant.shape))).encode())
            digest.update(constant.detach().cpu().contiguous().numpy().tobytes())
        else:
            digest.update(repr(constant).encode())
    return digest.hexdigest()[:20]


class _Graph(torch.nn.Module):
    def __init__(self, graph: torch.fx.GraphModule):
        super().__init__()
        self.graph_module = graph

    def forward(self, q: Tensor) -> tuple[Tensor, Tensor]:
        return self.graph_module(q)


def _compile(graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, path: Path) -> None:
    """AOTInductor: the graph to a shared library at ``path`` (written atomically: parallel runs may race)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    point = torch.zeros(dim, dtype=dtype)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exported = torch.export.export(_Graph(graph), (point,))
            with torch._inductor.config.patch(COMPILER_SETTINGS), _quiet("torch._inductor"):
                package = torch._inductor.aoti_compile_and_package(exported,
                                                                   package_path=str(Path(tmp) / "density.pt2"))
        except Exception as exc:  # a missing C++ compiler, an operator AOTInductor lacks
            raise NotCompiled(f"AOTInductor could not compile it ({type(exc).__name__}: {_first_line(exc)})") from None
        with zipfile.ZipFile(package) as archive:
            wrappers = [archive.read(n) for n in archive.namelist() if n.endswith("wrapper.cpp")]
            if any(b"proxy_executor_call_function" in text for text in wrappers):
                # operators without a C shim (an eigendecomposition, for one; Cholesky factorizations and
                # triangular solves are traced unrolled instead) are run by AOTInductor's proxy executor, which
                # only its C++ package loader provides; the C kernels pass none
                raise NotCompiled("it uses an operator AOTInductor runs through its proxy executor (an "
                                  "eigendecomposition, for one), which the native kernels cannot call")
            names = [n for n in archive.namelist() if n.endswith(".so")]
            if len(names) != 1:
                raise NotCompiled(f"the compiled package holds {len(names)} libraries, expected one")
            extracted = Path(archive.extract(names[0], tmp))
        os.replace(extracted, path)


@contextlib.contextmanager
def _quiet(logger: str):
    """Inductor's warnings (an operator without a C shim, ...) stay out of the user's terminal: what matters
    reaches the run as NotCompiled's one line."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _torch_shim() -> ctypes.CDLL:
    return ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))


PROBE_TIMEOUT_S = 120.0
CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGABRT}


def _probe(path: Path, dim: int, dtype: torch.dtype) -> None:
    """Load the library and evaluate it once in a child process before this process does: a library that
    crashes when loaded (seen under torch 2.11 on a GPU machine: a segmentation fault creating AOTInductor's
    model container, whose C interface this module calls directly and was written against torch 2.13) then
    stops only the child. A library that passed leaves a ``.loads`` mark beside it and is not probed again;
    one whose child crashed (SIGSEGV, SIGBUS, SIGILL, SIGABRT) or exited with an error leaves the ``.failed``
    mark that compiled_density reads, so the density runs on PyTorch from then on. A child that was killed
    otherwise or did not answer (a loaded machine, memory) says so for this run only."""
    mark = path.with_suffix(".loads")
    if mark.exists():
        return
    code = "import sys; from bayesx.native.compiled import _probe_child; _probe_child(sys.argv[1:])"
    argv = [sys.executable, "-c", code, str(path), str(dim), SUFFIX[dtype]]
    try:
        child = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        status = child.returncode
        why = (child.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        status, why = None, f"no answer in {PROBE_TIMEOUT_S:.0f} s"
    if status == 0:
        with contextlib.suppress(OSError):  # a read-only cache probes again next time
            _write_atomically(mark, f"torch {torch.__version__}\n")
        return
    crashed = status is not None and -status in CRASH_SIGNALS
    if status is not None and status < 0:
        why = f"killed by {signal.Signals(-status).name if -status in signal.valid_signals() else -status}"
    reason = f"the compiled library {path.name} failed when loaded under torch {torch.__version__} ({why})"
    if crashed or (status is not None and status > 0):
        with contextlib.suppress(OSError):
            _write_atomically(path.with_suffix(".failed"), reason + "\n")
    raise NotCompiled(reason)


def _probe_child(argv: list[str]) -> None:
    """The child of :func:`_probe`: load the library and evaluate log pi and its gradient at two points."""
    path, dim, dtype = Path(argv[0]), int(argv[1]), {v: k for k, v in SUFFIX.items()}[argv[2]]
    library = load("kernels")
    density = _load_in_process(path, dim, dtype, 0.0, True, bind(library, argv[2], library._name))
    density.log_prob_and_grad(torch.stack([torch.zeros(dim, dtype=dtype), torch.full((dim,), 0.1, dtype=dtype)]))


def _mapped(path: Path) -> Tensor:
    """A data file of the cache as a read-only byte tensor over its pages (memory-mapped, not read)."""
    import numpy as np

    with warnings.catch_warnings():  # read-only memory: nothing here writes to it
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.memmap(path, dtype=np.uint8, mode="r"))


def _load(path: Path, dim: int, dtype: torch.dtype, compile_s: float, cached: bool,
          functions: dict, data: Tensor | None = None) -> CompiledDensity:
    """The library as a CompiledDensity: plain C directly (bayesx's own code, linking nothing but libm; ``data``
    the run-time data its source reads), an AOTInductor library once a child process has loaded it without harm
    (:func:`_probe`)."""
    if not _sealed(path):
        _discard(path)
        raise NotCompiled(f"the compiled library {path.name} is not the one that was built (its size or sha256 "
                          f"differs); it is built again next time")
    if path.name.startswith("generated-"):
        return _load_plain_c(path, dim, dtype, compile_s, cached, functions, data)
    _probe(path, dim, dtype)
    return _load_in_process(path, dim, dtype, compile_s, cached, functions)


def _load_plain_c(path: Path, dim: int, dtype: torch.dtype, compile_s: float, cached: bool,
                  functions: dict, data: Tensor | None = None) -> CompiledDensity:
    try:
        library = ctypes.CDLL(str(path))
        function = ctypes.cast(library.bayesx_density, ctypes.c_void_p).value
        work = ctypes.c_size_t.in_dll(library, "bayesx_density_work").value
        data_bytes = ctypes.c_size_t.in_dll(library, "bayesx_density_data_bytes").value
    except (OSError, AttributeError, ValueError) as exc:
        raise NotCompiled(f"the compiled library {path} could not be loaded ({exc}); delete it to recompile") \
            from None
    given = 0 if data is None else data.numel() * data.element_size()
    if given != data_bytes:
        raise NotCompiled(f"the compiled library {path.name} reads {data_bytes:,} bytes of data, given {given:,}")
    model = _GeneratedModel(function, work, None, data.data_ptr() if data is not None else None)
    return CompiledDensity(dim, dtype, path, compile_s, cached, functions, library, model, PLAIN_C, data=data)


def _point(values: Tensor) -> str:
    """A point, short enough for one line."""
    shown = [f"{v:.3g}" for v in values.tolist()[:6]]
    return "[" + ", ".join(shown) + (", ...]" if values.numel() > 6 else "]")


def _load_in_process(path: Path, dim: int, dtype: torch.dtype, compile_s: float, cached: bool,
                     functions: dict) -> CompiledDensity:
    try:
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NotCompiled(f"the compiled library {path} could not be loaded ({exc}); delete it to recompile") from None
    shim = _torch_shim()
    container = ctypes.c_void_p()
    create = library.AOTInductorModelContainerCreateWithDevice
    create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p]
    if create(ctypes.byref(container), THREADS, b"cpu", None) != 0:
        raise NotCompiled(f"the compiled library {path} could not create its model; delete it to recompile")
    dtype_code = {torch.float64: shim.aoti_torch_dtype_float64, torch.float32: shim.aoti_torch_dtype_float32}[dtype]()
    address = lambda function: ctypes.cast(function, ctypes.c_void_p).value  # noqa: E731
    model = _Model(container.value, address(library.AOTInductorModelContainerRun),
                   address(shim.aoti_torch_create_tensor_from_blob), address(shim.aoti_torch_get_data_ptr),
                   address(shim.aoti_torch_delete_tensor_object), dtype_code, shim.aoti_torch_device_type_cpu())
    return CompiledDensity(dim, dtype, path, compile_s, cached, functions, library, model)


CHECK_SCALES = (0.1, 0.5, 1.0, 5.0, 10.0)
"""The check's points: one random direction per scale. The far ones (5, 10) reach where a density meets its
edges (an index past a table, a bound), where the compiled code must fail as PyTorch does."""
FAR_SCALE = 5.0
FAR_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-2}
"""At the far points values are large and computed with cancellation (a log of a sum of exponentials of 10s), so
they are compared at this relative tolerance: a wrong result (a number read past a table) is off by far more."""
EXTRA_POINTS = 8  # of the caller's points, at most


def _check(density: CompiledDensity, log_prob, dim: int, dtype: torch.dtype, points: Tensor | None = None) -> None:
    """The compiled (log pi, grad) against autograd's, point by point, at CHECK_SCALES and at up to EXTRA_POINTS of
    the caller's ``points``; raises NotCompiled where they disagree. Where PyTorch raises at a point (an index out
    of bounds) the compiled code must fail there too (a fault, or a NaN log density, which the kernels reject);
    where it does not, the compiled code must not fail, and both must be finite at the same points and equal
    there."""
    gen = torch.Generator().manual_seed(20261125)
    scales = torch.tensor(CHECK_SCALES, dtype=torch.float64)
    checked = torch.randn(len(CHECK_SCALES), dim, generator=gen, dtype=torch.float64) * scales[:, None]
    tolerances = [FAR_TOLERANCE[dtype] if scale >= FAR_SCALE else CHECK_TOLERANCE[dtype] for scale in CHECK_SCALES]
    if points is not None and points.dim() == 2 and points.shape[-1] == dim:
        extra = points.detach().to("cpu", torch.float64)[:EXTRA_POINTS]
        checked = torch.cat([checked, extra])
        tolerances += [CHECK_TOLERANCE[dtype]] * extra.shape[0]
    if _agrees_at_once(density, log_prob, checked.to(dtype), tolerances):
        return
    tolerances = _widened(log_prob, checked.to(dtype), tolerances, dtype)  # only where the fixed ones refuse: two
    # more eager passes (0.1-0.2 s each for a 400-step loop), and a tolerance only ever widens
    if _agrees_at_once(density, log_prob, checked.to(dtype), tolerances):
        return
    raised = []
    for point, tol in zip(checked.to(dtype), tolerances):
        q = point[None]
        lp, grad = density._evaluate(q)
        fault = density.fault()
        try:
            with torch.enable_grad():
                x = q.clone().requires_grad_(True)
                expected = log_prob(x)
                (expected_grad,) = torch.autograd.grad(expected.sum(), x)
        except Exception as exc:  # noqa: BLE001 - PyTorch fails here: so must the compiled code
            raised.append(exc)
            if fault is None and not bool(torch.isnan(lp).all()):
                raise NotCompiled(f"its log density raises {type(exc).__name__} ({_first_line(exc)}) at "
                                  f"theta={_point(point)} where the compiled one returns {float(lp[0]):.6g}; the PyTorch "
                                  f"path runs") from None
            continue
        if fault is not None:
            raise NotCompiled(f"the compiled log density fails where PyTorch's does not ({fault}); the PyTorch path "
                              f"runs")
        _compare(lp, grad, expected.detach().reshape(lp.shape), expected_grad, tol)
    if len(raised) == checked.shape[0]:  # nothing to compare
        exc = raised[0]
        raise NotCompiled(f"its log density failed at the compile check's points ({type(exc).__name__}: "
                          f"{_first_line(exc)})")


NOISE_STEP = {torch.float64: 1e-15, torch.float32: 1e-6}  # a relative move of a point by a few ulps
NOISE_FACTOR = 10.0  # the check's tolerance at a point is at least this many times autograd's own noise there
TOLERANCE_CAP = {torch.float64: 1e-5, torch.float32: 1e-2}  # and never wider than this


def _widened(log_prob, points: Tensor, tolerances: list[float], dtype: torch.dtype) -> list[float]:
    """Each point's tolerance, widened where autograd's own (log pi, grad) is noisy there: NOISE_FACTOR times the
    largest relative change of either when the point moves by NOISE_STEP (a few ulps), capped at TOLERANCE_CAP.
    Two correct evaluations that order the same operations differently differ by the rounding error the
    computation amplifies, and moving the input by an ulp shows that amplification: at one of gp_pois_regr's
    starting points (an ill-conditioned 11x11 Cholesky) autograd's gradient moves by 1.4e-8 relative, and the plain
    C gradient was 1.1e-8 off it, over the fixed 1e-8, so the density fell back to AOTInductor (35 s to compile,
    20x slower a gradient). At a well-conditioned point the move is ~1e-15 and the tolerance stays as it was."""
    try:
        with torch.enable_grad():
            found = []
            for q in (points, points * (1.0 + NOISE_STEP[dtype])):
                x = q.clone().requires_grad_(True)
                value = log_prob(x)
                (grad,) = torch.autograd.grad(value.sum(), x)
                found.append((value.detach().reshape(-1), grad.reshape(points.shape)))
    except Exception:  # noqa: BLE001 - the check itself says where PyTorch fails
        return tolerances
    (v0, g0), (v1, g1) = found
    if v0.shape[0] != points.shape[0]:
        return tolerances
    moved = torch.maximum((v1 - v0).abs() / (1.0 + v0.abs()), ((g1 - g0).abs() / (1.0 + g0.abs())).amax(dim=1))
    widened = []
    for tol, noise in zip(tolerances, moved.tolist()):
        if noise == noise and noise != float("inf"):  # finite: NaN or inf points keep theirs
            tol = max(tol, min(NOISE_FACTOR * noise, TOLERANCE_CAP[dtype]))
        widened.append(tol)
    return widened


def _agrees_at_once(density: CompiledDensity, log_prob, points: Tensor, tolerances: list[float]) -> bool:
    """Whether the compiled (log pi, grad) agree with autograd's at all ``points`` (n, dim) evaluated as one batch:
    one eager pass instead of one a point (a 400-step loop's eager gradient costs 0.1-0.2 s a pass). False where
    the batch does not settle it (PyTorch raises, the compiled code faults, a shape or a number differs): the
    caller then checks point by point, which says where and why."""
    lp, grad = density._evaluate(points)
    if density.fault() is not None:
        return False
    try:
        with torch.enable_grad():
            x = points.clone().requires_grad_(True)
            expected = log_prob(x)
            (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    except Exception:  # noqa: BLE001 - the point-by-point check finds where, and whether the compiled code fails too
        return False
    if expected.shape != lp.shape or expected_grad.shape != grad.shape:
        return False
    try:
        _compare(lp, grad, expected.detach(), expected_grad, torch.tensor(tolerances, dtype=lp.dtype))
    except NotCompiled:
        return False
    return True


def _compare(lp: Tensor, grad: Tensor, expected: Tensor, expected_grad: Tensor, tol: float | Tensor) -> None:
    """Raise NotCompiled where the compiled (log pi, grad) at a point differs from autograd's: finite at other
    points, or beyond ``tol`` relative to 1 + |value| where finite."""
    finite = torch.isfinite(expected)
    scale = 1.0 + expected.abs()
    value_off = ((lp - expected).abs() > tol * scale)[finite]
    if not torch.equal(torch.isfinite(lp), finite) or bool(value_off.any()):
        raise NotCompiled("the compiled log density differs from PyTorch's; the PyTorch path runs")
    grad_scale = 1.0 + expected_grad.abs()
    grad_tol = tol[:, None] if isinstance(tol, Tensor) else tol  # a tolerance per point (row)
    if bool(((grad - expected_grad).abs() > grad_tol * grad_scale)[finite].any()):
        raise NotCompiled("the compiled gradient differs from autograd's; the PyTorch path runs")
