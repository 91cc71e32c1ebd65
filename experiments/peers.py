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
SAMPLER_METRICS = ("ess_bulk_min", "ess_bulk_min_per_s", "ess_bulk_min_per_grad", "grads_per_ess", "rhat_max",
                   "n_grad_evals", "n_grad_evals_warmup", "n_divergent", "tree_depth_mean", "test_accuracy",
                   "ref_mean_err_max", "ref_sd_err_max", "ref_w1_mean", "wall_time_s", "sampler_time_s",
                   "ess_bulk_min_per_sampler_s", "command_time_s")
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
        return reference_errors(suite.compared(params), suite.compared(suite.reference.astype(np.float64)))


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
    grads_warmup: float | None = None  # the warm-up's gradients (the sampling's are ``grads``)
    fixed: float = 0.0  # seconds of ``wall`` spent building, tracing or compiling, not sampling
    imports: float | None = None  # seconds its libraries take to import in a fresh interpreter (peer_imports)


# --- what a peer's wall time is made of -------------------------------------------------------------
JAX_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                      "/jax/core/compile/backend_compile_duration")  # the stages of every jit: trace, lower, compile
_jax_compile_seconds = [0.0]


def jax_compile_seconds() -> float:
    """Seconds JAX has spent tracing, lowering and compiling in this process so far (its monitoring events,
    listened to from the first call on; 0 where JAX is not imported)."""
    if "jax" not in sys.modules:
        return 0.0
    import jax.monitoring

    if not getattr(jax_compile_seconds, "listening", False):
        def listen(event: str, duration: float, **_) -> None:
            if event in JAX_COMPILE_EVENTS:
                _jax_compile_seconds[0] += duration
        jax.monitoring.register_event_duration_secs_listener(listen)
        jax_compile_seconds.listening = True
    return _jax_compile_seconds[0]


def with_fixed_costs(peer: Callable[[Posterior, argparse.Namespace], PeerRun]):
    """``peer`` with the JIT seconds inside its wall time added to its ``fixed`` (the sampler's time is then
    ``wall - fixed``: its warm-up and draws alone)."""
    def run(post: Posterior, args) -> PeerRun:
        import importlib.util

        if importlib.util.find_spec("jax") is not None:
            import jax  # noqa: F401  (the listener needs JAX loaded; its import is no peer's wall time)
        before = jax_compile_seconds()
        out = peer(post, args)
        out.fixed += jax_compile_seconds() - before
        return out
    return run


PEER_IMPORTS = {"numpyro-nuts": "jax, numpyro, numpyro.infer", "nutpie": "pymc, nutpie",
                "nutpie-lowrank": "pymc, nutpie", "blackjax-nuts": "jax, blackjax",
                "blackjax-chees": "jax, blackjax, optax", "blackjax-mams": "jax, blackjax",
                "blackjax-mams-esslength": "jax, blackjax", "pyro-nuts": "torch, pyro"}
_import_seconds: dict[str, float] = {}


def peer_imports(name: str) -> float | None:
    """Seconds a fresh interpreter takes to import peer ``name``'s libraries beyond starting (median of 3;
    measured once per process), which its users wait for in every ``python script.py``; None if unknown."""
    modules = PEER_IMPORTS.get(name)
    if modules is None:
        return None
    if modules not in _import_seconds:
        def seconds(code: str) -> float:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            return time.perf_counter() - start
        times = sorted(seconds(f"import {modules}") - seconds("pass") for _ in range(3))
        _import_seconds[modules] = max(times[1], 0.0)
    return _import_seconds[modules]


