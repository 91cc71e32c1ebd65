"""The second tier of the posteriordb suite: its data, simulated from seeds, and its reference draws, from long runs
of an independent sampler (NumPyro NUTS on the JAX transcription, bayesx/targets/posteriordb/tier2_xp.py).

    .venv/bin/python experiments/make_tier2.py data                     # every data set (keeps references)
    /work/venv-bench/bin/python experiments/make_tier2.py reference --posteriors sv_latent --chains 10 \\
        --warmup 1000 --draws 10000                                     # NumPyro: pip install numpyro jax arviz

``data`` simulates each posterior's data from its own seed (numpy's PCG64; the values are stored, so the stream's
stability does not matter) and writes bayesx/targets/posteriordb/data/tier2_<name>.npz: ``data.*`` arrays,
``param_names``, and the reference if one is there already. The 100,000-row GLM stores its responses and the
seed, shape and SHA-256 of its design, which tier2_xp.logistic_design makes again at load time bit for bit.

``reference`` needs JAX and NumPyro only (it loads tier2_xp.py by its path, never torch or bayesx): NUTS (NumPyro's
defaults but target_accept, dense or diagonal metric as given) with --chains chains run vectorized, started
uniformly in (-2, 2); it refuses to write draws whose max rank-normalized split R-hat (ArviZ, over every
unconstrained coordinate) passes --rhat-limit; the kept draws are thinned evenly over the chains to at most
--keep (the file small), stored in float32 with the mantissa rounded to 16 bits (relative error 8e-6; far under
the draws' Monte Carlo error) with a line on how they were made (``info``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bayesx" / "targets" / "posteriordb"
DATA = PACKAGE / "data"
GLM_SEED, GLM_ROWS, GLM_COLUMNS = 20261201, 100_000, 20


def tier2_xp():
    """tier2_xp.py by its path (numpy only): no torch, no bayesx package import."""
    if "tier2_xp" not in sys.modules:
        spec = importlib.util.spec_from_file_location("tier2_xp", PACKAGE / "tier2_xp.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["tier2_xp"] = module
        spec.loader.exec_module(module)
    return sys.modules["tier2_xp"]


def names(stem: str, n: int) -> list[str]:
    return [f"{stem}[{i}]" for i in range(1, n + 1)]


# --- the data, from seeds --------------------------------------------------------------------------------
def sv_latent(rng):
    t_len, mu, phi, sigma = 200, -1.0, 0.95, 0.25
    h = np.empty(t_len)
    h[0] = mu + sigma / np.sqrt(1 - phi**2) * rng.standard_normal()
    for t in range(1, t_len):
        h[t] = mu + phi * (h[t - 1] - mu) + sigma * rng.standard_normal()
    y = np.exp(h / 2) * rng.standard_normal(t_len)
    return {"y": y}, ["mu", "phi", "sigma", *names("h", t_len)]


def local_level(rng):
    t_len = 500
    x = np.cumsum(0.3 * rng.standard_normal(t_len))
    return {"y": x + rng.standard_normal(t_len)}, ["sigma_eps", "sigma_eta", *names("x", t_len)]


def _groups(rng, n_groups: int, mean_size: float):
    sizes = 1 + np.minimum(rng.poisson(mean_size - 1, n_groups), 11)
    return np.repeat(np.arange(n_groups), sizes).astype(np.int32), sizes.astype(np.int32)


def hier_normal(rng):
    g, sizes = _groups(rng, 600, 5.0)
    alpha = 1.0 + 0.7 * rng.standard_normal(600)
    x = rng.standard_normal(len(g))
    y = alpha[g] + 0.5 * x + rng.standard_normal(len(g))
    return {"y": y, "x": x, "g": g, "n_per_group": sizes}, ["mu", "beta", "tau", "sigma", *names("alpha", 600)]


def hier_logistic(rng):
    g, sizes = _groups(rng, 500, 10.0)
    alpha = -0.5 + 0.8 * rng.standard_normal(500)
    x = rng.standard_normal((len(g), 3))
    eta = alpha[g] + x @ np.array([0.6, -0.4, 0.2])
    y = (rng.random(len(g)) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return ({"y": y, "X": x, "g": g, "n_per_group": sizes},
            ["mu", *names("beta", 3), "tau", *names("alpha", 500)])


def logistic_100k(rng):
    x = tier2_xp().logistic_design(GLM_SEED, GLM_ROWS, GLM_COLUMNS)
    beta = np.round(rng.normal(0.0, 0.5, GLM_COLUMNS), 2)
    eta = -0.3 + x @ beta
    y = (rng.random(GLM_ROWS) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return {"y": y}, ["alpha", *names("beta", GLM_COLUMNS)]


def gp_latent_poisson(rng):
    n, rho = 250, 1.0
    x = np.linspace(0.0, 10.0, n)
    chol = tier2_xp().matern32_cholesky(x, rho)
    f = 1.0 + 0.8 * chol @ rng.standard_normal(n)
    return {"x": x, "rho": np.float64(rho), "k": rng.poisson(np.exp(f)).astype(np.int32)}, \
        ["mu", "alpha", *names("f", n)]


def horseshoe(rng):
    n, p = 100, 220
    x = rng.standard_normal((n, p))
    beta = np.zeros(p)
    beta[rng.choice(p, 8, replace=False)] = rng.choice([-1.0, 1.0], 8) * rng.uniform(1.0, 3.0, 8)
    y = 0.5 + x @ beta + rng.standard_normal(n)
    return {"y": y, "X": x}, ["beta0", "sigma", "tau", "caux", *names("lambda", p), *names("beta", p)]


def irt_2pl(rng):
    n_students, n_items = 1000, 20
    theta = rng.standard_normal(n_students)
    a = np.exp(0.3 * rng.standard_normal(n_items))
    b = 0.2 + 1.0 * rng.standard_normal(n_items)
    eta = a[None, :] * (theta[:, None] - b[None, :])
    y = (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(np.int8)
    return {"Y": y}, [*names("theta", n_students), *names("a", n_items), *names("b", n_items), "mu_b", "sigma_b"]


SIMULATE = {"sv_latent": (sv_latent, 1), "local_level": (local_level, 2), "hier_normal": (hier_normal, 3),
            "hier_logistic": (hier_logistic, 4), "logistic_100k": (logistic_100k, 5),
            "gp_latent_poisson": (gp_latent_poisson, 6), "horseshoe": (horseshoe, 7), "irt_2pl": (irt_2pl, 8)}


def path_of(name: str) -> Path:
    return DATA / f"tier2_{name}.npz"


def read(name: str) -> dict[str, np.ndarray]:
    with np.load(path_of(name)) as saved:
        return {k: saved[k] for k in saved.files}


def arrays(saved: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The data a transcription takes, the GLM's design made from its seed."""
    data = {k[len("data."):]: v for k, v in saved.items() if k.startswith("data.")}
    if "design.seed" in saved:
        xp = tier2_xp()
        n, k = (int(v) for v in saved["design.shape"])
        data["X"] = xp.logistic_design(int(saved["design.seed"]), n, k)
        assert xp.design_digest(data["X"]) == str(saved["design.sha256"]), "the design does not reproduce"
    return data


