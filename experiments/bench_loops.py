"""Benchmark: densities written with plain Python loops, bayesx NUTS from a cold compile cache against NumPyro NUTS
with the same recursion as ``lax.scan`` (issue 52, "loops stay loops").

The posteriors (bayesx/targets/posteriordb/torch_models.py), each a Python ``for`` in the torch model:

    hmm_drive_0, hmm_drive_1   the forward algorithm over 416 time steps, gamma_t(k) = logsumexp_j(gamma_{t-1}(j)
                               + log theta[j, k]) + log p(u_t, v_t | state k)
    lotka_volterra             du/dt = (alpha - beta v) u, dv/dt = (-gamma + delta u) v, integrated by fixed-step
                               RK4, 20 steps per year between the 20 observation times (400 steps)
    one_comp_mm_elim_abs       dC/dt = exp(-k_a t) D k_a / V - (V_m / V) C / (K_m + C), C(t0) = 0, RK4, 20 steps per
                               interval between the 20 observation times (400 steps)

bayesx runs ``bayesx run model=posteriordb model.name=<name> method=nuts`` (its defaults; the torch model's loop is
traced and compiled to C with the loop folded by bayesx.native.loops, the RK4 steps between observations a nested C
loop) with an empty compile cache, so its wall time includes tracing and compiling. NumPyro runs its defaults (4
chains one after the other, 1000 + 1000, float64) on the same density with its loop written as ``lax.scan`` (what a
NumPyro user writes; a Python loop would be unrolled by XLA): the forward algorithm a scan over time, the RK4
integrator a scan over the observation intervals with a ``fori_loop`` over each interval's 20 steps; its JIT compile
included. Each scan form is checked against the suite's reference transcription (xp_models.py) at a random point
before it runs. Rates are min bulk ESS per second of total wall time, as experiments/bench_posteriordb.py reports
them; the load average (os.getloadavg) is recorded just before and just after each run.

    python experiments/bench_loops.py [--posterior hmm_drive_0 | --all] [--out results/bench_loops.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_posteriordb import bayesx_run, fmt, numpyro_nuts, rate, ratio  # noqa: E402

POSTERIORS = ["hmm_drive_0", "hmm_drive_1", "lotka_volterra", "one_comp_mm_elim_abs"]


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


def rk4_scan(jnp, lax, rhs, z0, t0, times, steps: int):
    """z(t_n) for dz/dt = rhs(t, z), z(t0) = z0 (an array), at each of ``times``: (len(times), len(z0)).
    xp_models._rk4 term for term (the classical Runge-Kutta method, ``steps`` equal steps h = (t_n - t_{n-1}) / steps
    per interval, t advanced by h each step and reset to t_n at the interval's end), written as a scan over the
    intervals with a fori_loop over each interval's steps."""

    def step(_, state):
        z, t, h = state
        k1 = rhs(t, z)
        k2 = rhs(t + h / 2, z + h / 2 * k1)
        k3 = rhs(t + h / 2, z + h / 2 * k2)
        k4 = rhs(t + h, z + h * k3)
        return z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), t + h, h

    def interval(carry, t_next):
        z, t = carry
        z, _, _ = lax.fori_loop(0, steps, step, (z, t, (t_next - t) / steps))
        return (z, t_next), z

    _, zs = lax.scan(interval, (z0, jnp.asarray(t0, times.dtype)), times)
    return zs


