"""Benchmark: bayesx against NumPyro and nutpie on the posteriordb suite, one posterior after the other, in one run.

For each posterior of ``model=posteriordb`` (bayesx/targets/posteriordb), side by side on this machine:

    bayesx NUTS     ``bayesx run model=posteriordb model.name=<name> method=nuts``: its defaults (4 chains,
                    float64, 300 + 1000 transitions, mass=auto: a dense metric at these sizes, the density
                    compiled on first use)
    bayesx best     the other bayesx samplers given by --best (default: NUTS with 8 chains, NUTS with the
                    metric from draws and gradients, NUTS with target 0.95 and 1000 + 4000 transitions and
                    with target 0.99 and 1000 + 10000 for funnels, ChEES with 64 chains), the best of them and of NUTS by min-ESS per second at
                    R-hat <= 1.01 (by min-ESS per second alone where none reaches it)
    NumPyro NUTS    its defaults (diagonal metric, target 0.8), 4 chains run one after the other (its
                    choice on one CPU device), float64, --numpyro-warmup + --numpyro-draws (1000 + 1000),
                    started uniformly in (-2, 2) as Stan; the density is the suite's second transcription
                    (xp_models.py) in jax.numpy, so NumPyro and bayesx sample the same posterior from
                    independently written code; the recursions (arma11, garch11, hmm_example) in their
                    ``lax.scan`` form (scan_densities)
    nutpie          (--nutpie; on when nutpie and PyMC are installed) its defaults (400 tuning + 1000 draws,
                    diagonal mass matrix adapted from gradients, chains in parallel threads), 4 chains, float64,
                    the numba backend; the PyMC model (experiments/pymc_models.py) is the same transcription in
                    pytensor on the same unconstrained space, the recursions by ``pytensor.scan``

Rates are min bulk ESS (ArviZ, as bayesx reports it) per second of **total** wall time: bayesx's
``wall_time_s`` (compiling the density included, on a cold cache: --cold, the default, empties it first;
also reported without the compile), NumPyro's ``mcmc.run`` (its JIT compile included), nutpie's
compile_pymc_model + sample (its numba compile included, cold too: pytensor's numba cache is off unless
--warm; the compile also reported alone). Every draw set is also scored against posteriordb's gold-standard
draws (ref_mean_err_max: worst |mean error| in reference sds). bayesx's runs go to an MLflow store
(--tracking-uri; the peers' numbers are in the table only).

    pip install -e ".[bench]"      # NumPyro and JAX, nutpie and PyMC
    python experiments/bench_posteriordb.py --out results/bench_posteriordb.md
    python experiments/bench_posteriordb.py --posteriors diamonds eight_schools_noncentered --best ""
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BEST = ["method=nuts n_chains=8", "method=nuts method.mass=diag_grad",
                "method=nuts method.target_accept=0.95 method.num_warmup=1000 method.num_draws=4000",
                "method=nuts method.target_accept=0.99 method.num_warmup=1000 method.num_draws=10000",
                "method=chees n_chains=64"]  # NUTS alone uses its default metric (dense here)


def bayesx_run(name: str, overrides: list[str], uri: str, experiment: str, env: dict) -> dict:
    """One ``bayesx run --json`` in a subprocess; its metrics and tags from the run it printed
    (experiments/_runs.py)."""
    from _runs import bayesx_run as launch

    launched = launch(["model=posteriordb", f"model.name={name}", *overrides, f"experiment_name={experiment}",
                       f"tracking.uri={uri}", "save_draws=false", "progress=false", "plots.n_coords=0", "seed=0"],
                      env=env)
    if not launched.ok:
        print(launched.failure(), file=sys.stderr)
        return {"failed": True}
    run = launched.run
    metrics, tags = {k: v for k, v in run["metrics"].items() if v is not None}, dict(run["tags"])
    grads = metrics.get("n_grad_evals", 0.0) + metrics.get("n_grad_evals_warmup", 0.0)
    wall = metrics["wall_time_s"]
    return {"label": " ".join(overrides), "ess": metrics.get("ess_bulk_min"), "wall": wall,
            "compile": metrics.get("compile_time_s", 0.0), "rhat": metrics.get("rhat_max"), "grads": grads,
            "ref_err": metrics.get("ref_mean_err_max"), "kernels": tags.get("kernels", "?"),
            "length": run_length(metrics, tags)}


def run_length(metrics: dict, tags: dict) -> str:
    """How long a bayesx run sampled (bayesx/methods/mcmc/run_length.py): draws per chain and the final target
    acceptance, where its rules changed them."""
    extended = tags.get("extended", "")
    draws = metrics.get("draws_per_chain")
    final = metrics.get("target_accept_final")
    parts = [f"{draws:.0f} draws" if draws else "-"]
    if final is not None:
        parts.append(f"target {final:g}")
    if extended:
        parts.append(f"drew on {extended.split(' ')[0]}x")
    return ", ".join(parts)


def scan_densities(xp, scan, sigmoid):
    """The three recursive posteriors as a NumPyro or PyMC user writes them, with a scan: the suite's one-point
    transcriptions loop in Python over the series, which XLA and pytensor unroll (200 steps: minutes of
    compiling). The same mathematics as xp_models.py, term for term, for the array namespace ``xp``, its
    ``scan(step, init, xs) -> (carry, stacked outputs)`` (jax.lax.scan's contract; ``xs`` an array or a tuple
    of them, scanned along their first axis) and its logistic function ``sigmoid``."""
    from bayesx.targets.posteriordb.xp_models import _normal

    def arma11(q, d):
        y = d["y"]
        mu, phi, theta, sigma = q[0], q[1], q[2], xp.exp(q[3])
        lp = -0.5 * (mu / 10.0) ** 2 - 0.5 * (phi / 2.0) ** 2 - 0.5 * (theta / 2.0) ** 2 \
            - xp.log(1.0 + (sigma / 2.5) ** 2)
        err0 = y[0] - (mu + phi * mu)

        def step(err, pair):
            previous, current = pair
            err = current - (mu + phi * previous + theta * err)
            return err, _normal(xp, err, 0.0, sigma)
        _, terms = scan(step, err0, (y[:-1], y[1:]))
        return lp + _normal(xp, err0, 0.0, sigma) + terms.sum() + q[3]

    def garch11(q, d):
        y = d["y"]
        mu, alpha0, alpha1, beta_unit = q[0], xp.exp(q[1]), sigmoid(q[2]), sigmoid(q[3])
        beta1 = (1.0 - alpha1) * beta_unit
        sigma0 = d["sigma1"] + 0.0 * mu

        def step(sigma, pair):
            previous, current = pair
            sigma = xp.sqrt(alpha0 + alpha1 * (previous - mu) ** 2 + beta1 * sigma * sigma)
            return sigma, _normal(xp, current, mu, sigma)
        _, terms = scan(step, sigma0, (y[:-1], y[1:]))
        log_jacobian = (q[1] + xp.log(alpha1) + 2.0 * xp.log(1.0 - alpha1) + xp.log(beta_unit)
                        + xp.log(1.0 - beta_unit))
        return _normal(xp, y[0], mu, sigma0) + terms.sum() + log_jacobian

    def hmm_example(q, d):
        z1, z2 = sigmoid(q[0]), sigmoid(q[1])
        mu = xp.stack([xp.exp(q[2]), xp.exp(q[2]) + xp.exp(q[3])])
        log_theta = xp.log(xp.stack([xp.stack([z1, 1.0 - z1]), xp.stack([z2, 1.0 - z2])]))
        y = d["y"]

        def step(gamma, y_t):
            gamma = xp.logaddexp(gamma[0] + log_theta[0], gamma[1] + log_theta[1]) - 0.5 * (y_t - mu) ** 2
            return gamma, None
        gamma, _ = scan(step, -0.5 * (y[0] - mu) ** 2, y[1:])
        lp = -0.5 * (mu[0] - 3.0) ** 2 - 0.5 * (mu[1] - 10.0) ** 2 + xp.logaddexp(gamma[0], gamma[1])
        return lp + xp.log(z1) + xp.log(1.0 - z1) + xp.log(z2) + xp.log(1.0 - z2) + q[2] + q[3]

    return {"arma11": arma11, "garch11": garch11, "hmm_example": hmm_example}


def jax_log_density(name: str):
    """NumPyro's density: the suite's transcription in jax.numpy, or its lax.scan form for the recursions."""
    import jax.numpy as jnp
    from jax import lax
    from jax.nn import sigmoid

    from bayesx.targets.posteriordb import load

    post = load(name)
    data = {k: jnp.asarray(v) for k, v in post.data.items()}
    scans = scan_densities(jnp, lax.scan, sigmoid)
    if name in scans:
        return lambda q: scans[name](q, data)
    from bench_loops import SCANNED, scan_density  # noqa: PLC0415 (bench_loops imports this module)

    if name in SCANNED:  # a Python loop over 400+ steps that XLA would unroll (20+ GB traced on this machine)
        density = scan_density(name)
        return lambda q: density(q, data)
    return lambda q: post.log_density(jnp, q, data)


def peer_row(name: str, label: str, samples: np.ndarray, wall: float, grads: float, compile_s: float | None) -> dict:
    """A peer's row: min bulk ESS and R-hat (bayesx.diagnostics.convergence, as bayesx reports them) and the
    gold-standard error of its unconstrained draws (chains, draws, dim), as bayesx's runs log it."""
    from bayesx.diagnostics.convergence import summarize
    from bayesx.targets.posteriordb.target import PosteriorDB

    summary = summarize(samples)
    ref_err = PosteriorDB(name=name).evaluate(torch.as_tensor(samples)).metrics.get("ref_mean_err_max")
    return {"label": label, "ess": summary["ess_bulk_min"], "wall": wall, "compile": compile_s,
            "rhat": summary["rhat_max"], "grads": grads, "ref_err": ref_err}


