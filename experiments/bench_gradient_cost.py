"""Benchmark: what one gradient of log pi costs on each path, on the same densities (the posteriordb suite).

For each posterior, microseconds per (log pi, gradient) evaluation at one point, float64, one thread:

    pytorch, 1 point      ``target.log_prob_and_grad`` on a (1, dim) batch: what a PyTorch NUTS leaf pays
                          (autograd and a dozen small operations dispatched from Python)
    pytorch, 64 points    the same on a (64, dim) batch, per point: chains in lock-step amortize the dispatch
    plain C               the density written as plain C (bayesx.native.codegen) called from C, per point:
                          2,000 points in one native call, as the C NUTS tree calls it; and its cold
                          compile (trace, write, cc, check) in seconds
    AOTInductor           the same density compiled by AOTInductor instead (BAYESX_PLAIN_C=0), and its compile
                          (--no-aotinductor skips it)
    jax, 1 point          NumPyro's density (the suite's second transcription in jax.numpy) under
                          ``jax.jit(jax.value_and_grad)``, called from Python (dispatch included: an upper
                          bound of what NumPyro's compiled tree pays; NumPyro's own cost per gradient is
                          wall time / gradients in bench_posteriordb.md)

With --logistic DATA..., logistic regression on those data sets too, with one more column: the hand-written
C logistic form (bayesx.native.logistic, what model=logreg runs), against the same density compiled from the
target's torch code: whether the hand-written kernel is still worth its code.

The median of --repeats timings is reported.

    python experiments/bench_gradient_cost.py --out results/bench_gradient_cost.md
    python experiments/bench_gradient_cost.py --posteriors --logistic digits synthetic --no-jax
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def median_us(fn, calls: int, repeats: int, per: int = 1) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / (calls * per))
    return 1e6 * float(np.median(times))


def jax_cost(name: str, q: np.ndarray, repeats: int) -> float | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    from bayesx.targets.posteriordb import load

    jax.config.update("jax_enable_x64", True)
    post = load(name)
    data = {k: jnp.asarray(v) for k, v in post.data.items()}
    grad = jax.jit(jax.value_and_grad(lambda x: post.log_density(jnp, x, data)))
    point = jnp.asarray(q)
    return median_us(lambda: jax.block_until_ready(grad(point)), 200, repeats)


def compiled_cost(target, many: torch.Tensor, repeats: int, plain_c: bool) -> tuple[float | None, float | None]:
    """(us per gradient called from C, cold compile seconds) with plain C, or AOTInductor alone; Nones where the
    density does not compile that way."""
    from bayesx.native import compiled

    os.environ["BAYESX_PLAIN_C"] = "1" if plain_c else "0"
    try:
        start = time.perf_counter()
        density = compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
        seconds = time.perf_counter() - start
    except compiled.NotCompiled as exc:
        print(f"not compiled ({exc})", file=sys.stderr)
        return None, None
    finally:
        os.environ.pop("BAYESX_PLAIN_C")
    if density.compiler != ("plain C" if plain_c else "AOTInductor"):
        return None, None
    return median_us(lambda: density.log_prob_and_grad(many), 5, repeats, per=2000), seconds


def logistic_target(data: str):
    """model=logreg on ``data=<data>`` with the configuration's defaults, float64, built as the runner builds it."""
    from bayesx.cli.config import compose
    from bayesx.runner import build

    cfg = compose(["model=logreg", f"data={data}"])
    return build(cfg.model, "model", data=build(cfg.data, "data"), device="cpu", dtype=torch.float64)


def main(argv: list[str] | None = None) -> int:
    from bayesx.native import logistic
    from bayesx.targets.posteriordb import NAMES
    from bayesx.targets.posteriordb.target import PosteriorDB

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posteriors", nargs="*", default=list(NAMES), choices=list(NAMES))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-jax", action="store_true",
                        help="skip the JAX column (JAX imported after torch stalled for minutes here; time it alone)")
    parser.add_argument("--logistic", nargs="*", default=[], metavar="DATA",
                        help="logistic regression on these data sets (digits, synthetic, ...), with the hand-written C")
    parser.add_argument("--no-aotinductor", action="store_true", help="skip the AOTInductor columns")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    os.environ["BAYESX_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_gradient_")  # cold: every compile timed
    logistic.kernels(torch.float64)  # the C kernels themselves are built at install time, not per density
    rows = ["| posterior | dim | pytorch, 1 point | pytorch, 64 points (per point) | plain C | plain C compile s | "
            "AOTInductor | AOTInductor compile s | hand-written C | jax, 1 point | pytorch / plain C |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    targets = [(name, PosteriorDB(name=name)) for name in args.posteriors]
    targets += [(f"logreg {data}", logistic_target(data)) for data in args.logistic]
    for name, target in targets:
        gen = torch.Generator().manual_seed(0)
        one = 0.1 * torch.randn(1, target.dim, generator=gen, dtype=torch.float64)
        batch = 0.1 * torch.randn(64, target.dim, generator=gen, dtype=torch.float64)
        many = 0.1 * torch.randn(2000, target.dim, generator=gen, dtype=torch.float64)
        torch_one = median_us(lambda: target.log_prob_and_grad(one), 200, args.repeats)
        torch_batch = median_us(lambda: target.log_prob_and_grad(batch), 50, args.repeats, per=64)
        native, native_s = compiled_cost(target, many, args.repeats, plain_c=True)
        aoti, aoti_s = (None, None) if args.no_aotinductor else compiled_cost(target, many, args.repeats, plain_c=False)
        form = target.density_form()
        hand = median_us(lambda: logistic.log_prob_and_grad(form, many), 5, args.repeats, per=2000) if form else None
        jax_one = None if args.no_jax or form is not None else jax_cost(name, one[0].numpy(), args.repeats)
        cells = [name, str(target.dim), f"{torch_one:.1f}", f"{torch_batch:.2f}",
                 *(f"{v:.2f}" if v else "-" for v in (native, native_s, aoti, aoti_s, hand)),
                 f"{jax_one:.1f}" if jax_one else "-", f"{torch_one / native:.0f}x" if native else "-"]
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    text = "\n".join([
        "# What one gradient costs: PyTorch, plain C, AOTInductor, JAX",
        "",
        f"Command: `python experiments/bench_gradient_cost.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"Machine: {platform.machine()}, torch {torch.__version__}, one thread, float64; microseconds per "
        f"(log pi, gradient) at one point, median of {args.repeats}.",
        "",
        *rows, ""])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
