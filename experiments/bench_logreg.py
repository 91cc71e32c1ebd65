"""Benchmark: bayesx NUTS/HMC against NumPyro NUTS on the synthetic logistic-regression posterior.

All contenders sample the same posterior (the Deep MCMC synthetic set, seed 0: 500 features,
550 training points, prior N(0, 10^2)) with the same warm-up and draw counts, one after the other
in this process. Each reports total wall time (warm-up, compilation and sampling), min bulk ESS
over the 500 coefficients (ArviZ, same code for everyone), min-ESS per second of total wall time,
gradient evaluations and test accuracy of the posterior predictive. Ratios are against NumPyro.

    python experiments/bench_logreg.py                        # all contenders -> results/bench_logreg.md
    python experiments/bench_logreg.py --only bayesx-nuts-dense --chains 4

NumPyro comes from the optional `bench` extra (pip install -e ".[bench]"); without it the NumPyro
rows are skipped and say so.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bayesx.data.synthetic import load_synthetic
from bayesx.diagnostics.convergence import summarize
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.targets.logreg import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]


def bayesx_contender(method_factory, dtype):
    def run(data, chains, warmup, draws, seed):
        target = LogisticRegression(data, prior_scale=10.0, dtype=dtype)
        gen = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        result = method_factory(warmup, draws).run(target, target.initial_point(chains, gen), gen, progress=False)
        wall = time.perf_counter() - start
        samples = result.draws.to(torch.float64)
        return dict(wall=wall, draws=samples.numpy(), grads=result.metrics["n_grad_evals"]
                    + result.metrics["n_grad_evals_warmup"], divergent=result.metrics["n_divergent"],
                    step=result.metrics["step_size"], extra=f"tree depth {result.metrics.get('tree_depth_mean', 0):.1f}"
                    if "tree_depth_mean" in result.metrics else "")
    return run


def numpyro_contender(chain_method="sequential"):
    def run(data, chains, warmup, draws, seed):
        import jax
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import MCMC
        from numpyro.infer import NUTS as NumpyroNUTS

        x, y = jnp.asarray(data.x_train, dtype=jnp.float32), jnp.asarray(data.y_train, dtype=jnp.float32)

        def model(x, y):
            beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
            numpyro.sample("y", dist.Bernoulli(logits=x @ beta), obs=y)

        start = time.perf_counter()
        mcmc = MCMC(NumpyroNUTS(model), num_warmup=warmup, num_samples=draws, num_chains=chains,
                    chain_method=chain_method, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), x, y, extra_fields=("num_steps", "diverging"))
        samples = np.asarray(mcmc.get_samples(group_by_chain=True)["beta"], dtype=np.float64)
        wall = time.perf_counter() - start
        extra = mcmc.get_extra_fields(group_by_chain=True)
        steps = np.asarray(extra["num_steps"])
        return dict(wall=wall, draws=samples, grads=float(steps.sum()), divergent=float(np.sum(extra["diverging"])),
                    step=float("nan"), extra=f"mean steps/draw {steps.mean():.0f} (sampling only), float32")
    return run


CONTENDERS = {
    "numpyro-nuts": (numpyro_contender(), "NumPyro NUTS, defaults (diag mass, target 0.8), JAX float32"),
    "numpyro-nuts-vectorized": (numpyro_contender("vectorized"),
                                "NumPyro NUTS, defaults, chains vectorized with vmap, JAX float32"),
    "bayesx-nuts-diag": (bayesx_contender(lambda w, d: NUTS(num_warmup=w, num_draws=d, mass="diag", init="prior"),
                                          torch.float64), "bayesx NUTS, diag mass, prior init (NumPyro-like), float64"),
    "bayesx-nuts-diag-f32": (bayesx_contender(lambda w, d: NUTS(num_warmup=w, num_draws=d, mass="diag",
                                                                init="laplace"), torch.float32),
                             "bayesx NUTS, diag mass, Laplace start, float32"),
    "bayesx-nuts-dense": (bayesx_contender(lambda w, d: NUTS(num_warmup=w, num_draws=d, mass="dense", init="laplace"),
                                           torch.float64), "bayesx NUTS, dense mass, Laplace start, float64"),
    "bayesx-nuts-dense-f32": (bayesx_contender(lambda w, d: NUTS(num_warmup=w, num_draws=d, mass="dense",
                                                                 init="laplace"), torch.float32),
                              "bayesx NUTS, dense mass, Laplace start, float32"),
    "bayesx-hmc": (bayesx_contender(lambda w, d: HMC(num_warmup=w, num_draws=d, num_steps=50, mass="diag",
                                                     init="laplace"), torch.float64),
                   "bayesx HMC (50 steps), diag mass, Laplace start, float64 (the default job)"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", choices=list(CONTENDERS), help="run only these contenders")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_logreg.md"))
    args = parser.parse_args()

    data = load_synthetic(seed=0)
    evaluator = LogisticRegression(data)
    rows = []
    for name in args.only or list(CONTENDERS):
        run, description = CONTENDERS[name]
        print(f"running {name} ...", flush=True)
        try:
            out = run(data, args.chains, args.warmup, args.draws, args.seed)
        except ImportError as exc:
            rows.append((name, description, None, f"skipped: {exc}; pip install -e '.[bench]'"))
            continue
        diag = summarize(out["draws"])
        acc = evaluator.evaluate(torch.as_tensor(out["draws"])).metrics["test_accuracy"]
        row = dict(wall=out["wall"], ess=diag["ess_bulk_min"], rhat=diag.get("rhat_max", float("nan")),
                   ess_s=diag["ess_bulk_min"] / out["wall"], grads=out["grads"], acc=acc,
                   div=out["divergent"], extra=out["extra"])
        print(f"  {name}: {row}", flush=True)
        rows.append((name, description, row, ""))

    ref = next((r[2] for r in rows if r[0].startswith("numpyro") and r[2]), None)  # the first NumPyro row
    lines = [
        "# bench_logreg: NUTS on the synthetic logistic-regression posterior",
        "",
        f"Command: `python experiments/bench_logreg.py {' '.join(sys.argv[1:])}`".rstrip() + "  ",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, Python {platform.python_version()}.  ",
        f"Posterior: synthetic data seed 0 (500 features, 550 train / 150 test), prior N(0, 10^2); "
        f"{args.chains} chain(s), {args.warmup} warm-up + {args.draws} draws each.  ",
        "ESS: ArviZ bulk ESS, minimum over the 500 coefficients; ESS/s uses the total wall time "
        "(warm-up, JIT compilation and sampling).",
        "",
        "| contender | wall s | min ESS | min ESS/s | x NumPyro | R-hat max | grad evals | divergent | test acc | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, description, row, note in rows:
        if row is None:
            lines.append(f"| {name} | - | - | - | - | - | - | - | - | {note} |")
            continue
        ratio = f"{row['ess_s'] / ref['ess_s']:.2f}" if ref else "-"
        rhat = f"{row['rhat']:.3f}" if row["rhat"] == row["rhat"] else "- (1 chain)"
        lines.append(f"| {name} | {row['wall']:.1f} | {row['ess']:.0f} | {row['ess_s']:.2f} | {ratio} | {rhat} | "
                     f"{row['grads']:.0f} | {row['div']:.0f} | {row['acc']:.3f} | {description}; {row['extra']} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
