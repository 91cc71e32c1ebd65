"""Benchmarks against peers: bayesx's samplers beside NumPyro, nutpie, BlackJAX and Pyro, in one store.

bayesx's side is a sweep through the runner (``bayesx run -m ...`` in a subprocess: every contender an
MLflow run under the sweep's parent). Each peer samples the same posterior (read from the same bayesx
config: ``model=logreg data=digits``, ``model=gaussian ...`` or ``model=density model.name=funnel``)
with the same chains, warm-up and draws; its draws are summarized by the code bayesx uses for its own
runs (ArviZ bulk ESS, R-hat: bayesx.diagnostics.convergence), and it is logged into the same
experiment as a child run of the same parent, tagged ``peer=<name>``. So one command,

    bayesx report --experiment bench_samplers --out results/bench_samplers.md

tabulates bayesx and its peers side by side (and ``bayesx compare``, the MLflow UI show them too).

    pip install -e ".[bench]"       # NumPyro, nutpie (with PyMC), BlackJAX, Pyro; a missing one is skipped
    python experiments/peers.py --posterior "model=logreg data=digits" \\
        --bayesx "method=nuts method.mass=diag,dense method.init=prior" --peers numpyro-nuts nutpie blackjax-nuts
    python experiments/peers.py --posterior "model=logreg data=synthetic" --peers numpyro-svi-meanfield pyro-svi-meanfield \\
        --bayesx "method=vi method.family=meanfield"

The sampler peers (numpyro-nuts, nutpie, blackjax-nuts) start from uniform(-2, 2) draws and adapt with
their own defaults; the SVI peers (AutoNormal / AutoMultivariateNormal guides, Adam, --lr) report their
final ELBO (mean of the last 100 steps) and wall time.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bayesx.store.record import RunRecord, RunStart, Summary

ROOT = Path(__file__).resolve().parents[1]
SAMPLER_METRICS = ("ess_bulk_min", "ess_bulk_min_per_s", "ess_bulk_min_per_grad", "rhat_max", "n_grad_evals",
                   "n_divergent", "tree_depth_mean", "test_accuracy", "ref_mean_err_max", "ref_sd_err_max",
                   "ref_w1_mean", "wall_time_s")
SVI_METRICS = ("elbo_final", "n_steps", "wall_time_s")


# --- the posterior, read from a bayesx config -----------------------------------------------------
@dataclass
class Posterior:
    """What a peer needs to write the same density: a logistic regression's arrays and prior scale, a
    Gaussian's covariance, or the funnel's dimension; ``overrides`` give bayesx the same posterior."""

    overrides: list[str]
    model: str
    data: str
    logistic: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # x, y, x_test, y_test
    prior_scale: float = 10.0
    cov: np.ndarray | None = None
    funnel_dim: int | None = None
    posteriordb: str | None = None  # a posterior of bayesx's posteriordb suite, by name

    @property
    def suite(self):
        """The posteriordb posterior (bayesx.targets.posteriordb), or None."""
        from bayesx.targets.posteriordb import load

        return load(self.posteriordb) if self.posteriordb else None

    @property
    def dim(self) -> int:
        if self.logistic is not None:
            return self.logistic[0].shape[1]
        if self.posteriordb:
            return self.suite.dim
        return self.cov.shape[0] if self.cov is not None else int(self.funnel_dim)

    def test_accuracy(self, draws: np.ndarray) -> float | None:
        """Accuracy of the posterior predictive mean (logistic posteriors), as bayesx's logreg reports it."""
        if self.logistic is None:
            return None
        _, _, x_test, y_test = self.logistic
        flat = draws.reshape(-1, draws.shape[-1])
        p = (1.0 / (1.0 + np.exp(-(x_test @ flat.T)))).mean(1)
        return float(((p > 0.5) == (y_test > 0.5)).mean())

    def reference_errors(self, draws: np.ndarray) -> dict[str, float]:
        """posteriordb posteriors: the gold-standard errors of (unconstrained) draws, as bayesx's runs log them."""
        if not self.posteriordb:
            return {}
        from bayesx.targets.posteriordb.target import reference_errors

        suite = self.suite
        flat = draws.reshape(-1, draws.shape[-1])
        params = np.array([suite.constrain(np, q, suite.data) for q in flat])
        return reference_errors(params, suite.reference.astype(np.float64))


