"""Every approximation method of bayesx against NUTS on Bayesian logistic regression: accuracy, test
log predictive density, posterior mean / sd error against a long NUTS run, log evidence where the
method estimates one, wall time and gradient evaluations.

    python experiments/vi_comparison.py --data digits        # -> results/vi_comparison_digits.md   (~5 min)
    python experiments/vi_comparison.py --data synthetic     # -> results/vi_comparison_synthetic.md
    python experiments/vi_comparison.py --data mnist01 --ref-warmup 300 --ref-draws 300 --ref-tree-depth 7

Each row calls the method the way `bayesx run method=NAME model=logreg data=DATA` does (same
classes and family code, the settings listed in the row); the reference is bayesx's own cached NUTS
run (bayesx/reference.py) with the settings in the header, and its error is the runner's
posterior_mean_err / posterior_sd_err (mean over coordinates of |difference| / reference sd).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import torch

from bayesx import reference
from bayesx.data.digits import load_digits
from bayesx.data.mnist import load_mnist01
from bayesx.data.registry import data_dir
from bayesx.data.synthetic import load_synthetic
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.vi.ais import AIS
from bayesx.methods.vi.flowvi import FlowVI
from bayesx.methods.vi.gap import GAP
from bayesx.methods.vi.gaussian import GaussianVI
from bayesx.methods.vi.laplace import Laplace
from bayesx.methods.vi.pathfinder import Pathfinder
from bayesx.methods.vi.smc import SMC
from bayesx.methods.vi.svgd import SVGD
from bayesx.targets.logreg import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]
PRIOR_SCALE = 10.0


def methods(data: str, ref_tree_depth: int):
    """(row name, method, settings text): the CLI's defaults where they are affordable here; on mnist01
    (784 coordinates, 1703 rows) the particle methods and GAP with fewer particles and steps."""
    big = data == "mnist01"
    rows = [
        ("nuts", NUTS(num_warmup=200 if big else 500, num_draws=200 if big else 500, init="laplace",
                      max_tree_depth=ref_tree_depth),
         f"4 chains, {'200 + 200' if big else '500 + 500'}, Laplace start, tree depth <= {ref_tree_depth}"),
        ("vi meanfield", GaussianVI(family="meanfield"), "defaults"),
        ("vi fullrank", GaussianVI(family="fullrank"), "defaults"),
        ("vi meanfield kl_pq", GaussianVI(family="meanfield", divergence="kl_pq", num_mc=64, num_steps=2000),
         "num_mc 64, 2000 steps"),
        ("vi meanfield hellinger", GaussianVI(family="meanfield", divergence="hellinger", num_mc=64, num_steps=2000),
         "num_mc 64, 2000 steps"),
        ("flowvi realnvp", FlowVI(flow="realnvp", n_layers=8, iterations=3000, lr=1e-3),
         "8 RealNVP layers, hidden 64, 256 draws x 3000 iterations, lr 0.001"),
        ("flowvi iaf", FlowVI(flow="iaf", n_layers=4, hidden=128, iterations=3000, lr=1e-3),
         "4 IAF layers, hidden 128, 256 draws x 3000 iterations, lr 0.001"),
        ("laplace", Laplace(), "defaults"),
        ("pathfinder", Pathfinder(), "defaults (1 path)"),
        ("pathfinder 4 paths", Pathfinder(n_paths=4), "4 paths x 1000 draws"),
        ("gap meanfield", GAP(family="meanfield", eps_mu=0.05, eps_l=0.05, n_mc=100 if big else 500, num_steps=1000),
         f"eps 0.05 / 0.05, {100 if big else 500} draws, 1000 steps"),
        ("svgd", SVGD(), "defaults (100 particles, 1000 steps)"),
        ("ais hmc", AIS(kernel="hmc", n_samples=100 if big else 200, n_temps=100, n_steps=2, step_size=0.05,
                        base_scale=PRIOR_SCALE),
         f"{100 if big else 200} runs x 100 temps x 2 HMC moves (10 leapfrog), base = the prior"),
        ("ais hmc laplace", AIS(kernel="hmc", base="laplace", n_samples=200 if big else 500, n_temps=400, n_steps=1,
                                n_leapfrog=5, step_size=0.5),
         f"{200 if big else 500} runs x 400 temps x 1 HMC move (5 leapfrog), base = Laplace, metric H^-1"),
        ("smc hmc", SMC(n_particles=200 if big else 500, n_steps=5, step_size=0.05, base_scale=PRIOR_SCALE),
         f"{200 if big else 500} particles, 5 HMC moves per stage, base = the prior"),
        ("smc hmc laplace", SMC(n_particles=200 if big else 500, n_steps=2, n_leapfrog=5, step_size=0.5,
                                base="laplace"),
         f"{200 if big else 500} particles, 2 HMC moves (5 leapfrog) per stage, base = Laplace, metric H^-1"),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=["digits", "synthetic", "mnist01"], default="digits")
    parser.add_argument("--only", nargs="*", help="row names to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ref-warmup", type=int, default=1000)
    parser.add_argument("--ref-draws", type=int, default=1000)
    parser.add_argument("--ref-tree-depth", type=int, default=10, help="lower it where trees saturate (mnist01: 7)")
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    data = {"digits": load_digits, "synthetic": lambda: load_synthetic(seed=0),
            "mnist01": load_mnist01}[args.data]()
    target = LogisticRegression(data, prior_scale=PRIOR_SCALE)
    key = {"model": {"prior_scale": PRIOR_SCALE, "intercept": False, "init_scale": 0.1}, "data": args.data,
           "dtype": "float64", "script": "vi_comparison"}
    print("reference ...", flush=True)
    ref = reference.reference_moments(target, key, data_dir() / "reference", num_warmup=args.ref_warmup,
                                      num_draws=args.ref_draws, n_chains=4, max_tree_depth=args.ref_tree_depth, seed=12345,
                                      progress=False)
    rows = []
    for name, method, settings in methods(args.data, args.ref_tree_depth):
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", flush=True)
        g = torch.Generator().manual_seed(args.seed)
        start = time.perf_counter()
        result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
        wall = time.perf_counter() - start
        evaluation = target.evaluate(result.draws)
        metrics = {**result.metrics, **method.draw_metrics(result, evaluation), **evaluation.metrics}
        metrics.update(reference.posterior_error(result.draws.numpy(), ref))
        metrics["wall_s"] = wall
        rows.append((name, settings, metrics))
        print(f"  {name}: " + ", ".join(f"{k}={metrics[k]:.4g}" for k in ("test_accuracy", "posterior_mean_err",
                                                                          "posterior_sd_err", "wall_s")), flush=True)

    def cell(m, key, fmt="{:.3f}"):
        return fmt.format(m[key]) if key in m and math.isfinite(m[key]) else "-"

    lines = [f"# Approximations against NUTS: logistic regression on `{args.data}`", "",
             f"Command: `python experiments/vi_comparison.py {' '.join(sys.argv[1:])}` on {platform.machine()}, "
             f"torch {torch.__version__}, Python {sys.version.split()[0]}, 2 threads.  ",
             f"Posterior: {data.description}; prior N(0, {PRIOR_SCALE:g}^2 I), {target.dim} coefficients.  ",
             f"Reference: bayesx NUTS, 4 chains x ({args.ref_warmup} + {args.ref_draws}), tree depth <= "
             f"{args.ref_tree_depth}, min bulk ESS "
             f"{ref.ess_bulk_min:.0f} (cached at `{Path(ref.path).name}`; {ref.seconds:.0f} s to make now).  ",
             "Errors: mean over coordinates of |mean - reference mean| / reference sd, and the same for the sd. "
             "log p(y): the method's evidence estimate +- its standard error (importance sampling with q for VI, "
             "Laplace and Pathfinder; AIS's own weights; SMC's product of incremental means, no se). k-hat: PSIS "
             "of the weights (above 0.7: do not trust q or its evidence).", "",
             "| method | settings | test acc | test lpd | mean err | sd err | log p(y) | k-hat | grad evals | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, settings, m in rows:
        log_z = (f"{m['log_evidence']:.2f} +- {m['log_evidence_se']:.2f}" if "log_evidence_se" in m
                 and math.isfinite(m.get("log_evidence_se", float("nan"))) else cell(m, "log_evidence", "{:.2f}"))
        lines.append(f"| {name} | {settings} | {cell(m, 'test_accuracy')} | {cell(m, 'test_lpd')} | "
                     f"{cell(m, 'posterior_mean_err')} | {cell(m, 'posterior_sd_err')} | {log_z} | "
                     f"{cell(m, 'psis_khat', '{:.2f}')} | {cell(m, 'n_grad_evals', '{:.3g}')} | {m['wall_s']:.1f} |")
    out = Path(args.out) if args.out else ROOT / "results" / f"vi_comparison_{args.data}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