def jax_logdensity(post: Posterior):
    import jax.numpy as jnp

    if post.logistic is not None:
        x, y = (jnp.asarray(a) for a in post.logistic[:2])
        scale = post.prior_scale

        def logdensity(theta):
            logits = x @ theta
            return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(theta**2) / scale**2
    elif post.posteriordb:  # the suite's xp transcription (the recursions as lax.scan), as NumPyro samples it
        from bench_posteriordb import jax_log_density

        logdensity = jax_log_density(post.posteriordb)
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
    mcmc.warmup(jax.random.PRNGKey(args.seed), init_params=init, extra_fields=("num_steps",), collect_warmup=True)
    warmup_steps = float(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mcmc.run(mcmc.post_warmup_state.rng_key, extra_fields=("num_steps", "diverging"))
    wall = time.perf_counter() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    steps = np.asarray(extra["num_steps"])
    return PeerRun(wall, np.asarray(mcmc.get_samples(group_by_chain=True), np.float64), float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.sum(extra["diverging"])), grads_warmup=warmup_steps,
                   note=f"defaults (diag mass, target 0.8), {args.jax_dtype}, chains one after the other")


def nutpie_sampler(post: Posterior, args, low_rank: bool = False) -> PeerRun:
    """nutpie (its Rust NUTS, adapting its metric from draws and gradients), compile included; ``low_rank``:
    its low-rank modified mass matrix (Seyboldt, Carlson and Carpenter 2026: the diagonal metric times a
    correction in the few directions where the draws' and the gradients' covariances disagree most, both
    adapted by minimizing a Fisher divergence), otherwise its default diagonal metric. The density is the PyMC
    model (numba backend, experiments/pymc_models.py) where PyMC is installed, else the JAX density the other
    JAX peers sample, through nutpie's Python-function front end (as its own ``backend="jax"`` does)."""
    options = {"low_rank_modified_mass_matrix": True} if low_rank else {}
    if not getattr(args, "nutpie_defaults", False):  # the harness's lengths; else nutpie's own (0.16.8: 400 +
        # 1000 transitions with the diagonal metric, 800 + 1000 with the low-rank one)
        options.update(draws=args.draws, tune=args.warmup)
    metric = "low-rank modified" if low_rank else "default diagonal"
    start = time.perf_counter()
    try:
        model, front = pymc_model(post), "numba-compiled PyMC model"
    except ImportError:
        model, front = nutpie_jax_model(post), "JAX density (jit'd value_and_grad) via nutpie.from_pyfunc"
    from pymc_models import nutpie_run

    out = nutpie_run(model, ["v", "x"] if post.funnel_dim and front.startswith("numba") else ["theta"],
                     args.chains, args.seed, cores=args.chains, **options)
    built = max(time.perf_counter() - start - out.wall, 0.0)  # the model built (the JAX front end compiles here)
    fixed = out.compile + (built if front.startswith("numba") else 0.0)  # JAX's compile: with_fixed_costs
    return PeerRun(out.wall + built, out.draws, out.grads_sampling, out.depth, out.divergent,
                   grads_warmup=out.grads_warmup, fixed=fixed,
                   note=f"{metric} mass matrix, {front}, float64, chains in parallel threads, compile included")


def pymc_model(post: Posterior):
    """The posterior as a PyMC model (ImportError without PyMC)."""
    import pymc as pm
    from pymc_models import posteriordb_model

    if post.posteriordb:
        return posteriordb_model(post.suite)
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
    return model


def nutpie_jax_model(post: Posterior):
    """A nutpie model of the JAX density (jax_logdensity): one jit-compiled value_and_grad called from nutpie's
    Rust sampler for each gradient, the one variable ``theta`` the unconstrained vector, chains started
    uniformly in (-2, 2) as the other peers."""
    import jax
    from nutpie.compiled_pyfunc import from_pyfunc

    jax.config.update("jax_enable_x64", True)
    value_and_grad = jax.jit(jax.value_and_grad(jax_logdensity(post)))
    value_and_grad(np.zeros(post.dim)).__getitem__(0).block_until_ready()  # compile now, inside the wall time

    def make_logp():
        def logp(x):
            value, grad = value_and_grad(x)
            return float(value), np.asarray(grad, dtype=np.float64, order="C")
        return logp

    def make_expand(seed1, seed2, chain):
        return lambda x: {"theta": np.asarray(x, dtype=np.float64)}

    return from_pyfunc(post.dim, make_logp, make_expand, [np.dtype("float64")], [(post.dim,)], ["theta"],
                       make_initial_point_fn=lambda seed: np.random.default_rng(seed).uniform(-2.0, 2.0, post.dim))