def write_data(name: str) -> None:
    simulate, seed = SIMULATE[name]
    data, param_names = simulate(np.random.default_rng([20261202, seed]))
    out = {f"data.{k}": np.asarray(v) for k, v in data.items()}
    out["param_names"] = np.array(param_names)
    if name == "logistic_100k":
        x = tier2_xp().logistic_design(GLM_SEED, GLM_ROWS, GLM_COLUMNS)
        out.update({"design.seed": np.int64(GLM_SEED), "design.shape": np.array([GLM_ROWS, GLM_COLUMNS]),
                    "design.sha256": np.array(tier2_xp().design_digest(x))})
    old = read(name) if path_of(name).exists() else {}
    same = all(k in old and np.array_equal(old[k], v) for k, v in out.items())
    if same and "reference" in old and len(old["reference"]):
        out.update(reference=old["reference"], info=old["info"])
    else:
        out.update(reference=np.zeros((0, len(param_names)), np.float32), info=np.array(""))
        if old.get("reference") is not None and len(old["reference"]):
            print(f"{name}: the data changed; its reference draws are dropped", flush=True)
    np.savez_compressed(path_of(name), **out)
    print(f"{name}: {path_of(name).stat().st_size / 1e3:.0f} kB", flush=True)


# --- the reference, by NumPyro NUTS ----------------------------------------------------------------------
def rounded(draws: np.ndarray, bits: int = 16) -> np.ndarray:
    """float32 with its mantissa rounded to ``bits`` of 23 bits (relative error below 2^-(bits+1), 8e-6): the low bits
    zero, so the file compresses. (A grid of sd / 4096 per coordinate, the first version, rounded the horseshoe's
    smallest lambdas, half-Cauchy, to zero; the references made with it, of posteriors without such tails, are kept.)"""
    x = np.ascontiguousarray(draws, dtype=np.float32)
    drop = 23 - bits
    as_int = x.view(np.uint32).astype(np.uint64) + (1 << (drop - 1))
    return (as_int.astype(np.uint32) & np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)).view(np.float32)


