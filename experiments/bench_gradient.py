"""The native logistic gradient against its physical floor, in one process: ``make bench-gradient``.

One gradient of the default job's posterior (the synthetic logistic regression, 550 x 500; ``--rows``,
``--features`` for another size) costs at least the two BLAS matrix-vector products X theta and X^T r.
This script times, alternating and repeated (medians reported):

- the floor: NumPy's X @ theta and X.T @ r (OpenBLAS on one thread), float32 and float64;
- the native kernel (bayesx/native, the library bayesx loads): one gradient of one chain, and a pair of
  chains' gradients in one pass (the NUTS kernel's pairs), per gradient, on one thread;
- with ``--builds``: the same kernels built at other instruction sets and without -ffast-math
  (x86-64-v2, x86-64-v3, -march=native without fast math), to see whether the build is the cause;
- with ``--builds`` too: the kernels with subnormal arithmetic kept (``-DBAYESX_KEEP_SUBNORMALS``, as they
  were before the logistic form flushed subnormals), which shows what subnormals cost on this processor.

The points are the default job's: 4 x the data's true coefficients, whose logits have the posterior's
spread (median |l| about 45, a quarter beyond single precision's exp floor of 87 at the Laplace draws).
Times are CPU time of the timing thread (time.thread_time), so other processes on the machine inflate
them less than wall time; the load average is printed beside them. The ratio native / floor is the
number to watch: the issue's bound is 2.

    python experiments/bench_gradient.py                       # default size, the loaded library
    python experiments/bench_gradient.py --builds --out results/bench_gradient.md
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the floor on one thread, like the kernel it is set against
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bayesx.data.synthetic import make_synthetic  # noqa: E402
from bayesx.native import build, entry_points  # noqa: E402
from bayesx.native.calls import ptr  # noqa: E402
from bayesx.store.provenance import cpu_model, native_flags  # noqa: E402

VARIANTS = {  # name -> compile flags replacing build.COMPILE_FLAGS (--builds)
    "x86-64-v3 fast-math": ("-O3", "-march=x86-64-v3", "-ffast-math", "-fPIC", "-std=c11"),
    "x86-64-v2 fast-math": ("-O3", "-march=x86-64-v2", "-ffast-math", "-fPIC", "-std=c11"),
    "native, no fast-math": ("-O3", "-march=native", "-fPIC", "-std=c11"),
    "native fast-math, subnormals kept (before the fix)": build.COMPILE_FLAGS + ("-DBAYESX_KEEP_SUBNORMALS",),
}


class Kernel:
    """One build of the library at one precision, with the problem's arrays and scratch."""

    def __init__(self, library, suffix: str, design: np.ndarray, labels: np.ndarray, points: np.ndarray):
        dtype = torch.float32 if suffix == "f32" else torch.float64
        self.f = entry_points.bind(library, suffix)
        self.n, self.k = design.shape
        self.at = torch.tensor(design.T, dtype=dtype).contiguous()
        self.y = torch.tensor(labels, dtype=dtype)
        self.prec = torch.full((self.k,), 0.01, dtype=dtype)
        self.u = torch.tensor(points, dtype=dtype).contiguous()  # (2, k)
        self.g, self.lp = torch.empty_like(self.u), torch.empty(2, dtype=dtype)
        self.p = torch.zeros_like(self.u)
        self.inv_mass = torch.ones(self.k, dtype=dtype)
        self.eps = torch.zeros(2, dtype=dtype)  # zero steps: every leapfrog step evaluates the same two points
        self.out = torch.empty(4, 2, dtype=dtype)
        self.work = torch.empty(2 * self.f["logistic_work_size"](self.n, self.k), dtype=dtype)

    def single(self, reps: int):
        """reps gradients of one chain on one thread."""
        args = (1, 1, self.n, self.k, ptr(self.at), None, ptr(self.y), ptr(self.prec), 0, None, 0.0, ptr(self.u),
                ptr(self.g), ptr(self.lp), ptr(self.work))
        for _ in range(reps):
            self.f["logistic_density"](*args)
        return reps

    def pair(self, reps: int):
        """Two chains' gradients in one pass over the design (the NUTS kernel's pairs), reps // 2 times."""
        steps = max(1, reps // 2)
        self.f["logistic_leapfrog"](1, 1, 2, self.n, self.k, steps, ptr(self.at), None, ptr(self.y), ptr(self.prec),
                                    0, None, 0.0, ptr(self.inv_mass), 0, ptr(self.eps), ptr(self.u), ptr(self.p),
                                    ptr(self.g), 1, ptr(self.out), ptr(self.work))
        return 2 * steps


def floor(design: np.ndarray, labels: np.ndarray, theta: np.ndarray):
    """The BLAS matvec pair of one gradient (X theta, X^T r), r the logistic residual computed once."""
    with np.errstate(over="ignore"):
        r = (labels - 1.0 / (1.0 + np.exp(-(design @ theta)))).astype(design.dtype)

    def run(reps: int):
        for _ in range(reps):
            design @ theta
            design.T @ r
        return reps
    return run


def per_gradient_us(run, reps: int) -> float:
    start = time.thread_time()
    done = run(reps)
    return (time.thread_time() - start) / done * 1e6


def variant_library(name: str, flags: tuple[str, ...], folder: Path):
    import ctypes
    target = folder / f"kernels-{abs(hash(flags))}.so"
    build.build(build._compiler(), build.SOURCE_DIR / "kernels.c", target, build.OPENMP_FLAGS, compile_flags=flags)
    return ctypes.CDLL(str(target))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=550)
    ap.add_argument("--features", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=15, help="alternating rounds; medians are reported")
    ap.add_argument("--target-ms", type=float, default=20.0, help="CPU time per timed block")
    ap.add_argument("--builds", action="store_true", help="also time the kernels built with other flags")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args(argv)

    library = build.load("kernels")
    if library is None:
        print("bayesx: no native library (see the warning above); nothing to measure")
        return 1
    x, y, beta = make_synthetic(seed=0, n_features=args.features, n_correlated=min(50, args.features),
                                n_rows=args.rows)
    rng = np.random.default_rng(1)
    points = np.stack([4.0 * beta + 0.1 * rng.standard_normal(beta.shape) for _ in range(2)])
    logits = np.abs(x @ points[0])
    libraries = {"bayesx (" + " ".join(build.COMPILE_FLAGS[:3]) + ")": library}
    with tempfile.TemporaryDirectory() as tmp:
        if args.builds:
            for name, flags in VARIANTS.items():
                libraries[name] = variant_library(name, flags, Path(tmp))
        contenders = {}
        for suffix, np_dtype in (("f32", np.float32), ("f64", np.float64)):
            xs, ys = x.astype(np_dtype), y.astype(np_dtype)
            contenders[(suffix, "floor: numpy X@theta, X.T@r")] = floor(xs, ys, points[0].astype(np_dtype))
            for name, lib in libraries.items():
                kernel = Kernel(lib, suffix, xs, ys, points)
                contenders[(suffix, f"{name}: one chain")] = kernel.single
                contenders[(suffix, f"{name}: pair of chains")] = kernel.pair
        load_before = os.getloadavg()
        reps = {key: max(2, int(args.target_ms * 1e3 / max(per_gradient_us(run, 4), 0.05))) for key, run in
                contenders.items()}
        times = {key: [] for key in contenders}
        for _ in range(args.repeats):  # alternate: every contender once per round
            for key, run in contenders.items():
                times[key].append(per_gradient_us(run, reps[key]))
        load_after = os.getloadavg()
    medians = {key: statistics.median(v) for key, v in times.items()}
    lines = [f"# Native logistic gradient against the numpy/BLAS floor ({args.rows} x {args.features})", "",
             f"Made by: `python experiments/bench_gradient.py {shlex.join(argv if argv is not None else sys.argv[1:])}`"
             f" (`make bench-gradient`), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"Processor: {cpu_model()}, {os.cpu_count()} logical CPUs, {len(os.sched_getaffinity(0))} usable; "
             f"{platform.machine()}; AVX-512: {'yes' if 'avx512f' in _flags() else 'no'}", "",
             f"Library flags: `{native_flags()}`; numpy {np.__version__} (OpenBLAS threads "
             f"{os.environ.get('OPENBLAS_NUM_THREADS')})", "",
             f"Load average (1, 5, 15 min): {', '.join(f'{v:.2f}' for v in load_before)} before, "
             f"{', '.join(f'{v:.2f}' for v in load_after)} after (2 cores idle = 0)", "",
             f"Points: |logit| median {np.median(logits):.0f}, {np.mean(logits > 87):.0%} of rows beyond single "
             f"precision's exp floor", "",
             "Median over alternating rounds of thread CPU time per gradient (us), one thread:", "",
             "| precision | contender | us per gradient | x floor |", "|---|---|---|---|"]
    for (suffix, name), value in medians.items():
        base = medians[(suffix, "floor: numpy X@theta, X.T@r")]
        lines.append(f"| {suffix} | {name} | {value:.1f} | {value / base:.2f} |")
    worst = max(medians[(s, n)] / medians[(s, "floor: numpy X@theta, X.T@r")]
                for (s, n) in medians if n.startswith("bayesx") and "one chain" in n)
    lines += ["", f"ratio (bayesx one chain / floor, worst precision): {worst:.2f} (bound: 2)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def _flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            return next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