def posterior_from(overrides: list[str]) -> Posterior:
    from hydra.utils import instantiate

    from bayesx.cli.config import compose
    from bayesx.errors import BayesxError

    cfg = compose(overrides)
    model = str(cfg.model._target_).rsplit(".", 1)[-1]
    choice = next((o.split("=", 1)[1] for o in overrides if o.startswith("data=")), "synthetic")
    if model == "LogisticRegression":
        if cfg.model.intercept:
            raise BayesxError("peers.py: model.intercept=true is not written for the peers; leave it false")
        data = instantiate(cfg.data, _convert_="all")
        arrays = tuple(np.asarray(getattr(data, k), np.float64) for k in ("x_train", "y_train", "x_test", "y_test"))
        return Posterior(overrides, "logreg", choice, arrays, float(cfg.model.prior_scale))
    if model == "Gaussian":
        from bayesx.targets.gaussian import Gaussian

        options = {k: v for k, v in cfg.model.items() if k != "_target_"}
        return Posterior(overrides, "gaussian", "none", cov=Gaussian(**options).cov.double().numpy())
    if model == "Density" and cfg.model.name == "funnel":
        return Posterior(overrides, "density", "none", funnel_dim=10)
    if model == "PosteriorDB":
        return Posterior(overrides, "posteriordb", str(cfg.model.name), posteriordb=str(cfg.model.name))
    raise BayesxError(f"peers.py: no peer writes {overrides}; use model=logreg (any data), model=gaussian, "
                      "model=density model.name=funnel or model=posteriordb model.name=<posterior>")


# --- the peers ------------------------------------------------------------------------------------
@dataclass
class PeerRun:
    """What a peer returns: draws (chains, draws, dim) or a final ELBO, its wall time and counters."""

    wall: float
    draws: np.ndarray | None = None
    grads: float | None = None
    depth: float | None = None
    divergent: float | None = None
    elbo_final: float | None = None
    n_steps: int | None = None
    note: str = ""


def jax_logdensity(post: Posterior):
    import jax.numpy as jnp

    if post.logistic is not None:
        x, y = (jnp.asarray(a) for a in post.logistic[:2])
        scale = post.prior_scale

        def logdensity(theta):
            logits = x @ theta
            return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(theta**2) / scale**2
    elif post.posteriordb:  # the suite's xp transcription, written for numpy and jax.numpy alike
        suite = post.suite
        data = {k: jnp.asarray(v) for k, v in suite.data.items()}

        def logdensity(theta):
            return suite.log_density(jnp, theta, data)
    elif post.cov is not None:
        precision = jnp.asarray(np.linalg.inv(post.cov))

        def logdensity(theta):
            return -0.5 * theta @ precision @ theta
    else:
        def logdensity(theta):  # Neal's funnel, centred: v ~ N(0, 3^2), x_i | v ~ N(0, e^v)
            v, xs = theta[0], theta[1:]
            return -0.5 * (v / 3.0) ** 2 - 0.5 * jnp.sum(xs**2) * jnp.exp(-v) - 0.5 * xs.shape[0] * v
    return logdensity


def numpyro_nuts(post: Posterior, args) -> PeerRun:
    import jax
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", args.jax_dtype == "float64")
    logdensity = jax_logdensity(post)
    mcmc = MCMC(NUTS(potential_fn=lambda theta: -logdensity(theta)), num_warmup=args.warmup, num_samples=args.draws,
                num_chains=args.chains, chain_method="sequential", progress_bar=False)
    init = np.random.default_rng(args.seed).uniform(-2, 2, (args.chains, post.dim))
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(args.seed), init_params=init, extra_fields=("num_steps", "diverging"))
    wall = time.perf_counter() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    return PeerRun(wall, np.asarray(mcmc.get_samples(group_by_chain=True), np.float64), float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.sum(extra["diverging"])),
                   note=f"defaults (diag mass, target 0.8), {args.jax_dtype}; gradients of sampling only")


