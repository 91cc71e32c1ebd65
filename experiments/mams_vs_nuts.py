"""Benchmark: gradients per effective sample of MAMS (method=mams) against bayesx NUTS, both at their command-line
defaults (conf/method/mams.yaml, conf/method/nuts.yaml: the Laplace start, the run-length rules), in one process.

Targets: 100-d ill-conditioned Gaussians (variances log-spaced over [1e-3, 1], covariance condition number 1000),
axis-aligned (``scaled``: a diagonal metric whitens it) and along a random rotation (``rotated``: only a dense
metric does; NUTS's mass=auto is dense up to 100 coordinates), and posteriordb posteriors (their gold-standard
draws give ref_mean_err_max / ref_sd_err_max in reference sds).

The headline is gradients per effective sample, which does not depend on the machine's load: the sampling
stage's gradient evaluations (all chains) over the smallest bulk ESS (ArviZ) among the coordinates x_i and,
for the Gaussians, among their squares (x_i - mu_i)^2 (second moments, the MAMS paper's measure); warm-up's
gradients are reported beside them. Wall times are printed but depend on the load (reported in the file).

    python experiments/mams_vs_nuts.py --out results/mams_vs_nuts.md
    python experiments/mams_vs_nuts.py --seeds 0 --posteriors arK --out /tmp/m.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch
from hydra.utils import get_object
from omegaconf import OmegaConf

from bayesx.config import compose
from bayesx.diagnostics.convergence import ess_per_coordinate, rhat_per_coordinate
from bayesx.kernels import backend
from bayesx.methods.base import RunInputs
from bayesx.settings import configure


def build(method: str, overrides: dict):
    """The method ``method=<name>`` as the command line builds it, with ``overrides``."""
    node = compose([f"method={method}"]).method
    node = OmegaConf.merge(node, overrides)
    options = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    factory = get_object(node._target_)
    return factory(settings=configure(factory.Settings, options, "method"))


def targets(posteriors: list[str]):
    from bayesx.targets.gaussian import Gaussian

    condition = 1000 ** 0.5  # sds over [1/condition, 1]: covariance condition 1000
    yield "gaussian100-scaled", Gaussian(dim=100, kind="scaled", condition=condition)
    yield "gaussian100-rotated", Gaussian(dim=100, kind="rotated", condition=condition)
    for name in posteriors:
        from bayesx.targets.posteriordb.target import PosteriorDB

        target = PosteriorDB(name=name)
        backend.identify(target, f"posteriordb:{name}:float64")
        yield f"posteriordb:{name}", target


def run_one(label: str, target, method_name: str, overrides: dict, seed: int, n_chains: int) -> dict:
    method = build(method_name, overrides)
    method.check(target, n_chains)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    out = method.sample(target, RunInputs(method.initial_points(target, n_chains, gen), gen, progress=False))
    wall = time.perf_counter() - start
    draws = out.draws.numpy()
    ess = ess_per_coordinate(draws)
    row = {"target": label, "method": method_name + "".join(f" {k}={v}" for k, v in overrides.items()),
           "seed": seed, "draws_per_chain": draws.shape[1], "grads": out.metrics["n_grad_evals"],
           "grads_warmup": out.metrics["n_grad_evals_warmup"], "ess_min": float(ess.min()),
           "rhat_max": float(np.nanmax(rhat_per_coordinate(draws))), "accept": out.metrics.get("accept_rate"),
           "step_size": out.metrics.get("step_size"), "L": out.metrics.get("trajectory_length"),
           "steps_mean": out.metrics.get("integration_steps_mean"), "wall_s": wall,
           "n_divergent": out.metrics.get("n_divergent", 0.0)}
    row["grads_per_ess"] = row["grads"] / row["ess_min"]
    if hasattr(target, "cov"):
        sq = (draws - target.mean.numpy()) ** 2
        row["ess_sq_min"] = float(ess_per_coordinate(sq).min())
        row["grads_per_ess_sq"] = row["grads"] / row["ess_sq_min"]
        flat = draws.reshape(-1, draws.shape[-1])
        var = np.diag(target.cov.numpy())
        row["var_err_max"] = float(np.max(np.abs(flat.var(0) - var) / var))  # relative, worst coordinate
    else:
        metrics = target.evaluate(out.draws).metrics
        row["ref_mean_err_max"] = metrics["ref_mean_err_max"]
        row["ref_sd_err_max"] = metrics["ref_sd_err_max"]
    return row


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--posteriors", nargs="*", default=["arK", "eight_schools_noncentered"])
    parser.add_argument("--n-chains", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    contenders = [("nuts", {}), ("mams", {}), ("mams", {"mass": "diag"}), ("mams", {"integrator": "leapfrog"})]
    rows = []
    load_before = os.getloadavg()
    for label, target in targets(args.posteriors):
        for name, overrides in contenders:
            for seed in args.seeds:
                row = run_one(label, target, name, overrides, seed, args.n_chains)
                rows.append(row)
                print({k: fmt(v) for k, v in row.items()}, flush=True)
    load_after = os.getloadavg()
    columns = ["target", "method", "seed", "grads_per_ess", "grads_per_ess_sq", "grads", "grads_warmup", "ess_min",
               "ess_sq_min", "rhat_max", "var_err_max", "ref_mean_err_max", "ref_sd_err_max", "accept", "step_size",
               "L", "steps_mean", "n_divergent", "draws_per_chain", "wall_s"]
    lines = ["# MAMS against bayesx NUTS: gradients per effective sample", "",
             f"Made by: `python {' '.join(['experiments/mams_vs_nuts.py', *(argv if argv is not None else sys.argv[1:])])}`"
             f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             f"Machine: {platform.node()}, {os.cpu_count()} cores, {args.threads} torch thread(s), torch "
             f"{torch.__version__}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (other "
             f"work on the machine: wall times are upper bounds; gradients per ESS do not depend on load)", "",
             "Both samplers at their command-line defaults (conf/method/*.yaml; both mass=auto: dense up to 100 "
             "coordinates), 4 chains, float64; MAMS also with BlackJAX's diagonal preconditioning (mass=diag) and "
             "with the leapfrog integrator. grads: the "
             "sampling stage's gradient evaluations, all chains; grads_per_ess: grads / min bulk ESS over the "
             "coordinates; grads_per_ess_sq: the same for the squares (x - mu)^2 (second moments); var_err_max: "
             "worst relative error of a variance; ref_*: posteriordb's reference errors in reference sds.", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c)) for c in columns) + " |")
    lines += ["", "## Medians over seeds: NUTS's gradients per ESS over MAMS's (above 1: MAMS needs fewer)", ""]
    lines += ["| target | method | grads_per_ess (median) | NUTS / it | grads_per_ess_sq (median) | NUTS / it |",
              "|---|---|---|---|---|---|"]
    for label in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == label]
        base = [r for r in mine if r["method"] == "nuts"]
        b1 = float(np.median([r["grads_per_ess"] for r in base]))
        b2 = float(np.median([r.get("grads_per_ess_sq", np.nan) for r in base]))
        for method in dict.fromkeys(r["method"] for r in mine):
            these = [r for r in mine if r["method"] == method]
            g1 = float(np.median([r["grads_per_ess"] for r in these]))
            g2 = float(np.median([r.get("grads_per_ess_sq", np.nan) for r in these]))
            shown = f"{g2:.4g} | {b2 / g2:.3g}" if g2 == g2 else "- | -"
            lines.append(f"| {label} | {method} | {g1:.4g} | {b1 / g1:.3g} | {shown} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