def numpyro_run(name: str, warmup: int, draws: int, chains: int) -> dict:
    import jax

    jax.config.update("jax_enable_x64", True)
    log_density = jax_log_density(name)
    return numpyro_nuts(name, "numpyro", lambda q: -log_density(q), warmup, draws, chains)


def numpyro_nuts(name: str, label: str, potential, warmup: int, draws: int, chains: int) -> dict:
    """NumPyro NUTS at its defaults on ``potential`` (-log p), chains one after the other, started uniformly in
    (-2, 2) as Stan; its row with the wall time of ``mcmc.run`` (JIT included)."""
    import jax
    from numpyro.infer import MCMC, NUTS

    from bayesx.targets.posteriordb import load

    mcmc = MCMC(NUTS(potential_fn=potential), num_warmup=warmup, num_samples=draws,
                num_chains=chains, chain_method="sequential", progress_bar=False)
    init = np.random.default_rng(0).uniform(-2, 2, (chains, load(name).dim))
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(0), init_params=init, extra_fields=("num_steps",))
    wall = time.perf_counter() - start
    samples = np.asarray(mcmc.get_samples(group_by_chain=True), np.float64)
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    # NumPyro counts the gradients of sampling only; its warm-up took about as many per transition
    return peer_row(name, label, samples, wall, float(steps.sum()) * (warmup + draws) / draws, None)


