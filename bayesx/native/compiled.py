"""Any PyTorch density as a native density: its gradient compiled ahead of time, driven from C.

The PyTorch NUTS tree returns to Python at every leaf and dispatches a dozen small tensor operations, about
300 us per gradient on a 26-parameter regression where NumPyro's compiled tree spends 7 us. This module
takes a target's ``log_prob`` (any torch code without data-dependent Python control flow) out of Python:

1. trace: ``make_fx`` of ``torch.func.grad_and_value(log_prob)`` at one point (dim,) records the forward
   and backward pass as one graph of ATen operations, the data as constants; Cholesky factorizations and
   triangular solves are traced unrolled (bayesx.native.unrolled_linalg), and operations on constants alone
   are evaluated once (folded);
2. compile: bayesx.native.codegen writes the graph as one plain C function (the system C compiler builds it
   in 0.1-1.4 s for the posteriordb suite); where it has no C for an operator, ``torch.export`` and
   AOTInductor (``torch._inductor.aoti_compile_and_package``) turn the graph into C++ and a shared library
   whose model container computes (log pi, grad) for one point (8-26 s);
3. cache: the library is stored under the digest of the graph's code, its constants' bytes, the dtype,
   torch's version and the CPU, so the same density (the same code and data, whatever the file's name)
   compiles once per machine (``bayesx.native.build.cache_dir()``'s sibling ``compiled/``);
4. check: the compiled (log pi, grad) must equal autograd's at three points, else it is not used;
5. run: the C kernels (nuts.h, leapfrog.h) call it through compiled_density.h without returning to Python
   (plain C: about 1 us per gradient on that regression, the chains split over threads; AOTInductor: 5.6 us,
   the chains on one thread).

:func:`compiled_density` returns the compiled density or None with the reason (a density that cannot be
traced, such as one that calls numpy or branches on values, or no C++ compiler); the caller logs the
reason once and runs the PyTorch path.
"""

from __future__ import annotations

import contextlib
import ctypes
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
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from bayesx.native.build import _compiler, _cpu_signature, build, cache_dir, enabled, load
from bayesx.native.logistic import kernel_threads
from bayesx.native.calls import NUTSTransition, Trajectory, leapfrog, ptr, transition
from bayesx.native import codegen, unrolled_linalg
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


