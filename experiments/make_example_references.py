"""Reference posteriors of the stochastic-volatility and mixture examples, from an independent sampler: NumPyro NUTS on
JAX transcriptions of the models (examples/sv_constrained.py, examples/mixture_constrained.py), written again here
with NumPyro's own distributions and transforms, so that neither bayesx's density, its maps onto the supports nor
its sampler is reused. Needs the bench extra (NumPyro, JAX):

    python experiments/make_example_references.py --out tests/models/example_references.npz

Each reference: 8 chains x 2,500 draws after 1,500 warm-up at target_accept 0.95, R-hat <= 1.01 checked on every
constrained parameter, thinned to ``--keep`` draws in the order bayesx reports the parameters (mu, phi, sigma,
z[0..149]; w[0..2], loc[0..2], scale[0..2]), float64.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def sv_model(y):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax

    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    half = numpyro.sample("half", dist.Beta(20.0, 1.5))  # (phi + 1) / 2
    phi = numpyro.deterministic("phi", 2 * half - 1)
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([y.shape[0]]).to_event(1))
    h0 = mu + sigma * z[0] / jnp.sqrt(1 - phi**2)

    def step(h, z_t):
        h = mu + phi * (h - mu) + sigma * z_t
        return h, h

    _, rest = lax.scan(step, h0, z[1:])
    h = jnp.concatenate([h0[None], rest])
    numpyro.sample("y", dist.Normal(0.0, jnp.exp(h / 2)).to_event(1), obs=y)


def mixture_model(x):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions.transforms import OrderedTransform

    w = numpyro.sample("w", dist.Dirichlet(jnp.ones(3)))
    loc = numpyro.sample("loc", dist.TransformedDistribution(dist.Normal(0.0, 5.0).expand([3]).to_event(1), OrderedTransform()))
    # the ordered N(0, 5) prior as bayesx's example writes it: the N(0, 5) density at the ordered values (the
    # transformed distribution's Jacobian is removed, it is the map's, not the prior's)
    numpyro.factor("loc_prior", dist.Normal(0.0, 5.0).log_prob(loc).sum()
                   - dist.TransformedDistribution(dist.Normal(0.0, 5.0).expand([3]).to_event(1), OrderedTransform()).log_prob(loc))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([3]).to_event(1))
    components = dist.Normal(loc, scale)
    numpyro.sample("x", dist.MixtureSameFamily(dist.Categorical(w), components), obs=x)


def reference(model, data: dict, names: list[str], keep: int, seed: int) -> np.ndarray:
    import jax
    from numpyro.infer import MCMC, NUTS
    from numpyro.diagnostics import split_gelman_rubin

    mcmc = MCMC(NUTS(model, target_accept_prob=0.95), num_warmup=1500, num_samples=2500, num_chains=8,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), **data)
    samples = mcmc.get_samples(group_by_chain=True)
    parts = [np.asarray(samples[n]).reshape(8, 2500, -1) for n in names]
    draws = np.concatenate(parts, -1).astype(np.float64)
    rhat = float(np.max(split_gelman_rubin(draws)))
    print(f"{names}: R-hat max {rhat:.4f}", flush=True)
    if rhat > 1.01:
        raise SystemExit(f"R-hat {rhat:.4f} > 1.01: not a reference")
    flat = draws.reshape(-1, draws.shape[-1])
    return flat[np.linspace(0, len(flat) - 1, keep).astype(int)]


def main(argv=None) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "models" / "example_references.npz")
    parser.add_argument("--keep", type=int, default=4000)
    args = parser.parse_args(argv)
    y = np.load(ROOT / "examples" / "sv_returns.npz")["y"]
    x = np.load(ROOT / "examples" / "mixture_data.npz")["x"]
    sv = reference(sv_model, {"y": y}, ["mu", "phi", "sigma", "z"], args.keep, 0)
    mixture = reference(mixture_model, {"x": x}, ["w", "loc", "scale"], args.keep, 1)
    np.savez_compressed(args.out, sv=sv.astype(np.float32), mixture=mixture)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