def blackjax_nuts(post: Posterior, args) -> PeerRun:
    import blackjax
    import jax

    jax.config.update("jax_enable_x64", getattr(args, "jax_dtype", "float64") == "float64")
    logdensity = jax_logdensity(post)

    def one_chain(key):
        init_key, warm_key, sample_key = jax.random.split(key, 3)
        position = jax.random.uniform(init_key, (post.dim,), minval=-2.0, maxval=2.0)
        (state, params), warm = blackjax.window_adaptation(blackjax.nuts, logdensity).run(warm_key, position,
                                                                                          num_steps=args.warmup)
        kernel = blackjax.nuts(logdensity, **params).step

        def body(state, key):
            state, info = kernel(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)
        draws = jax.lax.scan(body, state, jax.random.split(sample_key, args.draws))[1]
        return (*draws, warm.info.num_integration_steps.sum())

    start = time.perf_counter()
    positions, steps, divergent, warmup_steps = jax.jit(jax.vmap(one_chain))(
        jax.random.split(jax.random.PRNGKey(args.seed), args.chains))
    positions.block_until_ready()
    steps = np.asarray(steps)
    return PeerRun(time.perf_counter() - start, np.asarray(positions, np.float64), float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.asarray(divergent).sum()),
                   grads_warmup=float(np.asarray(warmup_steps).sum()),
                   note=f"window adaptation (diag mass, target 0.8), chains vmapped, {args.jax_dtype}, jit included")


CHEES_LEARNING_RATE = 0.025  # Adam's step on the log trajectory length, as in BlackJAX's ChEES example
CHEES_INITIAL_STEP = 0.1


def blackjax_chees(post: Posterior, args) -> PeerRun:
    """ChEES-HMC (Hoffman, Radul and Sountsov 2021) as BlackJAX runs it, for many chains in lock-step:
    ``chees_adaptation`` (the step size by dual averaging to a harmonic-mean acceptance of 0.651, the
    trajectory length by Adam on the ChEES criterion across chains, a diagonal metric from the chains'
    positions in the last half of warm-up: ``mass_matrix_estimation="diagonal"``, as bayesx's ChEES adapts one),
    then ``dynamic_hmc`` with the jittered number of leapfrog steps. JIT included."""
    import blackjax
    import jax
    import optax

    jax.config.update("jax_enable_x64", getattr(args, "jax_dtype", "float64") == "float64")
    logdensity = jax_logdensity(post)

    def run(key):
        init_key, warm_key, sample_key = jax.random.split(key, 3)
        positions = jax.random.uniform(init_key, (args.chains, post.dim), minval=-2.0, maxval=2.0)
        warmup = blackjax.chees_adaptation(logdensity, args.chains, mass_matrix_estimation="diagonal")
        (states, params), warm = warmup.run(warm_key, positions, CHEES_INITIAL_STEP, optax.adam(CHEES_LEARNING_RATE),
                                            num_steps=args.warmup, max_sampling_steps=args.draws)
        step = jax.vmap(blackjax.dynamic_hmc(logdensity, **params).step)

        def body(states, key):
            states, info = step(jax.random.split(key, args.chains), states)
            return states, (states.position, info.num_integration_steps, info.is_divergent)
        _, (draws, steps, divergent) = jax.lax.scan(body, states, jax.random.split(sample_key, args.draws))
        return draws.swapaxes(0, 1), steps, divergent, warm.info.num_integration_steps.sum()

    start = time.perf_counter()
    positions, steps, divergent, warmup_steps = jax.jit(run)(jax.random.PRNGKey(args.seed))
    positions.block_until_ready()
    steps = np.asarray(steps)
    return PeerRun(time.perf_counter() - start, np.asarray(positions, np.float64), float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.asarray(divergent).sum()),
                   grads_warmup=float(warmup_steps),
                   note=f"chees_adaptation (diag metric, Adam {CHEES_LEARNING_RATE}, initial step "
                        f"{CHEES_INITIAL_STEP}), dynamic_hmc, {args.chains} chains in lock-step, {args.jax_dtype}, "
                        "jit included")


