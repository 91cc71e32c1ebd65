"""Compile a C source of this package into a shared library, and cache it: at install time
(``python -m bayesx.native.build``, which ``make install`` runs after ``pip install``), else at first use.

The library is built with the system C compiler (``$CC``, else ``cc``) for the machine it runs on
(``-march=native -mtune=generic``: :data:`THIS_CPU`), so it lives in a per-user cache keyed by the source, the flags, the compiler
and the CPU: ``$BAYESX_CACHE_DIR/native`` if set, else ``~/.cache/bayesx/native``. Sources are
compiled with ``-ffast-math`` (vectorized exp and log, reassociated sums) but linked without it,
so loading a library never switches the process to flush-to-zero arithmetic. They are built with
OpenMP (``-fopenmp``) where the compiler has it: the library then needs ``libgomp.so.1``, and since
PyTorch's CPU build has loaded a library of that name already, the dynamic loader binds ours to
PyTorch's own OpenMP runtime, so native and PyTorch parallel regions share one pool of threads
instead of two pools contending for the cores. Without OpenMP the build is retried serial.

Where no compiler is found or the build fails, :func:`load` returns None and says why once
(a :class:`NativeKernelWarning`); callers then use their PyTorch path (so does ``python -m
bayesx.native.build``, which then says why and exits 0: an install never fails for want of a compiler).
``BAYESX_NATIVE=0`` turns native kernels off altogether.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from functools import cache
from pathlib import Path


class NativeKernelWarning(RuntimeWarning):
    """A native kernel could not be built or loaded; the PyTorch kernels run instead."""


def _fall_back(message: str) -> None:
    warnings.warn(f"bayesx: {message}; the PyTorch kernels run instead (slower on small problems)",
                  NativeKernelWarning, stacklevel=3)


SOURCE_DIR = Path(__file__).resolve().parent
LIBRARIES = ("kernels",)  # the C sources (<name>.c) of this package
THIS_CPU = ("-march=native", "-mtune=generic")
"""This CPU's instruction set, scheduled for any x86-64 (``-mtune=generic``). GCC 12.2 tuning for an Ice Lake class
CPU (what ``-march=native`` alone picks here: rocketlake) expands a copy of a constant array (``memcpy``, or a loop
it recognizes as one) with 256-bit stores from a broadcast, and writes the first element into the second quarter:
``{a, a, a, 0, ...}`` came out ``{a, a, a, a, ...}``. Its ``avx256_store_by_pieces`` tuning does it; generic tuning
has it off (tests/test_compiler_flags.py: the copy, with a control that shows the bug where this compiler has it)."""
COMPILE_FLAGS = ("-O3", *THIS_CPU, "-ffast-math", "-fPIC", "-std=c11")
PLAIN_C_FLAGS = ("-O2", *THIS_CPU, "-fno-math-errno", "-fopenmp-simd", "-fPIC", "-std=c11")
"""Generated plain C densities (bayesx.native.compiled): optimized for this CPU, but without -ffast-math, whose
finite-math assumption would drop the infinities and NaNs a log density uses (-inf outside the support); ``omp simd``
pragmas (no OpenMP runtime) let a matrix product's sums vectorize."""
LINK_FLAGS = ("-shared",)
OPENMP_FLAGS = ("-fopenmp",)  # both compiling and linking


def enabled() -> bool:
    """False when the user turned native kernels off (``BAYESX_NATIVE=0``)."""
    return os.environ.get("BAYESX_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    root = os.environ.get("BAYESX_CACHE_DIR", "").strip()
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "bayesx") / "native"


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("model name", "flags")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


def _key(compiler: str, sources: list[Path], openmp: bool) -> str:
    digest = hashlib.sha256()
    flags = COMPILE_FLAGS + LINK_FLAGS + (OPENMP_FLAGS if openmp else ())
    for part in (compiler, " ".join(flags), _cpu_signature(), platform.machine()):
        digest.update(part.encode())
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


@cache
def load(name: str) -> ctypes.CDLL | None:
    """The shared library built from ``<name>.c`` (and the ``.h`` files beside it), with OpenMP
    where the compiler has it, else serial; None where neither builds."""
    compiler = _compiler()
    if compiler is None:
        _fall_back("no C compiler found (install gcc or set CC)")
        return None
    source = SOURCE_DIR / f"{name}.c"
    sources = [source, *sorted(SOURCE_DIR.glob("*.h"))]
    failures = []
    for openmp in (True, False):
        target = cache_dir() / f"{name}-{_key(compiler, sources, openmp)}.so"
        try:
            if not target.exists():
                build(compiler, source, target, OPENMP_FLAGS if openmp else ())
            library = ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", "") or str(exc)).strip()
            failures.append(detail.splitlines()[-1] if detail else type(exc).__name__)
            continue
        if failures:
            warnings.warn(f"bayesx: the native library {name} was built without OpenMP ({failures[0]}); "
                          "each native call runs on one thread", NativeKernelWarning, stacklevel=2)
        return library
    _fall_back(f"building or loading the native library {name} failed ({failures[-1]})")
    return None