def lotka_volterra_scan(jnp, lax):
    """lotka_volterra's log density (xp_models.lotka_volterra, term for term) with the RK4 integrator as a scan:
    (alpha, beta, gamma, delta) = exp(q[0:4]), z_init = exp(q[4:6]), sigma = exp(q[6:8]); z(t) = (prey, predator) from
    z_init at t = 0; alpha, gamma ~ N(1, 0.5), beta, delta ~ N(0.05, 0.05), sigma_k ~ lognormal(-1, 1),
    z_init_k ~ lognormal(log 10, 1), y_init_k ~ lognormal(log z_init_k, sigma_k), y_nk ~ lognormal(log z_k(t_n),
    sigma_k); log Jacobian sum(q)."""
    from bayesx.targets.posteriordb.xp_models import ODE_STEPS, _lognormal, _normal

    def log_density(q, d):
        alpha, beta, gamma, delta = (jnp.exp(q[i]) for i in range(4))
        z_init, sigma = jnp.exp(q[4:6]), jnp.exp(q[6:8])

        def dz_dt(t, z):
            return jnp.stack([(alpha - beta * z[1]) * z[0], (-gamma + delta * z[0]) * z[1]])

        z = rk4_scan(jnp, lax, dz_dt, z_init, 0.0, d["ts"], ODE_STEPS)
        lp = _normal(jnp, alpha, 1.0, 0.5) + _normal(jnp, gamma, 1.0, 0.5)
        lp = lp + _normal(jnp, beta, 0.05, 0.05) + _normal(jnp, delta, 0.05, 0.05)
        lp = lp + jnp.sum(_lognormal(jnp, sigma, -1.0, 1.0) + _lognormal(jnp, z_init, jnp.log(10.0), 1.0))
        lp = lp + jnp.sum(_lognormal(jnp, d["y_init"], jnp.log(z_init), sigma))
        lp = lp + jnp.sum(_lognormal(jnp, d["y"], jnp.log(z), sigma))
        return lp + jnp.sum(q)

    return log_density


def one_comp_scan(jnp, lax):
    """one_comp_mm_elim_abs's log density (xp_models.one_comp_mm_elim_abs, term for term) with the RK4 integrator as
    a scan: (k_a, K_m, V_m, sigma) = exp(q); C(t) from C(t0) = 0 (the dose term's t > 0 branch throughout);
    each of the four half-Cauchy(0, 1); C_hat_n ~ lognormal(log C(t_n), sigma); log Jacobian sum(q)."""
    from bayesx.targets.posteriordb.xp_models import ODE_STEPS, _half_cauchy, _lognormal

    def log_density(q, d):
        k_a, K_m, V_m, sigma = (jnp.exp(q[i]) for i in range(4))

        def dc_dt(t, c):
            return jnp.exp(-k_a * t) * d["D"] * k_a / d["V"] - (V_m / d["V"]) * c / (K_m + c)

        c = rk4_scan(jnp, lax, dc_dt, jnp.zeros(1), d["t0"], d["times"], ODE_STEPS)[:, 0]
        lp = _half_cauchy(jnp, k_a, 1.0) + _half_cauchy(jnp, K_m, 1.0) + _half_cauchy(jnp, V_m, 1.0)
        lp = lp + _half_cauchy(jnp, sigma, 1.0)
        return lp + jnp.sum(_lognormal(jnp, d["C_hat"], jnp.log(c), sigma)) + jnp.sum(q)

    return log_density


SCANNED = ("hmm_drive_0", "hmm_drive_1", "lotka_volterra", "one_comp_mm_elim_abs")
"""The posteriors whose transcription here is a lax.scan (the peers' harness takes it from here too)."""


def scan_density(name: str):
    """The posterior's log density (q, data) in jax.numpy, its loop a ``lax.scan``."""
    import jax.numpy as jnp
    from jax import lax
    from jax.nn import sigmoid
    from bayesx.targets.posteriordb.xp_models import _normal

    if name == "hmm_drive_0":
        return hmm_drive_scan(jnp, lax, sigmoid, True, lambda u, v, phi, lam, d: jnp.log(phi) - phi * u
                              + jnp.log(lam) - lam * v)
    if name == "hmm_drive_1":
        return hmm_drive_scan(jnp, lax, sigmoid, False, lambda u, v, phi, lam, d: _normal(jnp, u, phi, d["tau"])
                              + _normal(jnp, v, lam, d["rho"]))
    return {"lotka_volterra": lotka_volterra_scan, "one_comp_mm_elim_abs": one_comp_scan}[name](jnp, lax)