MAMS_TARGET_ACCEPT = 0.9  # Robnik, Cohn-Gordon and Seljak (2025) and BlackJAX's MAMS recipe
MAMS_TUNING = (0.1, 0.1, 0.1)  # BlackJAX's recipe: fractions of the draws spent on step size/L, L from ESS, again


def blackjax_mams(post: Posterior, args, ess_length: bool = False) -> PeerRun:
    """MAMS, the Metropolis-adjusted microcanonical sampler (Robnik, Cohn-Gordon and Seljak 2025), as BlackJAX
    runs it: ``adjusted_mclmc_dynamic`` (isokinetic McLachlan integrator, 2 gradients a step, a uniformly
    jittered number of steps with mean L / eps, a fresh unit velocity and a Metropolis test on the energy error
    each transition) tuned per chain by ``adjusted_mclmc_find_L_and_step_size`` (dual averaging of eps to
    acceptance 0.9, a diagonal preconditioner from the draws, L from their ESS), given ``num_steps`` such that
    the tuning takes the warm-up's transitions (sum(MAMS_TUNING) x num_steps = warmup). Chains vmapped,
    jit included.

    The installed BlackJAX (1.7.1) ends that function by setting L = 2 eps (its
    ``target_num_integration_steps=2``, "avg-preserving calibration"), so its MAMS makes about 2 integrator
    steps a transition whatever the ESS-based L was. ``ess_length``: the paper's recipe instead, from the same
    BlackJAX stages without that pin (mams_paper_tuning)."""
    import blackjax
    import jax
    import jax.numpy as jnp
    from blackjax.mcmc.adjusted_mclmc_dynamic import make_random_trajectory_length_fn

    jax.config.update("jax_enable_x64", getattr(args, "jax_dtype", "float64") == "float64")
    logdensity = jax_logdensity(post)
    steps_fn = make_random_trajectory_length_fn(True)  # ceil(u * 2 avg) steps, u ~ U(0, 1)
    tuning_kernel = blackjax.mcmc.adjusted_mclmc_dynamic.build_kernel(integration_steps_fn=steps_fn)
    frac1, frac2, frac3 = MAMS_TUNING
    num_steps = max(1, round(args.warmup / sum(MAMS_TUNING)))

    def one_chain(key):
        init_key, rng_key, tune_key, sample_key = jax.random.split(key, 4)
        position = jax.random.uniform(init_key, (post.dim,), minval=-2.0, maxval=2.0)
        state = blackjax.mcmc.adjusted_mclmc_dynamic.init(position, logdensity, rng_key)
        if ess_length:
            state, params, tuning_steps = mams_paper_tuning(tuning_kernel, logdensity, num_steps, state, tune_key)
        else:
            state, params, tuning_steps = blackjax.adjusted_mclmc_find_L_and_step_size(
                mclmc_kernel=tuning_kernel, logdensity_fn=logdensity, num_steps=num_steps, state=state,
                rng_key=tune_key, target=MAMS_TARGET_ACCEPT, frac_tune1=frac1, frac_tune2=frac2,
                frac_tune3=frac3, diagonal_preconditioning=True)
        sampler = blackjax.adjusted_mclmc_dynamic(
            logdensity, params.step_size, inverse_mass_matrix=params.inverse_mass_matrix,
            integration_steps_fn=steps_fn, integration_steps_params=(params.L / params.step_size,))

        def body(state, key):
            state, info = sampler.step(key, state)
            return state, (state.position, info.num_integration_steps, info.is_divergent)
        draws = jax.lax.scan(body, state, jax.random.split(sample_key, args.draws))[1]
        return (*draws, jnp.asarray(tuning_steps, jnp.float64), params.L / params.step_size)

    start = time.perf_counter()
    positions, steps, divergent, tuning_steps, mean_steps = jax.jit(jax.vmap(one_chain))(
        jax.random.split(jax.random.PRNGKey(args.seed), args.chains))
    positions.block_until_ready()
    steps = np.asarray(steps)
    recipe = ("the paper's recipe from BlackJAX's stages (L from the ESS, no pin)" if ess_length else
              "adjusted_mclmc_find_L_and_step_size as shipped (L pinned to 2 eps)")
    return PeerRun(time.perf_counter() - start, np.asarray(positions, np.float64), 2.0 * float(steps.sum()),
                   float(np.log2(steps + 1).mean()), float(np.asarray(divergent).sum()),
                   grads_warmup=2.0 * float(np.asarray(tuning_steps).sum()),
                   note=f"{recipe}, target {MAMS_TARGET_ACCEPT}, fractions {MAMS_TUNING}, diag preconditioning; "
                        f"L/eps ended at {float(np.mean(mean_steps)):.3g} steps; chains vmapped, {args.jax_dtype}, "
                        "jit included")


