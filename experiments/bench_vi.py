"""Benchmark: Gaussian VI against NumPyro's and Pyro's SVI on the same logistic-regression posterior,
and the cost of AIS's evidence.

    python experiments/bench_vi.py               # -> results/bench_vi.md
    pip install -e ".[bench]"                    # NumPyro and Pyro rows (skipped, and said so, without them)

VI rows: mean-field (AutoNormal in NumPyro / Pyro) and full-rank (AutoMultivariateNormal) Gaussians
with the same number of Monte Carlo draws per step, on the synthetic set (500 features, 550 rows,
prior N(0, 10^2)): bayesx with its defaults (lr 0.1 halved at plateaus) and at the peers' constant
Adam step, the peers at that step (and NumPyro at 0.1). Time to ELBO: wall seconds until the windowed
ELBO (mean over 100 steps) first comes within 1% of |final ELBO| of the run's own final value, and
the final ELBO itself (higher is better). The goal set for bayesx: mean-field VI within 1% of its
final ELBO in under 2 s here.

AIS rows: log evidence on `digits` with HMC moves, from the prior and from the Laplace approximation,
the number of AIS runs it takes to bring the standard error under 0.1, and the time.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bayesx.data.digits import load_digits
from bayesx.data.synthetic import load_synthetic
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.ais import AIS
from bayesx.methods.vi.gaussian import GaussianVI
from bayesx.targets.logreg import LogisticRegression

ROOT = Path(__file__).resolve().parents[1]
STEPS, LR, NUM_MC, WINDOW = 5000, 0.02, 8, 100


def time_to_within(trace: list[tuple[int, float]], clock: list[tuple[int, float]], final: float, share=0.01):
    seconds = dict(clock)
    for step, value in trace:
        if abs(value - final) <= share * abs(final):
            return seconds[step]
    return float("nan")


def windowed_run(step, start: float) -> dict:
    """STEPS calls of ``step()`` (returning the loss, -ELBO), the ELBO averaged per WINDOW steps with
    the seconds since ``start`` at each window; the peers' loop."""
    trace, clock, losses = [], [], []
    for index in range(1, STEPS + 1):
        losses.append(step())
        if index % WINDOW == 0:
            trace.append((index, -float(np.mean(losses))))
            clock.append((index, time.perf_counter() - start))
            losses = []
    final = trace[-1][1]
    return dict(wall=time.perf_counter() - start, final=final, to_1pct=time_to_within(trace, clock, final), steps=STEPS)


def bayesx_vi(family: str, **options):
    """bayesx method=vi with its defaults (lr 0.1, halved at plateaus, stopping on its own), or with
    ``options`` such as the peers' constant step (lr=LR, tol=0: STEPS steps)."""
    def run(data):
        target = LogisticRegression(data, prior_scale=10.0)
        method = GaussianVI(family=family, num_mc=NUM_MC, check_every=WINDOW, **options)
        g = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
        wall = time.perf_counter() - start
        trace, clock = result.traces["elbo"], result.traces["fit_elapsed_s"]
        final = trace[-1][1]
        return dict(wall=wall, final=final, to_1pct=time_to_within(trace, clock, final), steps=trace[-1][0])
    return run


def numpyro_svi(guide_name: str, lr: float = LR):
    def run(data):
        import jax
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import SVI, Trace_ELBO, autoguide
        from numpyro.optim import Adam

        x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)

        def model(x, y):
            beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
            numpyro.sample("y", dist.Bernoulli(logits=x @ beta), obs=y)

        guide = getattr(autoguide, guide_name)(model)
        svi = SVI(model, guide, Adam(lr), Trace_ELBO(num_particles=NUM_MC))
        start = time.perf_counter()
        state = svi.init(jax.random.PRNGKey(0), x, y)
        update = jax.jit(svi.update)

        def step():
            nonlocal state
            state, loss = update(state, x, y)
            return float(loss)

        return windowed_run(step, start)
    return run


def pyro_svi(guide_name: str):
    def run(data):
        import pyro
        import pyro.distributions as dist
        from pyro.infer import SVI, Trace_ELBO, autoguide
        from pyro.optim import Adam

        x = torch.as_tensor(data.x_train, dtype=torch.float32)
        y = torch.as_tensor(data.y_train, dtype=torch.float32)

        def model(x, y):
            beta = pyro.sample("beta", dist.Normal(0.0, 10.0).expand([x.shape[1]]).to_event(1))
            pyro.sample("y", dist.Bernoulli(logits=beta @ x.T).to_event(1), obs=y)  # beta may carry a particle dim

        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        guide = getattr(autoguide, guide_name)(model)
        svi = SVI(model, guide, Adam({"lr": LR}), Trace_ELBO(num_particles=NUM_MC, vectorize_particles=True))
        return windowed_run(lambda: svi.step(x, y), time.perf_counter())
    return run