def numpyro_scan_run(name: str, warmup: int, draws: int, chains: int) -> dict:
    import jax
    import jax.numpy as jnp
    from bayesx.targets.posteriordb import load

    jax.config.update("jax_enable_x64", True)
    post = load(name)
    data = {k: jnp.asarray(v) for k, v in post.data.items()}
    density = scan_density(name)
    q = np.random.default_rng(1).normal(size=post.dim)
    expected = post.log_density(np, q, {k: np.asarray(v) for k, v in post.data.items()})
    assert abs(float(density(jnp.asarray(q), data)) - float(expected)) < 1e-8, "the scan form is another density"
    return numpyro_nuts(name, "numpyro (lax.scan)", lambda x: -density(x, data), warmup, draws, chains)


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def bench(name: str, numpyro: bool) -> list[dict]:
    """bayesx NUTS from an empty compile cache (the C kernels library kept), then NumPyro's scan form: their rows,
    each with the load average just before and just after its run."""
    rows = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as store:
        native = Path.home() / ".cache" / "bayesx" / "native"  # the kernels library stays; the densities go
        os.symlink(native, Path(cache) / "native")
        env = {**os.environ, "BAYESX_CACHE_DIR": cache}
        before = load_average()
        rows.append(bayesx_run(name, ["method=nuts"], f"sqlite:///{store}/mlflow.db", "bench_loops", env))
        rows[-1].update(label="bayesx NUTS (cold cache)", load_before=before, load_after=load_average())
    if numpyro:
        before = load_average()
        rows.append(numpyro_scan_run(name, 1000, 1000, 4))
        rows[-1].update(load_before=before, load_after=load_average())
    for row in rows:
        row["posterior"] = name
    rows[0]["vs_numpyro"] = ratio(rate(rows[0]), rate(rows[1])) if numpyro else None
    return rows


TABLE_HEAD = ["| posterior | sampler | min-ESS/s (compile included) | / NumPyro | wall s | compile s | R-hat | grads | "
              "ref err | load before | load after |", "|" + "---|" * 11]


def table_row(row: dict) -> str:
    return (f"| {row['posterior']} | {row.get('label')} | {fmt(rate(row))} | {fmt(row.get('vs_numpyro'))} | "
            f"{fmt(row.get('wall'))} | {fmt(row.get('compile'), 2)} | {fmt(row.get('rhat'))} | "
            f"{fmt(row.get('grads'), 2)} | {fmt(row.get('ref_err'), 2)} | {row['load_before']} | {row['load_after']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posterior", default="hmm_drive_0", choices=POSTERIORS)
    parser.add_argument("--all", action="store_true", help="every posterior, one after the other")
    parser.add_argument("--no-numpyro", action="store_true")
    parser.add_argument("--out", default=None, help="also write the table (markdown) to this file")
    args = parser.parse_args(argv)
    command = " ".join(["python experiments/bench_loops.py", *(argv if argv is not None else sys.argv[1:])])
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print("\n".join(TABLE_HEAD), flush=True)
    rows = []
    for name in POSTERIORS if args.all else [args.posterior]:
        new = bench(name, not args.no_numpyro)
        print("\n".join(table_row(row) for row in new), flush=True)
        rows += new
    import torch

    header = [
        "# Looped densities: bayesx NUTS from a cold compile cache against NumPyro NUTS with lax.scan",
        "",
        f"Command: `{command}` (niceness {os.nice(0)}), started {started}.",
        "",
        f"Machine: {platform.machine()}, os.cpu_count() = {os.cpu_count()}, torch {torch.__version__}; shared with "
        "other work: 'load before' and 'load after' are os.getloadavg() (1, 5, 15 min) just before and just after "
        "each run. One run each, seed 0, one after the other.",
        "",
        "min-ESS/s: min bulk ESS over the parameters per second of total wall time (bayesx: the run's wall_time_s, "
        "tracing and compiling the density from an empty cache included, 'compile s' that part alone; NumPyro: "
        "mcmc.run, its JIT included, 4 chains one after the other, 1000 + 1000). '/ NumPyro': bayesx's min-ESS/s over "
        "NumPyro's. grads: gradient evaluations, warm-up included. ref err: worst |mean - gold-standard mean| in "
        "gold-standard sds.",
        "",
    ]
    text = "\n".join(header + TABLE_HEAD + [table_row(row) for row in rows]) + "\n"
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