def mams_paper_tuning(kernel, logdensity, num_steps: int, state, key):
    """MAMS's tuning as Robnik, Cohn-Gordon and Seljak (2025) describe it, composed from BlackJAX's own stages
    (blackjax.adaptation.adjusted_mclmc_adaptation) without the installed version's L = 2 eps pin: from
    L = sqrt(d), eps = sqrt(d) / 4, (1) dual averaging of eps to acceptance 0.9 while L follows, then the
    diagonal preconditioner and L = sqrt(sum of the draws' variances) from a second stretch; (2) L = 0.5 L /
    (ESS per draw) from a third; (3) eps again with L held. Returns (state, params, integrator steps)."""
    import jax
    import jax.numpy as jnp
    from blackjax.adaptation import adjusted_mclmc_adaptation as stages
    from blackjax.adaptation.mclmc_adaptation import MCLMCAdaptationState

    dim = state.position.shape[0]
    frac1, frac2, frac3 = MAMS_TUNING
    params = MCLMCAdaptationState(jnp.sqrt(dim), jnp.sqrt(dim) * 0.25, inverse_mass_matrix=jnp.ones(dim))
    key1, key2, key3 = jax.random.split(key, 3)
    state, params, _, steps1 = stages.adjusted_mclmc_make_L_step_size_adaptation(
        kernel, logdensity, dim, frac1, frac2, MAMS_TARGET_ACCEPT, diagonal_preconditioning=True, tuning_factor=1.3)(
        state, params, num_steps, key1)
    state, params, steps2 = stages.adjusted_mclmc_make_adaptation_L(kernel, logdensity, frac3, 0.5)(
        state, params, num_steps, key2)
    state, params, _, steps3 = stages.adjusted_mclmc_make_L_step_size_adaptation(
        kernel, logdensity, dim, frac1, 0.0, MAMS_TARGET_ACCEPT, diagonal_preconditioning=True,
        fix_L_first_da=True)(state, params, num_steps, key3)
    return state, params, steps1 + steps2 + steps3


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
    "numpyro-nuts": with_fixed_costs(numpyro_nuts),
    "nutpie": with_fixed_costs(nutpie_sampler),
    "nutpie-lowrank": with_fixed_costs(lambda post, args: nutpie_sampler(post, args, low_rank=True)),
    "blackjax-nuts": with_fixed_costs(blackjax_nuts),
    "blackjax-chees": with_fixed_costs(blackjax_chees),
    "blackjax-mams": with_fixed_costs(blackjax_mams),
    "blackjax-mams-esslength": with_fixed_costs(lambda post, args: blackjax_mams(post, args, ess_length=True)),
    "numpyro-svi-meanfield": numpyro_svi("AutoNormal"),
    "numpyro-svi-fullrank": numpyro_svi("AutoMultivariateNormal"),
    "pyro-svi-meanfield": pyro_svi("AutoNormal"),
    "pyro-svi-fullrank": pyro_svi("AutoMultivariateNormal"),
}