def nutpie_sampler(post: Posterior, args) -> PeerRun:
    """nutpie on a PyMC model of the posterior (posteriordb: experiments/pymc_models.py), compile included."""
    import pymc as pm
    from pymc_models import nutpie_run, posteriordb_model

    if post.posteriordb:
        model = posteriordb_model(post.suite)
    else:
        with pm.Model() as model:
            if post.logistic is not None:
                x, y = post.logistic[:2]
                beta = pm.Normal("theta", 0.0, post.prior_scale, shape=x.shape[1])
                pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=y)
            elif post.cov is not None:
                pm.MvNormal("theta", mu=np.zeros(post.dim), cov=post.cov)
            else:
                v = pm.Normal("v", 0.0, 3.0)
                pm.Normal("x", 0.0, pm.math.exp(v / 2), shape=post.dim - 1)
    out = nutpie_run(model, ["v", "x"] if post.funnel_dim else ["theta"], args.chains, args.seed, draws=args.draws,
                     tune=args.warmup, cores=args.chains)
    return PeerRun(out.wall, out.draws, out.grads_sampling, out.depth, out.divergent,
                   note="numba-compiled PyMC model, float64, compile included")


def blackjax_nuts(post: Posterior, args) -> PeerRun:
    import blackjax
    import jax

    jax.config.update("jax_enable_x64", True)
    logdensity = jax_logdensity(post)

    def one_chain(key):
        init_key, warm_key, sample_key = jax.random.split(key, 3)
        position = jax.random.uniform(init_key, (post.dim,), minval=-2.0, maxval=2.0)
        (state, params), _ = blackjax.window_adaptation(blackjax.nuts, logdensity).run(warm_key, position,
                                                                                       num_steps=args.warmup)
        kernel = blackjax.nuts(logdensity, **params).step

        def body(state, key):
            state, info = kernel(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)
        return jax.lax.scan(body, state, jax.random.split(sample_key, args.draws))[1]

    start = time.perf_counter()
    positions, steps, divergent = jax.jit(jax.vmap(one_chain))(jax.random.split(jax.random.PRNGKey(args.seed),
                                                                                 args.chains))
    positions.block_until_ready()
    steps = np.asarray(steps)
    return PeerRun(time.perf_counter() - start, np.asarray(positions, np.float64), float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.asarray(divergent).sum()),
                   note="window adaptation, chains vmapped, float64, jit included; gradients of sampling only")


def windowed_elbo(step: Callable[[], float], steps: int) -> tuple[float, int]:
    """Run ``steps`` SVI steps (each returns the loss, -ELBO); the final ELBO is the mean of the last 100."""
    losses = [step() for _ in range(steps)]
    return -float(np.mean(losses[-100:])), steps


def numpyro_svi(guide: str):
    def run(post: Posterior, args) -> PeerRun:
        import jax
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import SVI, Trace_ELBO, autoguide
        from numpyro.optim import Adam

        if post.logistic is None:
            raise NotImplementedError("the SVI peers are written for logistic regressions")
        x, y = (jnp.asarray(a) for a in post.logistic[:2])

        def model(x, y):
            beta = numpyro.sample("beta", dist.Normal(0.0, post.prior_scale).expand([x.shape[1]]).to_event(1))
            numpyro.sample("y", dist.Bernoulli(logits=x @ beta), obs=y)

        svi = SVI(model, getattr(autoguide, guide)(model), Adam(args.lr), Trace_ELBO(num_particles=args.num_mc))
        start = time.perf_counter()
        state = svi.init(jax.random.PRNGKey(args.seed), x, y)
        update = jax.jit(svi.update)

        def step():
            nonlocal state
            state, loss = update(state, x, y)
            return float(loss)
        elbo, n = windowed_elbo(step, args.svi_steps)
        return PeerRun(time.perf_counter() - start, elbo_final=elbo, n_steps=n,
                       note=f"NumPyro SVI {guide}, Adam lr {args.lr}, {args.num_mc} draws per step, float32, jit")
    return run