def nutpie_run(name: str, chains: int) -> dict:
    """nutpie with its defaults (tune, draws, chains in parallel threads, numba backend), ``chains`` chains,
    on the PyMC model of experiments/pymc_models.py: wall time from compiling the model to the last draw."""
    import pymc_models

    from bayesx.targets.posteriordb import load

    out = pymc_models.nutpie_run(pymc_models.posteriordb_model(load(name)), ["theta"], chains, seed=0)
    return peer_row(name, "nutpie", out.draws, out.wall, out.grads_sampling + out.grads_warmup, out.compile)


def rate(run: dict, with_compile: bool = True) -> float | None:
    if run.get("failed") or not run.get("ess"):
        return None
    wall = run["wall"] - (0.0 if with_compile else (run.get("compile") or 0.0))
    return run["ess"] / wall


RHAT_GOAL = 1.01  # the bar for a converged run


def converged(run: dict) -> bool:
    return run.get("rhat") is not None and run["rhat"] <= RHAT_GOAL


def fmt(x, digits=3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def table(rows: list[dict]) -> list[str]:
    lines = ["| posterior | dim | bayesx NUTS min-ESS/s | (no compile) | compile s | R-hat | grads | ref err | "
             "NUTS run length | "
             "bayesx best | best min-ESS/s | best R-hat | NumPyro min-ESS/s | NumPyro R-hat | NumPyro grads | "
             "NumPyro ref err | NUTS / NumPyro | best / NumPyro | nutpie min-ESS/s | nutpie compile s | "
             "nutpie R-hat | nutpie grads | nutpie ref err | NUTS / nutpie | best / nutpie |",
             "|" + "---|" * 25]
    for row in rows:
        nuts, best, peer, pie = row["nuts"], row["best"], row["numpyro"], row["nutpie"]
        r_nuts, r_best, r_peer, r_pie = rate(nuts), rate(best), rate(peer), rate(pie)
        lines.append("| " + " | ".join([
            row["name"], str(row["dim"]), fmt(r_nuts), fmt(rate(nuts, False)), fmt(nuts.get("compile"), 2),
            fmt(nuts.get("rhat")), fmt(nuts.get("grads"), 2), fmt(nuts.get("ref_err"), 2), nuts.get("length", "-"),
            best.get("label", "-"),
            fmt(r_best), fmt(best.get("rhat")), fmt(r_peer), fmt(peer.get("rhat")), fmt(peer.get("grads"), 2),
            fmt(peer.get("ref_err"), 2), fmt(ratio(r_nuts, r_peer)), fmt(ratio(r_best, r_peer)),
            fmt(r_pie), fmt(pie.get("compile"), 2), fmt(pie.get("rhat")), fmt(pie.get("grads"), 2),
            fmt(pie.get("ref_err"), 2), fmt(ratio(r_nuts, r_pie)), fmt(ratio(r_best, r_pie))]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from bayesx.targets.posteriordb import NAMES, SUITE

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posteriors", nargs="*", default=list(NAMES), choices=list(NAMES))
    parser.add_argument("--best", nargs="*", default=DEFAULT_BEST, help="other bayesx samplers, overrides each")
    parser.add_argument("--numpyro-warmup", type=int, default=1000)
    parser.add_argument("--numpyro-draws", type=int, default=1000)
    parser.add_argument("--no-numpyro", action="store_true")
    parser.add_argument("--nutpie", action=argparse.BooleanOptionalAction, default=None,
                        help="run nutpie too (default: when nutpie and PyMC are installed)")
    parser.add_argument("--warm", action="store_true",
                        help="keep bayesx's compiled-density cache and pytensor's numba cache (default: cold)")
    parser.add_argument("--tracking-uri", default=None, help="default: a temporary SQLite store")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.nutpie is None:
        args.nutpie = all(importlib.util.find_spec(m) is not None for m in ("nutpie", "pymc"))
    tmp = Path(tempfile.mkdtemp(prefix="bench_pdb_"))
    uri = args.tracking_uri or f"sqlite:///{tmp}/mlflow.db"
    env = {**os.environ, "BAYESX_COMPILE": "auto"}
    if not args.warm:
        env["BAYESX_CACHE_DIR"] = str(tmp / "cache")  # cold: every density compiles in the NUTS run
        native = Path(os.environ.get("BAYESX_CACHE_DIR", Path.home() / ".cache" / "bayesx")) / "native"
        if native.exists():  # the C kernels themselves are built at install time: keep them
            shutil.copytree(native, tmp / "cache" / "native")
        # nutpie cold too: pytensor (imported below, reading this then) recompiles each model with numba
        os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [os.environ.get("PYTENSOR_FLAGS"), "numba__cache=False"]))
    rows = []
    for name in args.posteriors:
        nuts = bayesx_run(name, ["method=nuts"], uri, "bench_posteriordb", env)
        candidates = [nuts] + [bayesx_run(name, shlex.split(b), uri, "bench_posteriordb", env)
                               for b in args.best if b.strip()]  # --best "": NUTS alone
        best = max(candidates, key=lambda r: (converged(r), rate(r) or 0.0))
        peer = {} if args.no_numpyro else numpyro_run(name, args.numpyro_warmup, args.numpyro_draws, 4)
        pie = nutpie_run(name, 4) if args.nutpie else {}
        rows.append({"name": name, "dim": SUITE[name].dim, "nuts": nuts, "best": best, "numpyro": peer,
                     "nutpie": pie})
        print("\n".join(table(rows)[-1:]), flush=True)
    header = [
        "# bayesx against NumPyro and nutpie on the posteriordb suite",
        "",
        f"Command: `python experiments/bench_posteriordb.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
        f"{'warm' if args.warm else 'cold'} compiled-density cache (and numba cache for nutpie); one run each, "
        "seed 0, one after the other.",
        "",
        "min-ESS/s: min bulk ESS over the parameters per second of total wall time (bayesx: the run's "
        "wall_time_s, compiling the density included; '(no compile)' without it, as a second run with the cache "
        "finds it; NumPyro: mcmc.run, JIT included; nutpie: compile_pymc_model + sample, numba compile included, "
        "its defaults with 4 chains in parallel threads; 'nutpie compile s': compile_pymc_model alone). ref err: "
        "worst |mean - gold-standard mean| in gold-standard sds. grads: gradient evaluations, warm-up included. "
        "NUTS run length: draws per chain kept, the target acceptance it ended at, and how many times it drew on "
        "because R-hat or the ESS fell short (bayesx/methods/mcmc/run_length.py). "
        "A '-': the peer was not run (--no-numpyro, --no-nutpie or not installed).",
        "",
    ]
    text = "\n".join(header + table(rows)) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