# --- measuring and logging ------------------------------------------------------------------------
def peer_metrics(post: Posterior, out: PeerRun) -> dict[str, float]:
    """A peer's metrics under bayesx's names: min bulk ESS and its rate per second of total wall time (compile
    included), of the sampler's time alone (``sampler_time_s``: the wall time less ``fixed_time_s``, its
    building, tracing and compiling) and per sampling gradient; ``command_time_s``, the wall time plus its
    libraries' import (what ``python script.py`` would take); R-hat, counters (``grads_per_ess``: all gradients, warm-up included,
    per unit of min bulk ESS), test accuracy and posteriordb's reference errors for samplers; the final ELBO
    for SVI."""
    from bayesx.diagnostics.convergence import summarize

    sampler = max(out.wall - out.fixed, 1e-9)
    command = out.wall + out.imports if out.imports is not None else None
    metrics: dict[str, float | None] = {"wall_time_s": out.wall, "elbo_final": out.elbo_final, "n_steps": out.n_steps,
                                        "fixed_time_s": out.fixed, "sampler_time_s": sampler,
                                        "import_time_s": out.imports, "command_time_s": command}
    if out.draws is not None:
        summary = summarize(out.draws)
        ess = summary.get("ess_bulk_min")
        metrics.update(summary)
        metrics.update({"ess_bulk_min_per_s": ess / out.wall if ess is not None else None,
                        "ess_bulk_min_per_sampler_s": ess / sampler if ess is not None else None,
                        "ess_bulk_min_per_grad": ess / out.grads if ess is not None and out.grads else None,
                        "grads_per_ess": total_grads(out.grads, out.grads_warmup) / ess if ess else None,
                        "n_grad_evals": out.grads, "n_grad_evals_warmup": out.grads_warmup,
                        "n_divergent": out.divergent, "tree_depth_mean": out.depth,
                        "test_accuracy": post.test_accuracy(out.draws), **post.reference_errors(out.draws)})
    return {k: float(v) for k, v in metrics.items() if v is not None}


def total_grads(sampling: float | None, warmup: float | None) -> float:
    """Gradient evaluations of a whole run, warm-up included (0 where not counted)."""
    return (sampling or 0.0) + (warmup or 0.0)


def log_peer(tracker, parent_id: str, name: str, post: Posterior, out: PeerRun | None, settings: dict[str, object],
             stopped: tuple[str, str] | None = None) -> str:
    """Record a peer's run as a child of the sweep ``parent_id``, tagged ``peer=<name>``; returns its id. A peer
    that did not finish (``out`` None) is recorded with ``stopped``: its status (KILLED: stopped at a time
    limit; FAILED: it raised) and why, as the run's error."""
    if out is None:
        status, why = stopped
        record = RunRecord(status, error=why)
        note = why
    else:
        metrics = peer_metrics(post, out)
        keys = SAMPLER_METRICS if out.draws is not None else SVI_METRICS
        record = RunRecord("FINISHED", metrics, summary=Summary(compared=tuple(k for k in keys if k in metrics)))
        note = out.note
    tags = {"peer": name, "method": name, "model": post.model, "data": post.data, "seed": str(settings["seed"]),
            "n_chains": str(settings["chains"]), "family": "peer", "peer_note": note}
    params = {"posterior": " ".join(post.overrides), **settings,
              **({"model.name": post.posteriordb} if post.posteriordb else {})}
    start = RunStart(f"{name}-{post.model}-{post.data}-seed{settings['seed']}", tags, params,
                     "".join(f"{k}: {v}\n" for k, v in params.items()), parent_id)
    with tracker.run(start) as run:
        run.store(record)
        return run.run_id


def bayesx_sweep(posterior: list[str], bayesx: list[str], args, env: dict[str, str] | None = None) -> str:
    """Run bayesx's contenders on the ``posterior`` overrides as one sweep through the runner (in the
    environment ``env``); returns the sweep's parent run id."""
    from bayesx.reports.report import select_sweep
    from bayesx.store.tracking import search_runs

    mcmc = [f"++method.num_warmup={args.warmup}", f"++method.num_draws={args.draws}"] if args.mcmc_lengths else []
    command = [sys.executable, "-m", "bayesx", "run", "-m", *posterior, *bayesx, *mcmc, f"seed={args.seed}",
               f"n_chains={args.chains}", f"experiment_name={args.experiment}", f"tracking.uri={args.tracking_uri}",
               "save_draws=false", "progress=false", "plots.n_coords=0"]
    print("$ " + shlex.join(command[2:]), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, env=env)
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
            parent = bayesx_sweep(post.overrides, bayesx, args)
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
