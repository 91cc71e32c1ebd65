"""Benchmark: a 416-step HMM written with a plain Python loop, bayesx NUTS from a cold compile cache against NumPyro
NUTS with the same recursion as ``lax.scan`` (issue 52, item 1).

bayesx runs ``bayesx run model=posteriordb model.name=hmm_drive_0 method=nuts`` (its defaults; the torch model's
forward algorithm is a Python ``for`` over time, traced and compiled to C with the loop folded by
bayesx.native.loops) with an empty compile cache, so its wall time includes tracing and compiling. NumPyro runs its
defaults (4 chains one after the other, 1000 + 1000, float64) on the forward algorithm written with ``lax.scan``
(what a NumPyro user writes; a Python loop would be unrolled by XLA), its JIT compile included. Rates are min bulk
ESS per second of total wall time, as experiments/bench_posteriordb.py reports them.

    python experiments/bench_loops.py [--posterior hmm_drive_0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_posteriordb import bayesx_run, fmt, numpyro_nuts, rate  # noqa: E402


def hmm_drive_scan(jnp, lax, sigmoid, positive: bool, emission):
    """hmm_drive_0/1's log density (xp_models._hmm_drive, term for term) with the forward algorithm as a scan."""
    from bayesx.targets.posteriordb.xp_models import _normal

    def log_density(q, d):
        th1, th2 = sigmoid(q[0]), sigmoid(q[1])
        log_theta = jnp.log(jnp.stack([jnp.stack([th1, 1.0 - th1]), jnp.stack([th2, 1.0 - th2])]))
        first = jnp.exp if positive else (lambda u: u)
        phi = jnp.stack([first(q[2]), first(q[2]) + jnp.exp(q[3])])
        lam = jnp.stack([first(q[4]), first(q[4]) + jnp.exp(q[5])])
        lp = jnp.sum((d["alpha"] - 1.0) * log_theta)
        lp = lp + _normal(jnp, phi[0], 0.0, 1.0) + _normal(jnp, phi[1], 3.0, 1.0)
        lp = lp + _normal(jnp, lam[0], 0.0, 1.0) + _normal(jnp, lam[1], 3.0, 1.0)

        def step(gamma, obs):
            u, v = obs
            gamma = jnp.logaddexp(gamma[0] + log_theta[0], gamma[1] + log_theta[1]) + emission(u, v, phi, lam, d)
            return gamma, None

        gamma, _ = lax.scan(step, emission(d["u"][0], d["v"][0], phi, lam, d), (d["u"][1:], d["v"][1:]))
        lp = lp + jnp.logaddexp(gamma[0], gamma[1])
        log_jacobian = jnp.log(th1) + jnp.log(1.0 - th1) + jnp.log(th2) + jnp.log(1.0 - th2) + q[3] + q[5]
        return lp + log_jacobian + ((q[2] + q[4]) if positive else 0.0)

    return log_density


def numpyro_scan_run(name: str, warmup: int, draws: int, chains: int) -> dict:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.nn import sigmoid
    from bayesx.targets.posteriordb import load
    from bayesx.targets.posteriordb.xp_models import _normal

    jax.config.update("jax_enable_x64", True)
    post = load(name)
    data = {k: jnp.asarray(v) for k, v in post.data.items()}
    if name == "hmm_drive_0":
        density = hmm_drive_scan(jnp, lax, sigmoid, True, lambda u, v, phi, lam, d: jnp.log(phi) - phi * u
                                 + jnp.log(lam) - lam * v)
    else:
        density = hmm_drive_scan(jnp, lax, sigmoid, False, lambda u, v, phi, lam, d: _normal(jnp, u, phi, d["tau"])
                                 + _normal(jnp, v, lam, d["rho"]))
    q = np.random.default_rng(1).normal(size=post.dim)
    expected = post.log_density(np, q, {k: np.asarray(v) for k, v in post.data.items()})
    assert abs(float(density(jnp.asarray(q), data)) - float(expected)) < 1e-8, "the scan form is another density"
    return numpyro_nuts(name, "numpyro (lax.scan)", lambda x: -density(x, data), warmup, draws, chains)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posterior", default="hmm_drive_0", choices=["hmm_drive_0", "hmm_drive_1"])
    parser.add_argument("--no-numpyro", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as store:
        native = Path.home() / ".cache" / "bayesx" / "native"  # the kernels library stays; the densities go
        os.symlink(native, Path(cache) / "native")
        env = {**os.environ, "BAYESX_CACHE_DIR": cache}
        rows.append(bayesx_run(args.posterior, ["method=nuts"], f"sqlite:///{store}/mlflow.db", "bench_loops", env))
        rows[-1]["label"] = "bayesx NUTS (cold cache)"
    if not args.no_numpyro:
        rows.append(numpyro_scan_run(args.posterior, 1000, 1000, 4))
    print(f"| {args.posterior} | min-ESS/s (compile included) | wall s | compile s | R-hat | grads | ref err |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.get('label')} | {fmt(rate(row))} | {fmt(row.get('wall'))} | {fmt(row.get('compile'), 2)} | "
              f"{fmt(row.get('rhat'))} | {fmt(row.get('grads'), 2)} | {fmt(row.get('ref_err'), 2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