class _Model(ctypes.Structure):
    """compiled_model of compiled_density.h."""

    _fields_ = [("container", ctypes.c_void_p), ("run", ctypes.c_void_p), ("blob", ctypes.c_void_p),
                ("data", ctypes.c_void_p), ("free_tensor", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("device", ctypes.c_int32)]


class _GeneratedModel(ctypes.Structure):
    """generated_model of compiled_density.h: the plain C function and its workspace bytes."""

    _fields_ = [("function", ctypes.c_void_p), ("work", ctypes.c_size_t)]


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
    ``cached`` says whether it did."""

    dim: int
    dtype: torch.dtype
    library_path: Path
    compile_s: float
    cached: bool
    functions: dict = field(repr=False)
    _library: ctypes.CDLL = field(repr=False)
    _model: ctypes.Structure = field(repr=False)
    kind: int = AOTINDUCTOR

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
        """log pi and its gradient at every row of position (chains, dim), in one native call."""
        u = position.detach().to(self.dtype).contiguous()
        grad = torch.empty_like(u)
        lp = torch.empty(u.shape[0], dtype=self.dtype)
        self.functions["compiled_density"](self.threads(u.shape[0]), u.shape[0], self.dim, self.model, self.kind,
                                           u.data_ptr(), grad.data_ptr(), lp.data_ptr())
        return lp, grad

    def trajectory(self, position: Tensor, momentum: Tensor, step_size, num_steps: int, inv_mass: Tensor,
                   grad: Tensor | None = None, log_prob: Tensor | None = None) -> Trajectory:
        """``num_steps`` leapfrog steps of every chain in one native call (as bayesx.native.logistic.trajectory)."""
        chains, k = position.shape
        threads = self.threads(chains)
        work = torch.empty(threads * 2 * (k + self.scratch), dtype=self.dtype)  # held here: a pointer does not
        run = self.functions["compiled_leapfrog"]  # keep its tensor alive
        return leapfrog(lambda steps, *tail: run(threads, chains, k, steps, self.model, self.kind, *tail, ptr(work)),
                        position, momentum, step_size, num_steps, inv_mass, grad, log_prob)

    def nuts(self, position: Tensor, momentum: Tensor, log_prob: Tensor, grad: Tensor, step_size: float,
             inv_mass: Tensor, max_depth: int, seeds: Tensor) -> NUTSTransition:
        """One NUTS transition of every chain in one native call, each chain's tree on its own (nuts.h)."""
        chains, k = position.shape
        run = self.functions["compiled_nuts"]
        return transition(lambda *tail: run(self.threads(chains), chains, k, self.model, self.kind, *tail), position,
                          momentum, log_prob, grad, step_size, inv_mass, max_depth, seeds)


class NotCompiled(Exception):
    """Why a density was not compiled (one line, for the run's log)."""


NOT_CACHED = "-"  # no reason to tell: the caller asked for an AOTInductor library from the cache only


def compiled_density(log_prob, dim: int, dtype: torch.dtype, identity: str | None = None,
                     quick_only: bool = False) -> CompiledDensity:
    """The compiled density and gradient of ``log_prob`` (q (..., dim) -> (...)) in ``dtype``; raises
    NotCompiled with the reason where it cannot be had. ``identity``: what defines the density where the caller knows it (the runner's posterior identity:
    model options, the digests of a user's files, the data's options): a library compiled for the same identity
    is found without tracing the density (about 1 s), then checked like any. ``quick_only``: compile now only as
    plain C (about a second); an AOTInductor library (8-26 s) only from the cache (NOT_CACHED otherwise)."""
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
        known = _known(folder / index.read_text().strip(), log_prob, dim, dtype, functions)
        if known is not None:
            return known
    started = time.perf_counter()
    graph = _trace(log_prob, dim, dtype)
    try:  # plain C first: compiled in about a second where AOTInductor takes 8-26 s
        if os.environ.get("BAYESX_PLAIN_C", "1") == "0":
            raise codegen.Unsupported("turned off (BAYESX_PLAIN_C=0)")
        path, cached = _write_plain_c(graph, dim, dtype, folder)
        density = _load(path, dim, dtype, 0.0 if cached else time.perf_counter() - started, cached, functions)
        _check(density, log_prob, dim, dtype)
    except (codegen.Unsupported, NotCompiled) as exc:
        plain_c_reason = str(exc)
    else:
        if index is not None:
            _write_atomically(index, path.name)
        return density
    try:
        density = _aotinductor(log_prob, graph, dim, dtype, folder, quick_only, started, functions)
    except NotCompiled as exc:
        if str(exc) == NOT_CACHED:
            raise
        raise NotCompiled(f"{exc} (and as plain C: {plain_c_reason})") from None
    if index is not None:
        _write_atomically(index, density.library_path.name)
    return density


def _aotinductor(log_prob, graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, folder: Path,
                 cached_only: bool, started: float, functions: dict) -> CompiledDensity:
    """The density compiled by AOTInductor (or found in the cache), checked against autograd."""
    path = folder / f"density-{_digest(graph, dtype)}.so"
    failed = path.with_suffix(".failed")  # a density AOTInductor could not compile is not tried again
    if failed.exists():
        raise NotCompiled(failed.read_text().strip() + f" (remembered: delete {failed} to try again)")
    cached = path.exists()
    if not cached and cached_only:
        raise NotCompiled(NOT_CACHED)
    if not cached:
        try:
            _compile(graph, dim, dtype, path)
        except NotCompiled as exc:
            failed.parent.mkdir(parents=True, exist_ok=True)
            failed.write_text(str(exc) + "\n")
            raise
    compile_s = 0.0 if cached else time.perf_counter() - started
    density = _load(path, dim, dtype, compile_s, cached, functions)
    _check(density, log_prob, dim, dtype)
    return density


GENERATED_FLAGS = ("-O2", "-march=native", "-fno-math-errno", "-fopenmp-simd", "-fPIC", "-std=c11")
"""Plain C densities: optimized for this CPU, but without -ffast-math, whose finite-math assumption would
drop the infinities and NaNs a log density uses (-inf outside the support); ``omp simd`` pragmas (no OpenMP
runtime) let a matrix product's sums vectorize. -O2 compiled the largest suite density (hmm_example, 1,450
lines) in 1.4 s."""


def _write_plain_c(graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, folder: Path) -> tuple[Path, bool]:
    """The graph as plain C (bayesx.native.codegen) compiled to a library in the cache, named by the digest of
    its source and the compiler's settings, and whether it was there already; raises codegen.Unsupported with the reason where it cannot be
    written or compiled."""
    generated = codegen.generate(graph, dim, dtype)
    compiler = _compiler()
    if compiler is None:
        raise codegen.Unsupported("no C compiler (install gcc or set CC)")
    digest = hashlib.sha256()
    for part in (generated.source, compiler, " ".join(GENERATED_FLAGS), *_environment(dtype)):
        digest.update(part.encode())
    path = folder / f"generated-{digest.hexdigest()[:20]}.so"
    if path.exists():
        return path, True
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        source = Path(tmp) / "density.c"
        source.write_text(generated.source)
        try:
            build(compiler, source, path, compile_flags=GENERATED_FLAGS)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip().splitlines()
            raise codegen.Unsupported(f"the C compiler failed ({detail[-1] if detail else type(exc).__name__})") \
                from None
    return path, False


def _known(path: Path, log_prob, dim: int, dtype: torch.dtype, functions: dict) -> CompiledDensity | None:
    """The library an identity points to, where it loads and still agrees with autograd; else None (traced)."""
    if not path.exists():
        return None
    try:
        density = _load(path, dim, dtype, 0.0, True, functions)
        _check(density, log_prob, dim, dtype)
    except Exception:  # noqa: BLE001 - stale, unloadable, or the density itself failed: trace it afresh
        return None
    return density


def _write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


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

    return {**core_aten_decompositions(), **unrolled_linalg.DECOMPOSITIONS}


def _trace(log_prob, dim: int, dtype: torch.dtype) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    point = torch.zeros(dim, dtype=dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = make_fx(_grad_and_value(log_prob), decomposition_table=_decompositions())(point)
    except Exception as exc:  # whatever the user's code raises under tracing: the reason is the message
        raise NotCompiled(f"its log density could not be traced ({type(exc).__name__}: "
                          f"{_first_line(exc)}); it may call numpy or branch on values") from None
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise NotCompiled("its log density has inputs besides the parameters")
    try:
        _fold_constants(graph)
    except Exception as exc:  # an operation on constants that fails when evaluated eagerly
        raise NotCompiled(f"its constants could not be folded ({type(exc).__name__}: {_first_line(exc)})") from None
    return graph


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
    target = node.target
    tags = getattr(target, "tags", ())
    schema = getattr(target, "_schema", None)
    return torch.Tag.nondeterministic_seeded in tags or bool(schema is not None and schema.is_mutable)


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


def _load(path: Path, dim: int, dtype: torch.dtype, compile_s: float, cached: bool,
          functions: dict) -> CompiledDensity:
    """The library as a CompiledDensity: plain C directly (bayesx's own code, linking nothing but libm), an
    AOTInductor library once a child process has loaded it without harm (:func:`_probe`)."""
    if path.name.startswith("generated-"):
        return _load_plain_c(path, dim, dtype, compile_s, cached, functions)
    _probe(path, dim, dtype)
    return _load_in_process(path, dim, dtype, compile_s, cached, functions)


def _load_plain_c(path: Path, dim: int, dtype: torch.dtype, compile_s: float, cached: bool,
                  functions: dict) -> CompiledDensity:
    try:
        library = ctypes.CDLL(str(path))
        function = ctypes.cast(library.bayesx_generated, ctypes.c_void_p).value
        work = ctypes.c_size_t.in_dll(library, "bayesx_generated_work").value
    except (OSError, AttributeError, ValueError) as exc:
        raise NotCompiled(f"the compiled library {path} could not be loaded ({exc}); delete it to recompile") \
            from None
    return CompiledDensity(dim, dtype, path, compile_s, cached, functions, library, _GeneratedModel(function, work),
                           PLAIN_C)


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


def _check(density: CompiledDensity, log_prob, dim: int, dtype: torch.dtype) -> None:
    """The compiled (log pi, grad) against autograd's at three points of scale 0.1, 0.5 and 1."""
    gen = torch.Generator().manual_seed(20261125)
    points = torch.randn(3, dim, generator=gen, dtype=torch.float64).to(dtype) * torch.tensor([[0.1], [0.5], [1.0]],
                                                                                               dtype=dtype)
    lp, grad = density.log_prob_and_grad(points)
    try:
        with torch.enable_grad():
            q = points.clone().requires_grad_(True)
            expected = log_prob(q)
            (expected_grad,) = torch.autograd.grad(expected.sum(), q)
    except Exception as exc:  # the user's density fails at the check's points: not compiled, the run decides
        raise NotCompiled(f"its log density failed at the compile check's points ({type(exc).__name__}: "
                          f"{_first_line(exc)})") from None
    tol = CHECK_TOLERANCE[dtype]
    finite = torch.isfinite(expected)
    scale = 1.0 + expected.detach().abs()
    value_off = ((lp - expected.detach()).abs() > tol * scale)[finite]
    if not torch.equal(torch.isfinite(lp), finite) or bool(value_off.any()):
        raise NotCompiled("the compiled log density differs from PyTorch's; the PyTorch path runs")
    grad_scale = 1.0 + expected_grad.abs()
    if bool(((grad - expected_grad).abs() > tol * grad_scale)[finite].any()):
        raise NotCompiled("the compiled gradient differs from autograd's; the PyTorch path runs")