def write_reference(name: str, args) -> None:
    import arviz as az
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", True)
    xp_module = tier2_xp()
    model = xp_module.TIER2_XP[name]
    saved = read(name)
    data = arrays(saved)
    jdata = {k: jnp.asarray(v) for k, v in data.items()}
    dim = len(saved["param_names"])
    print(f"{name}: data ready, sampling {args.chains} chains x ({args.warmup} + {args.draws})", flush=True)

    def potential(q):
        return -model.log_density(jnp, q, jdata)

    kernel = NUTS(potential_fn=potential, target_accept_prob=args.target_accept, dense_mass=args.dense,
                  max_tree_depth=args.max_tree_depth)
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.draws, num_chains=args.chains,
                chain_method="vectorized", progress_bar=False)
    init = jax.random.uniform(jax.random.PRNGKey(args.seed + 1), (args.chains, dim), minval=-2.0, maxval=2.0,
                              dtype=jnp.float64)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(args.seed), init_params=init, extra_fields=("diverging", "num_steps"))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))  # (chains, draws, dim); blocks until sampled
    wall = time.perf_counter() - start
    print(f"{name}: sampled in {wall:.0f} s", flush=True)
    fields = mcmc.get_extra_fields(group_by_chain=True)
    stats = {"divergences": int(np.asarray(fields["diverging"]).sum()),
             "mean_leapfrog_steps": round(float(np.asarray(fields["num_steps"]).mean()), 1)}
    sampler = {"sampler": f"NumPyro {numpyro.__version__} NUTS on the JAX transcription (tier2_xp.py), float64",
               "target_accept": args.target_accept, "metric": "dense" if args.dense else "diagonal",
               "max_tree_depth": args.max_tree_depth}
    finish(name, args, saved, model, jdata, draws, wall, sampler, stats)


def glm_rows_log_density(b: np.ndarray, x: np.ndarray, y: np.ndarray, chunk: int = 250) -> np.ndarray:
    """logistic_100k's log density (tier2_xp.logistic_100k) at many points b (n, 21) at once, in chunks."""
    out = np.empty(len(b))
    for i in range(0, len(b), chunk):
        part = b[i:i + chunk]
        eta = part[:, 0] + x @ part[:, 1:].T  # (rows, chunk)
        out[i:i + chunk] = (y @ eta - np.logaddexp(0.0, eta).sum(0)) - 0.5 * (part**2).sum(1) / 2.5**2
    return out