def build(compiler: str, source: Path, target: Path, extra_flags: tuple[str, ...] = (),
          compile_flags: tuple[str, ...] = COMPILE_FLAGS, libraries: tuple[str, ...] = ()) -> None:
    """Compile and link into a temporary folder, then move into place (safe for parallel runs); ``libraries``
    (``-lNAME``) are linked after the object, before libm; raises subprocess.SubprocessError (CalledProcessError
    with the compiler's stderr, or a timeout) or OSError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        obj, lib = Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
        run = {"check": True, "capture_output": True, "text": True, "timeout": 120}
        subprocess.run([compiler, *compile_flags, *extra_flags, "-c", str(source), "-o", str(obj)], **run)
        subprocess.run([compiler, *LINK_FLAGS, *extra_flags, str(obj), "-o", str(lib), *libraries, "-lm"], **run)
        os.replace(lib, target)


VECTOR_MATH = ("exp", "log", "sin", "cos", "pow", "log1p", "expm1", "tanh", "atan", "asin", "acos", "sinh", "cosh",
               "asinh", "acosh", "atanh", "erf", "erfc", "log2", "log10", "exp2", "atan2", "hypot")
"""C's math functions that glibc's vector math library (libmvec) has SIMD variants of, for double and float: exp,
log, sin, cos and pow since glibc 2.22, the rest since 2.35."""
VECTOR_MATH_OLDEST = 5


def simd_declarations(functions: tuple[str, ...]) -> str:
    """C declarations that tell the compiler ``functions`` (and their float forms) have SIMD variants, so that a
    ``#pragma omp simd`` loop calling them is vectorized through libmvec (what glibc's math.h declares only under
    -ffast-math, which the generated densities are not compiled with: it would drop infinities and NaNs). The
    variants keep C's special values (inf, NaN, overflow) and are within 4 ulp."""
    arity = {"pow": 2, "atan2": 2, "hypot": 2}
    lines = []
    for name in functions:
        for real, suffix in (("double", ""), ("float", "f")):
            arguments = ", ".join([real] * arity.get(name, 1))
            lines.append(f'{real} ({name}{suffix})({arguments}) __attribute__((__simd__("notinbranch")));')
    return "\n".join(lines)


@cache
def vector_math(compiler: str) -> tuple[str, ...]:
    """The VECTOR_MATH functions whose SIMD variants this compiler and C library build and load (a probe library
    compiled once per process: the newest set, else glibc 2.22's five, else none)."""
    flags = PLAIN_C_FLAGS
    for functions in (VECTOR_MATH, VECTOR_MATH[:VECTOR_MATH_OLDEST]):
        calls = "\n".join(f"    y[i] += {name}({', '.join(['x[i]'] * (2 if name in ('pow', 'atan2', 'hypot') else 1))});"
                          for name in functions)
        source = ("#include <tgmath.h>\n" + simd_declarations(functions) + "\nvoid probe(const double *x, double *y, "
                  "int n) {\n#pragma omp simd\nfor (int i = 0; i < n; i++) {\n" + calls + "\n}\n}\n")
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "probe.c"
                path.write_text(source)
                build(compiler, path, Path(tmp) / "probe.so", compile_flags=flags, libraries=("-lmvec",))
                ctypes.CDLL(str(Path(tmp) / "probe.so"))
        except (OSError, subprocess.SubprocessError):
            continue
        return functions
    return ()


def build_all() -> list[str]:
    """Build (or find in the cache) every library of this package; one line per library saying where it
    is, or why the PyTorch kernels will run instead."""
    if not enabled():
        return ["bayesx: native kernels are turned off (BAYESX_NATIVE=0); nothing built"]
    lines = []
    for name in LIBRARIES:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", NativeKernelWarning)
            library = load(name)
        lines += [str(w.message) for w in caught if issubclass(w.category, NativeKernelWarning)]
        if library is not None:
            lines.append(f"bayesx: native library {name} built: {library._name}")
    return lines


if __name__ == "__main__":
    print("\n".join(build_all()))