CONTENDERS = {
    "bayesx-vi-meanfield": (bayesx_vi("meanfield"), "bayesx method=vi family=meanfield, defaults: lr 0.1 halved at "
                            "plateaus, stops on its own; float64"),
    "bayesx-vi-meanfield-lr0.02": (bayesx_vi("meanfield", lr=LR, tol=0.0, num_steps=STEPS),
                                   f"bayesx method=vi family=meanfield, the peers' constant lr {LR}, {STEPS} steps; float64"),
    "numpyro-autonormal": (numpyro_svi("AutoNormal"), "NumPyro SVI, AutoNormal, JAX (jit), float32"),
    "numpyro-autonormal-lr0.1": (numpyro_svi("AutoNormal", lr=0.1), "NumPyro SVI, AutoNormal, constant lr 0.1, "
                                 "JAX (jit), float32"),
    "pyro-autonormal": (pyro_svi("AutoNormal"), "Pyro SVI, AutoNormal, float32"),
    "bayesx-vi-fullrank": (bayesx_vi("fullrank"), "bayesx method=vi family=fullrank, defaults; float64"),
    "bayesx-vi-fullrank-lr0.02": (bayesx_vi("fullrank", lr=LR, tol=0.0, num_steps=STEPS),
                                  f"bayesx method=vi family=fullrank, constant lr {LR}, {STEPS} steps; float64"),
    "numpyro-automvn": (numpyro_svi("AutoMultivariateNormal"), "NumPyro SVI, AutoMultivariateNormal, JAX (jit), "
                        "float32"),
    "pyro-automvn": (pyro_svi("AutoMultivariateNormal"), "Pyro SVI, AutoMultivariateNormal, float32"),
}


AIS_PATHS = {
    "prior": ("from the prior N(0, 10^2 I), HMC (10 leapfrog steps) in the identity metric, 200 temperatures x 2 moves",
              dict(base="gaussian", n_temps=200, n_steps=2, step_size=0.05)),
    "laplace": ("from the Laplace approximation N(mode, H^-1), HMC (5 leapfrog steps) in the metric H^-1, "
                "400 temperatures x 1 move", dict(base="laplace", n_temps=400, n_steps=1, n_leapfrog=5, step_size=0.5)),
}


def ais_evidence(options: dict, target_se: float = 0.1):
    """AIS runs (doubling from 100) until log_evidence_se < target_se on digits; returns the rows tried."""
    target = LogisticRegression(load_digits(), prior_scale=10.0)
    rows = []
    for n in (100, 200, 400, 800, 1600):
        method = AIS(kernel="hmc", n_samples=n, **options)
        g = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        m = method.infer(target, RunInputs(None, g, progress=False)).metrics
        rows.append((n, m["log_evidence"], m["log_evidence_se"], m["psis_khat"], m["weights_ess"],
                     time.perf_counter() - start))
        if m["log_evidence_se"] < target_se or rows[-1][-1] > 120:
            break
    return rows


def cost_per_gradient():
    """Seconds per target gradient of SVGD (its kernel work included) and AIS (HMC moves) on digits and
    synthetic, from their own gradient counts."""
    from bayesx.methods.vi.svgd import SVGD

    rows = []
    for name, data in (("digits", load_digits()), ("synthetic", load_synthetic(seed=0))):
        target = LogisticRegression(data, prior_scale=10.0)
        for label, method in (("svgd, 100 particles x 500 steps", SVGD(num_steps=500)),
                              ("ais, 200 runs x 100 temperatures x 2 HMC moves", AIS(kernel="hmc", n_samples=200,
                               n_temps=100, n_steps=2, step_size=0.05))):
            g = torch.Generator().manual_seed(0)
            start = time.perf_counter()
            result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
            fit = result.timings["fit_time_s"]
            grads = result.metrics["n_grad_evals"]
            rows.append((name, label, grads, fit, 1e6 * fit / grads, time.perf_counter() - start))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=list(CONTENDERS))
    parser.add_argument("--no-ais", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_vi.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    data = load_synthetic(seed=0)
    rows = []
    for name in args.only or list(CONTENDERS):
        run, description = CONTENDERS[name]
        print(f"running {name} ...", flush=True)
        try:
            rows.append((name, description, run(data), ""))
        except ImportError as exc:
            rows.append((name, description, None, f"skipped: {exc}; pip install -e '.[bench]'"))
        except (RuntimeError, ValueError) as exc:  # a contender that diverges is a result, reported as such
            rows.append((name, description, None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"))
        print(f"  {rows[-1]}", flush=True)
    lines = ["# bench_vi: Gaussian VI against NumPyro and Pyro SVI; AIS evidence cost", "",
             f"Command: `python experiments/bench_vi.py` on {platform.machine()}, 2 torch threads, torch "
             f"{torch.__version__}, Python {sys.version.split()[0]}.  ",
             f"Posterior: synthetic (500 features, 550 rows), prior N(0, 10^2). Adam lr {LR}, {NUM_MC} draws per step, "
             f"{STEPS} steps, ELBO windows of {WINDOW} steps.", "",
             "| contender | final ELBO | s to within 1% of it | steps | total s | notes |", "|---|---|---|---|---|---|"]
    for name, description, row, note in rows:
        if row is None:
            lines.append(f"| {name} | - | - | - | - | {description}; {note} |")
        else:
            lines.append(f"| {name} | {row['final']:.1f} | {row['to_1pct']:.2f} | {row['steps']} | {row['wall']:.1f} | "
                         f"{description} |")
    if not args.no_ais:
        for name, (description, options) in AIS_PATHS.items():
            print(f"AIS {name} ...", flush=True)
            lines += ["", f"## AIS log evidence on digits, {description}", "",
                      "| AIS runs | log p(y) | se | k-hat | weights ESS | s |", "|---|---|---|---|---|---|"]
            lines += [f"| {n} | {lz:.2f} | {se:.3f} | {k:.2f} | {ess:.0f} | {s:.1f} |"
                      for n, lz, se, k, ess, s in ais_evidence(options)]
        print("cost per gradient ...", flush=True)
        lines += ["", "## SVGD and AIS: cost per gradient of the target", "",
                  "| data | method | gradients | fit s | us per gradient |", "|---|---|---|---|---|"]
        lines += [f"| {d} | {label} | {grads:.3g} | {fit:.1f} | {per:.1f} |" for d, label, grads, fit, per, _ in
                  cost_per_gradient()]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