def write_glm_reference(name: str, args) -> None:
    """logistic_100k by independence Metropolis-Hastings: a 100,000-row likelihood is Gaussian to a fraction of a
    percent, so a multivariate-t proposal (nu = 10) centred at the posterior mode (Newton's method) with the inverse
    Hessian there as its scale is accepted almost always, and each proposal costs one density evaluation, all of
    them as matrix products; --chains chains of --warmup + --draws steps, each started at its first proposal."""
    import arviz as az  # noqa: F401  (finish computes R-hat with it)
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    model = tier2_xp().TIER2_XP[name]
    saved = read(name)
    data = arrays(saved)
    x, y = data["X"], data["y"].astype(np.float64)
    start = time.perf_counter()
    z = np.concatenate([np.ones((len(x), 1)), x], axis=1)
    b = np.zeros(z.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(z @ b)))
        grad = z.T @ (y - p) - b / 2.5**2
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.eye(len(b)) / 2.5**2
        step = np.linalg.solve(hess, grad)
        b = b + step
        if np.abs(step).max() < 1e-12:
            break
    chol = np.linalg.cholesky(np.linalg.inv(hess))
    rng = np.random.default_rng([args.seed, 5])
    n_steps, dim, nu = args.warmup + args.draws, len(b), 10.0
    normal = rng.standard_normal((args.chains, n_steps, dim))
    scale = np.sqrt(nu / rng.chisquare(nu, (args.chains, n_steps, 1)))
    proposals = b + scale * (normal @ chol.T)
    white = np.linalg.solve(chol, (proposals - b).reshape(-1, dim).T).T
    log_q = -0.5 * (nu + dim) * np.log1p((white**2).sum(1) / nu)
    log_p = glm_rows_log_density(proposals.reshape(-1, dim), x, y)
    checks = [abs((model.log_density(np, q, data) - model.log_density(np, b, data)) - (lp - log_p_mode))
              for q, lp, log_p_mode in zip(proposals.reshape(-1, dim)[:3], log_p[:3],
                                           [glm_rows_log_density(b[None], x, y)[0]] * 3)]
    assert max(checks) < 1e-6, checks  # the batched density is the transcription's
    log_w = (log_p - log_q).reshape(args.chains, n_steps)
    draws = np.empty((args.chains, n_steps, dim))
    accepted = 0
    uniforms = np.log(rng.random((args.chains, n_steps)))
    for c in range(args.chains):
        current = 0
        for t in range(n_steps):
            if uniforms[c, t] < log_w[c, t] - log_w[c, current]:
                current, accepted = t, accepted + 1
            draws[c, t] = proposals[c, current]
    draws = draws[:, args.warmup:]
    wall = time.perf_counter() - start
    sampler = {"sampler": "independence Metropolis-Hastings in numpy: multivariate-t (nu = 10) proposals at the "
                          "posterior mode (Newton) scaled by the inverse Hessian there (make_tier2.write_glm_reference)"}
    stats = {"acceptance": round(accepted / (args.chains * n_steps), 4)}
    jdata = {k: jnp.asarray(v) for k, v in data.items()}
    finish(name, args, saved, model, jdata, draws, wall, sampler, stats)