def pyro_svi(guide: str):
    def run(post: Posterior, args) -> PeerRun:
        import pyro
        import pyro.distributions as dist
        import torch
        from pyro.infer import SVI, Trace_ELBO, autoguide
        from pyro.optim import Adam

        if post.logistic is None:
            raise NotImplementedError("the SVI peers are written for logistic regressions")
        x, y = (torch.as_tensor(a, dtype=torch.float32) for a in post.logistic[:2])

        def model(x, y):
            beta = pyro.sample("beta", dist.Normal(0.0, post.prior_scale).expand([x.shape[1]]).to_event(1))
            pyro.sample("y", dist.Bernoulli(logits=beta @ x.T).to_event(1), obs=y)  # beta may carry a particle dim

        pyro.clear_param_store()
        pyro.set_rng_seed(args.seed)
        svi = SVI(model, getattr(autoguide, guide)(model), Adam({"lr": args.lr}),
                  Trace_ELBO(num_particles=args.num_mc, vectorize_particles=True))
        start = time.perf_counter()
        elbo, n = windowed_elbo(lambda: svi.step(x, y), args.svi_steps)
        return PeerRun(time.perf_counter() - start, elbo_final=elbo, n_steps=n,
                       note=f"Pyro SVI {guide}, Adam lr {args.lr}, {args.num_mc} draws per step, float32")
    return run


PEERS: dict[str, Callable[[Posterior, argparse.Namespace], PeerRun]] = {
    "numpyro-nuts": numpyro_nuts,
    "nutpie": nutpie_sampler,
    "blackjax-nuts": blackjax_nuts,
    "numpyro-svi-meanfield": numpyro_svi("AutoNormal"),
    "numpyro-svi-fullrank": numpyro_svi("AutoMultivariateNormal"),
    "pyro-svi-meanfield": pyro_svi("AutoNormal"),
    "pyro-svi-fullrank": pyro_svi("AutoMultivariateNormal"),
}


# --- measuring and logging ------------------------------------------------------------------------
def peer_metrics(post: Posterior, out: PeerRun) -> dict[str, float]:
    """A peer's metrics under bayesx's names: min bulk ESS and its rate per second and per gradient, R-hat,
    counters, test accuracy for samplers; the final ELBO for SVI."""
    from bayesx.diagnostics.convergence import summarize

    metrics: dict[str, float | None] = {"wall_time_s": out.wall, "elbo_final": out.elbo_final, "n_steps": out.n_steps}
    if out.draws is not None:
        summary = summarize(out.draws)
        ess = summary.get("ess_bulk_min")
        metrics.update(summary)
        metrics.update({"ess_bulk_min_per_s": ess / out.wall if ess is not None else None,
                        "ess_bulk_min_per_grad": ess / out.grads if ess is not None and out.grads else None,
                        "n_grad_evals": out.grads, "n_divergent": out.divergent, "tree_depth_mean": out.depth,
                        "test_accuracy": post.test_accuracy(out.draws), **post.reference_errors(out.draws)})
    return {k: float(v) for k, v in metrics.items() if v is not None}


