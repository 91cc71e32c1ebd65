"""Benchmark: bayesx's samplers against NumPyro, nutpie and BlackJAX on the same posteriors.

Every contender samples the same posterior with the same chains, warm-up and draws, one after the
other in this process on an otherwise idle machine. Each row reports the wall time split into
compilation (JIT or model build; bayesx has none), warm-up and sampling where the tool reports it,
min bulk ESS over the coordinates (ArviZ, the same code for everyone), min-ESS per second of total
wall time, ESS per gradient, gradient evaluations, mean tree depth, max R-hat, test accuracy of the
posterior predictive (logistic posteriors), and the ratios of min-ESS/s to NumPyro's and nutpie's.

Posteriors:
  synthetic   the Deep MCMC synthetic logistic regression (500 coefficients, 550 rows), prior N(0, 10^2)
  digits      scikit-learn digits 0 vs 1 (64 coefficients, standardized), prior N(0, 10^2)
  mnist01     MNIST 0 vs 1 (784 coefficients; the vendored digits), prior N(0, 10^2)
  gauss100    a 100-d Gaussian with a random rotation and covariance eigenvalues log-spaced over
              [1e-2, 1e2] (condition number 1e4)
  funnel      Neal's funnel in 10 dimensions, v ~ N(0, 3^2), x_i | v ~ N(0, e^v), centred (every tool
              samples the same centred density; none is reparameterized)
  csv         a logistic regression on --csv PATH with label column --csv-target

    pip install -e ".[bench]"     # NumPyro, nutpie (with PyMC), BlackJAX
    python experiments/bench_samplers.py --posteriors synthetic digits gauss100 funnel
    python experiments/bench_samplers.py --posteriors csv --csv data.csv --csv-target y

A contender whose package is missing is listed as skipped, with the reason. ChEES runs its own chain
count (--chees-chains, 64) with the same draws per chain: its ESS is over all its chains.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bayesx.diagnostics.convergence import summarize
from bayesx.errors import BayesxError

ROOT = Path(__file__).resolve().parents[1]
PRIOR_SCALE = 10.0


# --- posteriors --------------------------------------------------------------------------------------------
@dataclass
class Posterior:
    name: str
    target: object  # the bayesx target
    description: str
    logistic: tuple | None = None  # (x_train, y_train) for the peers' logistic models
    cov: np.ndarray | None = None  # gauss100
    funnel_dim: int | None = None

    def accuracy(self, draws: np.ndarray) -> float:
        if self.logistic is None:
            return float("nan")
        return self.target.evaluate(torch.as_tensor(draws)).metrics["test_accuracy"]


def logistic_posterior(name: str, data, description: str) -> Posterior:
    from bayesx.targets.logreg import LogisticRegression

    target = LogisticRegression(data, prior_scale=PRIOR_SCALE)
    return Posterior(name, target, description, logistic=(np.asarray(data.x_train, np.float64),
                                                          np.asarray(data.y_train, np.float64)))


def gauss100() -> Posterior:
    from bayesx.targets.gaussian import Gaussian

    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.normal(size=(100, 100)))
    cov = rotation @ np.diag(np.logspace(-2, 2, 100)) @ rotation.T
    cov = 0.5 * (cov + cov.T)
    target = Gaussian(cov=tuple(map(tuple, cov)))
    return Posterior("gauss100", target, "100-d Gaussian, rotated, eigenvalues 1e-2..1e2", cov=cov)


def funnel() -> Posterior:
    from bayesx.targets.toy import Density

    return Posterior("funnel", Density(name="funnel"), "Neal's funnel, 10-d, centred", funnel_dim=10)


def make_posterior(name: str, args) -> Posterior:
    if name == "synthetic":
        from bayesx.data.synthetic import load_synthetic
        return logistic_posterior(name, load_synthetic(seed=0), "synthetic logistic regression, 500 coefficients")
    if name == "digits":
        from bayesx.data.digits import load_digits
        return logistic_posterior(name, load_digits(), "digits 0 vs 1, 64 coefficients")
    if name == "mnist01":
        from bayesx.data.mnist import load_mnist01
        return logistic_posterior(name, load_mnist01(), "MNIST 0 vs 1, 784 coefficients")
    if name == "gauss100":
        return gauss100()
    if name == "funnel":
        return funnel()
    if name == "csv":
        from bayesx.data.csv import load_csv
        if not args.csv:
            raise BayesxError("--posteriors csv needs --csv PATH (and --csv-target COLUMN)")
        return logistic_posterior(name, load_csv(path=args.csv, target=args.csv_target),
                                  f"logistic regression on {args.csv}")
    raise BayesxError(f"unknown posterior {name!r}")


# --- contenders ------------------------------------------------------------------------------------------
def bayesx_contender(make_method, chains_option: str | None = None):
    def run(post: Posterior, chains: int, warmup: int, draws: int, seed: int, args) -> dict:
        method = make_method(warmup, draws)
        n_chains = getattr(args, chains_option) if chains_option else chains
        gen = torch.Generator().manual_seed(seed)
        start = time.perf_counter()
        result = method.run(post.target, post.target.initial_point(n_chains, gen), gen, progress=False)
        wall = time.perf_counter() - start
        m = result.metrics
        return dict(wall=wall, compile=0.0, warmup=result.timings.get("warmup_time_s", float("nan")),
                    sampling=result.timings.get("sampling_time_s", float("nan")),
                    draws=result.draws.to(torch.float64).numpy(), grads=m["n_grad_evals"] + m["n_grad_evals_warmup"],
                    depth=m.get("tree_depth_mean", float("nan")), divergent=m["n_divergent"],
                    note=f"{n_chains} chains, kernels {result.tags.get('kernels', '?')}"
                         + (f", T {m['trajectory_length']:.2f}" if "trajectory_length" in m else ""))
    return run


def numpyro_model(post: Posterior):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    if post.logistic is not None:
        x, y = (jnp.asarray(a) for a in post.logistic)

        def model():
            beta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SCALE).expand([x.shape[1]]).to_event(1))
            numpyro.sample("y", dist.Bernoulli(logits=x @ beta), obs=y)
    elif post.cov is not None:
        cov = jnp.asarray(post.cov)

        def model():
            numpyro.sample("theta", dist.MultivariateNormal(jnp.zeros(cov.shape[0]), covariance_matrix=cov))
    else:
        def model():
            v = numpyro.sample("v", dist.Normal(0.0, 3.0))
            numpyro.sample("x", dist.Normal(0.0, jnp.exp(v / 2)).expand([post.funnel_dim - 1]).to_event(1))
    return model


def stack_funnel(samples: dict) -> np.ndarray:
    return np.concatenate([np.asarray(samples["v"])[..., None], np.asarray(samples["x"])], -1)


def numpyro_run(post: Posterior, chains: int, warmup: int, draws: int, seed: int, args) -> dict:
    import jax
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", True)
    mcmc = MCMC(NUTS(numpyro_model(post)), num_warmup=warmup, num_samples=draws, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), extra_fields=("num_steps", "diverging"))
    wall = time.perf_counter() - start
    samples = mcmc.get_samples(group_by_chain=True)
    draws_ = stack_funnel(samples) if post.funnel_dim else np.asarray(samples["theta"], np.float64)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    return dict(wall=wall, compile=float("nan"), warmup=float("nan"), sampling=float("nan"), draws=draws_,
                grads=float("nan"), grads_sampling=float(steps.sum()), depth=float(np.log2(steps + 1).mean()),
                divergent=float(np.sum(extra["diverging"])), note="float64; gradients counted in sampling only")


def pymc_model(post: Posterior):
    import pymc as pm

    with pm.Model() as model:
        if post.logistic is not None:
            x, y = post.logistic
            beta = pm.Normal("theta", 0.0, PRIOR_SCALE, shape=x.shape[1])
            pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=y)
        elif post.cov is not None:
            pm.MvNormal("theta", mu=np.zeros(post.cov.shape[0]), cov=post.cov)
        else:
            v = pm.Normal("v", 0.0, 3.0)
            pm.Normal("x", 0.0, pm.math.exp(v / 2), shape=post.funnel_dim - 1)
    return model


def nutpie_run(post: Posterior, chains: int, warmup: int, draws: int, seed: int, args) -> dict:
    import nutpie

    start = time.perf_counter()
    compiled = nutpie.compile_pymc_model(pymc_model(post))
    compile_s = time.perf_counter() - start
    trace = nutpie.sample(compiled, draws=draws, tune=warmup, chains=chains, seed=seed, cores=chains,
                          progress_bar=False)
    wall = time.perf_counter() - start
    post_ = trace.posterior
    draws_ = (np.concatenate([post_["v"].values[..., None], post_["x"].values], -1) if post.funnel_dim
              else post_["theta"].values.astype(np.float64))
    stats = trace.sample_stats
    steps = stats["n_steps"].values
    warm_steps = trace.warmup_sample_stats["n_steps"].values.sum() if "warmup_sample_stats" in trace else float("nan")
    return dict(wall=wall, compile=compile_s, warmup=float("nan"), sampling=float("nan"), draws=draws_,
                grads=float(steps.sum() + warm_steps), depth=float(stats["depth"].values.mean()),
                divergent=float(stats["diverging"].values.sum()), note="numba-compiled PyMC model, float64")


def blackjax_run(post: Posterior, chains: int, warmup: int, draws: int, seed: int, args) -> dict:
    import blackjax
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    if post.logistic is not None:
        x, y = (jnp.asarray(a) for a in post.logistic)

        def logdensity(theta):
            logits = x @ theta
            return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(theta**2) / PRIOR_SCALE**2
        dim = x.shape[1]
    elif post.cov is not None:
        precision = jnp.asarray(np.linalg.inv(post.cov))

        def logdensity(theta):
            return -0.5 * theta @ precision @ theta
        dim = post.cov.shape[0]
    else:
        def logdensity(theta):
            v, xs = theta[0], theta[1:]
            return -0.5 * (v / 3.0) ** 2 - 0.5 * jnp.sum(xs**2) * jnp.exp(-v) - 0.5 * xs.shape[0] * v
        dim = post.funnel_dim
    start = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(seed), chains)

    def one_chain(key):
        init_key, warm_key, sample_key = jax.random.split(key, 3)
        position = jax.random.uniform(init_key, (dim,), minval=-2.0, maxval=2.0)
        adapt = blackjax.window_adaptation(blackjax.nuts, logdensity)
        (state, params), _ = adapt.run(warm_key, position, num_steps=warmup)
        kernel = blackjax.nuts(logdensity, **params).step

        def body(state, key):
            state, info = kernel(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)
        _, (positions, steps, divergent) = jax.lax.scan(body, state, jax.random.split(sample_key, draws))
        return positions, steps, divergent
    positions, steps, divergent = jax.jit(jax.vmap(one_chain))(keys)
    positions.block_until_ready()
    wall = time.perf_counter() - start
    steps = np.asarray(steps)
    return dict(wall=wall, compile=float("nan"), warmup=float("nan"), sampling=float("nan"),
                draws=np.asarray(positions, np.float64), grads=float("nan"), grads_sampling=float(steps.sum()),
                depth=float(np.log2(steps + 1).mean()), divergent=float(np.asarray(divergent).sum()),
                note="window adaptation, chains vmapped, float64; gradients counted in sampling only")


def bayesx_nuts(mass: str):
    from bayesx.methods.mcmc.nuts import NUTS
    return bayesx_contender(lambda w, d: NUTS(num_warmup=w, num_draws=d, mass=mass, init="prior"))


def bayesx_chees(mass: str):
    from bayesx.methods.mcmc.chees import Chees
    return bayesx_contender(lambda w, d: Chees(num_warmup=w, num_draws=d, mass=mass), chains_option="chees_chains")


CONTENDERS = {
    "bayesx-nuts-diag": (bayesx_nuts("diag"), "bayesx NUTS, Stan's diagonal windows"),
    "bayesx-nuts-diag_grad": (bayesx_nuts("diag_grad"), "bayesx NUTS, diagonal from draws and gradients"),
    "bayesx-nuts-lowrank": (bayesx_nuts("lowrank"), "bayesx NUTS, diag_grad plus a rank-10 correction"),
    "bayesx-nuts-dense": (bayesx_nuts("dense"), "bayesx NUTS, Stan's windows, dense shrinkage metric"),
    "bayesx-chees": (bayesx_chees("diag"), "bayesx ChEES-HMC, cross-chain variances"),
    "bayesx-chees-diag_grad": (bayesx_chees("diag_grad"), "bayesx ChEES-HMC, diagonal from states and gradients"),
    "bayesx-chees-lowrank": (bayesx_chees("lowrank"), "bayesx ChEES-HMC, diag_grad plus a rank-10 correction"),
    "numpyro-nuts": (numpyro_run, "NumPyro NUTS, defaults (diag mass, target 0.8)"),
    "nutpie": (nutpie_run, "nutpie (PyMC model), defaults (gradient-based diagonal adaptation)"),
    "blackjax-nuts": (blackjax_run, "BlackJAX NUTS with window adaptation"),
}


def measure(post: Posterior, name: str, args) -> dict:
    run, description = CONTENDERS[name]
    out = run(post, args.chains, args.warmup, args.draws, args.seed, args)
    diag = summarize(out["draws"])
    grads = out["grads"] if math.isfinite(out["grads"]) else out.get("grads_sampling", float("nan"))
    return dict(description=description, wall=out["wall"], compile=out["compile"], warmup=out["warmup"],
                sampling=out["sampling"], ess=diag["ess_bulk_min"], ess_s=diag["ess_bulk_min"] / out["wall"],
                ess_grad=diag["ess_bulk_min"] / grads if grads else float("nan"), grads=grads, depth=out["depth"],
                rhat=diag.get("rhat_max", float("nan")), acc=post.accuracy(out["draws"]), div=out["divergent"],
                note=out["note"])


def fmt(value: float, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posteriors", nargs="+", default=["synthetic", "digits", "gauss100", "funnel"],
                        choices=["synthetic", "digits", "mnist01", "gauss100", "funnel", "csv"])
    parser.add_argument("--only", nargs="*", choices=list(CONTENDERS), help="run only these contenders")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--chees-chains", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None)
    parser.add_argument("--csv-target", default="y")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_samplers.md"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = ["# bench_samplers: bayesx against NumPyro, nutpie and BlackJAX on the same posteriors", "",
             f"Command: `python experiments/bench_samplers.py {' '.join(sys.argv[1:])}`".rstrip() + "  ",
             f"Machine: {platform.machine()}, {args.threads} threads, torch {torch.__version__}, Python "
             f"{platform.python_version()}; CPU only (no GPU lent: no CUDA rows).  ",
             f"{args.chains} chains (ChEES: {args.chees_chains}), {args.warmup} warm-up + {args.draws} draws each, "
             "one contender after the other. min ESS: ArviZ bulk ESS, minimum over coordinates; ESS/s over the "
             "total wall time (compilation, warm-up, sampling); '-' where a tool does not report the split.", ""]
    for name in args.posteriors:
        try:
            post = make_posterior(name, args)
        except BayesxError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        rows = {}
        for contender in args.only or list(CONTENDERS):
            print(f"{name}: {contender} ...", flush=True)
            try:
                rows[contender] = measure(post, contender, args)
            except ImportError as exc:
                rows[contender] = dict(skipped=f"skipped: {exc}; pip install -e '.[bench]'")
            print(f"  {rows[contender]}", flush=True)
        ref = {peer: rows.get(peer, {}).get("ess_s") for peer in ("numpyro-nuts", "nutpie")}
        lines += [f"## {name}: {post.description}", "",
                  "| contender | wall s | compile s | warm-up s | sampling s | min ESS | min ESS/s | x NumPyro | "
                  "x nutpie | ESS / 1000 grads | grad evals | tree depth | R-hat max | divergent | test acc | notes |",
                  "|" + "---|" * 16]
        for contender, r in rows.items():
            if "skipped" in r:
                lines.append(f"| {contender} | {r['skipped']} |" + " |" * 14)
                continue
            ratios = [fmt(r["ess_s"] / ref[p], ".2f") if ref[p] else "-" for p in ("numpyro-nuts", "nutpie")]
            lines.append(f"| {contender} | {r['wall']:.1f} | {fmt(r['compile'], '.1f')} | {fmt(r['warmup'], '.1f')} | "
                         f"{fmt(r['sampling'], '.1f')} | {r['ess']:.0f} | {r['ess_s']:.2f} | {ratios[0]} | {ratios[1]} | "
                         f"{fmt(1000 * r['ess_grad'], '.2f')} | {fmt(r['grads'], '.3g')} | {fmt(r['depth'], '.2f')} | "
                         f"{r['rhat']:.3f} | {r['div']:.0f} | {fmt(r['acc'], '.3f')} | {r['description']}; {r['note']} |")
        lines.append("")
        Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
