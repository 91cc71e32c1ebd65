"""Posterior error against a reference run, for methods whose draws are only approximately exact.

AE-HMC with latent_dim < D proposes on the decoder's manifold, so ESS and accuracy alone can
hide a wrong posterior. The reference is a NUTS run of this product (diag metric, Laplace start),
cached on disk by a hash of the model, data and reference settings, so a sweep pays for it once.

    posterior_mean_err = mean_j |mean_j - mean_ref_j| / sd_ref_j
    posterior_sd_err   = mean_j |sd_j - sd_ref_j| / sd_ref_j

(mean absolute errors over coordinates, in units of the reference posterior standard deviation).
The reference's own Monte Carlo error puts a floor of about 0.8 / sqrt(ESS_ref) under the first.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bayesx.diagnostics import convergence
from bayesx.errors import RunInterrupted


@dataclass
class Reference:
    mean: np.ndarray
    sd: np.ndarray
    ess_bulk_min: float
    path: Path
    seconds: float  # time spent now: 0 when read from the cache


def cache_key(parts: dict) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def reference_moments(target, key_parts: dict, cache_dir: Path, num_warmup: int = 500, num_draws: int = 500,
                      n_chains: int = 4, max_tree_depth: int = 10, seed: int = 12345,
                      progress: bool | None = None) -> Reference:
    """Mean and sd of the posterior from a cached or new NUTS run."""
    settings = {"num_warmup": num_warmup, "num_draws": num_draws, "n_chains": n_chains,
                "max_tree_depth": max_tree_depth, "seed": seed}
    path = Path(cache_dir) / f"{cache_key({**key_parts, **settings})}.npz"
    if path.exists():
        saved = np.load(path)
        return Reference(saved["mean"], saved["sd"], float(saved["ess_bulk_min"]), path, 0.0)
    from bayesx.methods.base import RunInputs
    from bayesx.methods.mcmc.nuts import (
        NUTS,  # the reference is a product run like any other
    )

    start = time.perf_counter()
    gen = torch.Generator(device=target.device).manual_seed(seed)
    nuts = NUTS(max_tree_depth=max_tree_depth, num_warmup=num_warmup, num_draws=num_draws, init="laplace")
    print(f"computing the NUTS reference posterior ({n_chains} chains, {num_warmup}+{num_draws} iterations); "
          f"cached at {path}")
    result = nuts.sample(target, RunInputs(target.initial_point(n_chains, gen), gen, progress))
    if result.interrupted:
        raise RunInterrupted("interrupted while computing the reference posterior (nothing cached)")
    draws = result.draws.numpy()
    flat = draws.reshape(-1, draws.shape[-1])
    ess = float(convergence.summarize(draws)["ess_bulk_min"])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, mean=flat.mean(0), sd=flat.std(0, ddof=1), ess_bulk_min=ess)
    return Reference(flat.mean(0), flat.std(0, ddof=1), ess, path, time.perf_counter() - start)


def posterior_error(draws: np.ndarray, reference: Reference) -> dict[str, float]:
    flat = draws.reshape(-1, draws.shape[-1])
    sd_ref = np.maximum(reference.sd, 1e-300)
    return {"posterior_mean_err": float(np.mean(np.abs(flat.mean(0) - reference.mean) / sd_ref)),
            "posterior_sd_err": float(np.mean(np.abs(flat.std(0, ddof=1) - reference.sd) / sd_ref)),
            "reference_ess_bulk_min": reference.ess_bulk_min}