def log_peer(tracker, parent_id: str, name: str, post: Posterior, out: PeerRun, settings: dict[str, object]) -> str:
    """Record a peer's run as a child of the sweep ``parent_id``, tagged ``peer=<name>``; returns its id."""
    metrics = peer_metrics(post, out)
    keys = SAMPLER_METRICS if out.draws is not None else SVI_METRICS
    tags = {"peer": name, "method": name, "model": post.model, "data": post.data, "seed": str(settings["seed"]),
            "n_chains": str(settings["chains"]), "family": "peer", "peer_note": out.note}
    params = {"posterior": " ".join(post.overrides), **settings}
    start = RunStart(f"{name}-{post.model}-{post.data}-seed{settings['seed']}", tags, params,
                     "".join(f"{k}: {v}\n" for k, v in params.items()), parent_id)
    with tracker.run(start) as run:
        run.store(RunRecord("FINISHED", metrics, summary=Summary(compared=tuple(k for k in keys if k in metrics))))
        return run.run_id


def bayesx_sweep(post: Posterior, bayesx: list[str], args) -> str:
    """Run bayesx's contenders as one sweep through the runner; returns the sweep's parent run id."""
    from bayesx.reports.report import select_sweep
    from bayesx.store.tracking import search_runs

    mcmc = [f"++method.num_warmup={args.warmup}", f"++method.num_draws={args.draws}"] if args.mcmc_lengths else []
    command = [sys.executable, "-m", "bayesx", "run", "-m", *post.overrides, *bayesx, *mcmc, f"seed={args.seed}",
               f"n_chains={args.chains}", f"experiment_name={args.experiment}", f"tracking.uri={args.tracking_uri}",
               "save_draws=false"]
    print("$ " + shlex.join(command[2:]), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)
    return select_sweep(search_runs(args.tracking_uri, args.experiment), args.tracking_uri).parent_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posterior", default="model=logreg data=digits", help="bayesx overrides of the posterior")
    parser.add_argument("--bayesx", default="method=nuts", help="bayesx's contenders: sweep overrides (-m), '' for none")
    parser.add_argument("--peers", nargs="*", default=["numpyro-nuts", "nutpie", "blackjax-nuts"], choices=list(PEERS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--no-mcmc-lengths", dest="mcmc_lengths", action="store_false",
                        help="keep bayesx's own num_warmup/num_draws (for approximations)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jax-dtype", choices=["float64", "float32"], default="float64",
                        help="NumPyro NUTS's precision (float32: JAX's own default, x64 off)")
    parser.add_argument("--lr", type=float, default=0.02, help="SVI peers: Adam's step")
    parser.add_argument("--num-mc", type=int, default=8, help="SVI peers: draws per step")
    parser.add_argument("--svi-steps", type=int, default=5000)
    parser.add_argument("--experiment", default="bench_samplers", help="MLflow experiment")
    parser.add_argument("--tracking-uri", help="default: the tracking config / MLFLOW_TRACKING_URI")
    args = parser.parse_args(argv)
    from bayesx.cli.config import compose
    from bayesx.errors import BayesxError
    from bayesx.store.tracking import Tracker

    try:
        args.tracking_uri = args.tracking_uri or str(compose([]).tracking.uri)
        post = posterior_from(shlex.split(args.posterior))
        tracker = Tracker(args.tracking_uri, args.experiment)
        bayesx = shlex.split(args.bayesx)
        if bayesx:
            parent = bayesx_sweep(post, bayesx, args)
        else:
            parent = tracker.start_parent(f"peers {args.posterior}", {"sweep": "parent", "sweep_overrides": args.posterior})
        settings = {"chains": args.chains, "warmup": args.warmup, "draws": args.draws, "seed": args.seed}
        for name in args.peers:
            try:
                out = PEERS[name](post, args)
            except (ImportError, NotImplementedError) as exc:
                print(f"{name}: skipped ({exc}; pip install -e '.[bench]')", flush=True)
                continue
            run_id = log_peer(tracker, parent, name, post, out, settings)
            print(f"{name}: {out.wall:.1f} s, run {run_id[:8]}", flush=True)
        if not bayesx:
            tracker.terminate(parent, "FINISHED")
    except BayesxError as exc:
        print(f"peers.py: error: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError:
        print("peers.py: error: the bayesx sweep failed (see above)", file=sys.stderr)
        return 1
    print(f"bayesx report --uri {args.tracking_uri} --parent {parent[:8]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
