"""Does Stein's identity on SVGD's particles flag the posteriordb posteriors where SVGD misses the gold standard,
and stay quiet on exact draws? (bayesx.diagnostics.stein; issue 34.)

For each posterior: ``bayesx run method=svgd`` with its defaults (seed 0), whose record holds the Stein metrics and
the errors against the reference draws; then, as the negative control, the same statistics on 50 random subsets of
100 reference draws (exact draws), whitened by the reference draws' own mean and covariance (SVGD's frame is a
Gaussian VI fit of the same posterior: the nearest Gaussian, fitted differently). One JSON line per posterior.

    python experiments/svgd_stein_study.py [--tracking-uri URI] [names...] > svgd_stein.jsonl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from bayesx.diagnostics.stein import stein_checks, stein_warnings
from bayesx.targets.posteriordb import NAMES
from bayesx.targets.posteriordb.target import PosteriorDB

ROOT = Path(__file__).resolve().parents[1]
SUBSETS, SUBSET_SIZE = 50, 100
EXPERIMENT = "svgd_stein_study"


def svgd_run(name: str, uri: str) -> dict[str, float]:
    """One ``bayesx run method=svgd`` in a subprocess; its metrics from the store."""
    from bayesx.store.tracking import experiment_runs

    command = [sys.executable, "-m", "bayesx", "run", "method=svgd", "model=posteriordb", f"model.name={name}",
               "seed=0", f"experiment_name={EXPERIMENT}", f"tracking.uri={uri}", "save_draws=false",
               "progress=false", "plots.n_coords=0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"svgd_stein_study: the SVGD run on {name} failed: {done.stderr.strip()[-500:]}")
    run = experiment_runs(uri, EXPERIMENT)[0]  # the newest
    return dict(run.data.metrics)


def exact_draws_control(name: str) -> dict[str, float]:
    """The Stein statistics of 100-draw subsets of the reference draws, whitened by their own Gaussian."""
    target = PosteriorDB(name=name)
    q = torch.tensor(target.posterior.unconstrain(target.posterior.reference), dtype=torch.float64)
    mean = q.mean(0)
    scale = torch.linalg.cholesky(torch.cov(q.T).reshape(q.shape[1], q.shape[1]))
    w = torch.linalg.solve_triangular(scale, (q - mean).T, upper=False).T
    _, grad = target.log_prob_and_grad(q)
    grad_w = grad @ scale
    rng = np.random.default_rng(1)
    subsets = [stein_checks(w[idx], grad_w[idx]) for idx in
               (torch.as_tensor(rng.choice(len(w), SUBSET_SIZE, replace=False)) for _ in range(SUBSETS))]
    return {"exact_spread_min_q02": float(np.quantile([s["stein_spread_min"] for s in subsets], 0.02)),
            "exact_score_zmax_q98": float(np.quantile([s["stein_score_zmax"] for s in subsets], 0.98)),
            "exact_subsets_flagged": float(sum(bool(stein_warnings(s)) for s in subsets))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="posteriordb posteriors (default: the whole suite)")
    parser.add_argument("--tracking-uri", default=None, help="default: a temporary SQLite store")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in NAMES]
    if unknown:
        print(f"svgd_stein_study: not in the suite: {', '.join(unknown)}; choose from {', '.join(NAMES)}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        uri = args.tracking_uri or f"sqlite:///{tmp}/mlflow.db"
        for name in args.names or NAMES:
            metrics = svgd_run(name, uri)
            row = {"name": name, **{k: metrics[k] for k in sorted(metrics) if k.startswith(("stein_", "ref_"))},
                   **exact_draws_control(name)}
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