def finish(name, args, saved, model, jdata, draws, wall, sampler: dict, stats: dict) -> None:
    """R-hat and ESS of the draws (chains, draws, dim), the kept draws constrained, thinned and rounded, written."""
    import arviz as az
    import jax
    import jax.numpy as jnp

    dim = draws.shape[-1]
    idata = az.convert_to_inference_data(draws)
    rhat = float(np.nanmax(az.rhat(idata).to_array().values))
    ess = float(np.nanmin(az.ess(idata).to_array().values))
    thin = max(1, int(np.ceil(args.chains * args.draws / args.keep)))
    kept = draws[:, ::thin].reshape(-1, dim)
    constrain = jax.jit(jax.vmap(lambda q: model.constrain(jnp, q, jdata)))
    params = np.concatenate([np.asarray(constrain(kept[i:i + 4096])) for i in range(0, len(kept), 4096)])
    every = max(1, args.draws * args.chains // 40_000)
    subset = draws[:, ::every]
    c_draws = np.concatenate([np.asarray(constrain(part)) for part in
                              np.array_split(subset.reshape(-1, dim), max(1, subset.size // 4_000_000))])
    c_idata = az.convert_to_inference_data(c_draws.reshape(args.chains, subset.shape[1], -1))
    c_rhat = float(np.nanmax(az.rhat(c_idata).to_array().values))
    info = {**sampler, "chains": args.chains, "warmup": args.warmup, "draws_per_chain": args.draws,
            "seed": args.seed, "rhat_max": round(rhat, 4), "rhat_max_constrained": round(c_rhat, 4),
            "ess_bulk_min": round(ess), **stats, "kept": len(params), "thinned_every": thin,
            "wall_s": round(wall), "made": time.strftime("%Y-%m-%d", time.gmtime()),
            "command": "experiments/make_tier2.py reference " + " ".join(sys.argv[2:])}
    print(f"{name}: {json.dumps(info)}", flush=True)
    if rhat > args.rhat_limit or not np.isfinite(params).all():
        print(f"{name}: R-hat {rhat:.4f} > {args.rhat_limit} (or non-finite draws): nothing written", flush=True)
        return
    saved.update(reference=rounded(params), info=np.array(json.dumps(info)))
    np.savez_compressed(path_of(name), **saved)
    print(f"{name}: reference written, {path_of(name).stat().st_size / 1e6:.2f} MB", flush=True)


def table() -> None:
    """The second tier's table for docs/models.md, from the data files' ``info`` (and suite.py's kinds)."""
    spec = importlib.util.spec_from_file_location("tier2_suite", PACKAGE / "suite.py")
    suite = importlib.util.module_from_spec(spec)
    sys.modules["tier2_suite"] = suite
    spec.loader.exec_module(suite)
    print("| posterior | dim | kind | reference (how made) | kept draws | R-hat max | min bulk ESS |")
    print("|---|---|---|---|---|---|---|")
    for name in SIMULATE:
        saved = read(name)
        info = json.loads(str(saved["info"])) if str(saved["info"]) else None
        dim = len(saved["param_names"])
        if info is None:
            print(f"| `{name}` | {dim} | {suite.TIER2[name].kind} | not made yet | | | |")
            continue
        wall = f"{info['wall_s']} s" if info["wall_s"] else "wall time not recorded"
        how = ("NumPyro NUTS" if info["sampler"].startswith("NumPyro") else "independence MH (Laplace-t)")
        extra = (f", target {info['target_accept']}, {info['divergences']} divergences" if "divergences" in info
                 else f", acceptance {info['acceptance']}")
        print(f"| `{name}` | {dim} | {suite.TIER2[name].kind} | {how}, {info['chains']} chains x ({info['warmup']} + {info['draws_per_chain']})"
              f"{extra}, {wall} | {info['kept']} (every {info['thinned_every']}) | "
              f"{info['rhat_max']} ({info['rhat_max_constrained']} constrained) | {info['ess_bulk_min']} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["data", "reference", "table"])
    parser.add_argument("--posteriors", nargs="+", choices=list(SIMULATE), default=list(SIMULATE))
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--target-accept", type=float, default=0.9)
    parser.add_argument("--dense", action="store_true", help="a dense metric (default diagonal)")
    parser.add_argument("--max-tree-depth", type=int, default=10)
    parser.add_argument("--keep", type=int, default=10_000, help="reference draws kept (thinned evenly)")
    parser.add_argument("--rhat-limit", type=float, default=1.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nuts-glm", action="store_true",
                        help="logistic_100k by NUTS too (default: independence Metropolis-Hastings, write_glm_reference)")
    args = parser.parse_args(argv)
    if args.what == "table":
        table()
        return 0
    for name in args.posteriors:
        if args.what == "data":
            write_data(name)
        elif name == "logistic_100k" and not args.nuts_glm:
            write_glm_reference(name, args)
        else:
            write_reference(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
