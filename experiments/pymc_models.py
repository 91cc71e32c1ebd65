"""The posteriordb suite as PyMC models, for nutpie (Seyboldt et al., nutpie: a NUTS sampler in Rust with
PyMC and Stan front ends), and one nutpie run with its own defaults.

A posterior of bayesx's suite (bayesx/targets/posteriordb) becomes a PyMC model over its **unconstrained**
vector ``theta`` (dim,) whose log density is the suite's second transcription (xp_models.py) evaluated with
``pytensor.tensor`` as its array namespace. So nutpie samples the very density
NumPyro and bayesx sample, on the same coordinates with Stan's log-Jacobians, and its min-ESS is computed on
the same unconstrained coordinates as theirs. pytensor.tensor has every name the transcription uses (log, exp,
logaddexp, sum, mean, stack, concatenate, sqrt, eye, linalg.cholesky), so no adapter is needed there. The three
recursions (arma11, garch11, hmm_example) are the scan forms NumPyro samples (bench_posteriordb.scan_densities)
run by ``pytensor.scan``: pytensor would unroll the transcription's Python loop over the 200-step series into
one graph, which takes minutes to compile (garch11: 684 s, measured once with other work on the machine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


def pytensor_scan(step, init, xs):
    """jax.lax.scan's contract on pytensor.scan: ``step(carry, x) -> (carry, y)`` over the first axis of ``xs``
    (an array or a tuple of arrays); returns the last carry and the stacked ys (a step's y of None: the carries)."""
    import pytensor
    import pytensor.tensor as pt

    sequences = [pt.as_tensor_variable(x) for x in (xs if isinstance(xs, tuple) else (xs,))]

    def inner(*args):
        *elements, carry = args
        carry, y = step(carry, tuple(elements) if len(elements) > 1 else elements[0])
        return carry, carry if y is None else y

    init = pt.as_tensor_variable(init).astype("float64")
    (carries, ys), _ = pytensor.scan(inner, sequences=sequences, outputs_info=[init, None])
    return carries[-1], ys


def pytensor_log_density(post):
    """theta (dim,) pytensor vector -> the suite posterior's log density: its transcription, or for the
    recursions the scan form."""
    import pytensor.tensor as pt
    from bench_posteriordb import scan_densities

    scans = scan_densities(pt, pytensor_scan, pt.sigmoid)
    if post.name in scans:
        return lambda theta: scans[post.name](theta, post.data)
    return lambda theta: post.log_density(pt, theta, post.data)


def posteriordb_model(post):
    """A PyMC model whose one variable, the unconstrained theta (dim,), has the suite posterior's log density
    (pytensor_log_density) and no transform: ``pm.CustomDist`` with that logp. (``pm.Flat`` plus a
    ``pm.Potential`` says the same, but PyMC does not replace the Flat variable by its value inside a scan.)"""
    import pymc as pm

    with pm.Model() as model:
        pm.CustomDist("theta", logp=pytensor_log_density(post), shape=post.dim, dtype="float64")
    return model


@dataclass
class NutpieRun:
    """One nutpie run: draws (chains, draws, dim) of the named variables side by side, its wall time (compile
    included) and compile time, and its leapfrog steps (gradients) in sampling and in warm-up."""

    draws: np.ndarray
    wall: float
    compile: float
    grads_sampling: float
    grads_warmup: float
    depth: float
    divergent: float


def nutpie_run(model, var_names: list[str], chains: int, seed: int, **sample_options) -> NutpieRun:
    """Compile ``model`` for nutpie (its default backend, numba) and sample it; ``sample_options`` go to
    nutpie.sample (draws, tune, cores: nutpie's defaults where absent)."""
    import nutpie

    start = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model) if hasattr(model, "free_RVs") else model  # else compiled already
    compiled_at = time.perf_counter()
    trace = nutpie.sample(compiled, chains=chains, seed=seed, progress_bar=False, **sample_options)
    wall = time.perf_counter() - start
    posterior, stats = trace.posterior, trace.sample_stats
    draws = np.concatenate([np.asarray(posterior[v].values, np.float64).reshape(chains, posterior[v].shape[1], -1)
                            for v in var_names], -1)
    warmup = trace.warmup_sample_stats if "warmup_sample_stats" in trace.groups() else None
    return NutpieRun(draws, wall, compiled_at - start, float(stats["n_steps"].values.sum()),
                     float(warmup["n_steps"].values.sum()) if warmup is not None else 0.0,
                     float(stats["depth"].values.mean()), float(stats["diverging"].values.sum()))
