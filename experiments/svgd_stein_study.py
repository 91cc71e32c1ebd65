"""Does Stein's identity on SVGD's particles flag the posteriordb posteriors where SVGD misses the gold standard,
and stay quiet on exact draws? (bayesx.diagnostics.stein; issue 34.)

For each posterior: SVGD with its defaults (seed 0, the Gaussian frame), its particles' Stein statistics in the
frame's coordinates and their errors against the reference draws; then the same statistics on 50 random subsets of
100 reference draws mapped into the same frame (exact draws: the negative control). One JSON line per posterior.

    python experiments/svgd_stein_study.py [names...] > svgd_stein.jsonl
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from bayesx.diagnostics.stein import stein_checks
from bayesx.methods.base import RunInputs
from bayesx.methods.vi import svgd as svgd_module
from bayesx.targets.posteriordb import NAMES
from bayesx.targets.posteriordb.target import PosteriorDB, reference_errors

SUBSETS, SUBSET_SIZE = 50, 100


def svgd_with_frame(target):
    """SVGD's own fit (defaults, seed 0) and the frame it ran in."""
    frames = []
    fit_frame = svgd_module.fit_frame

    def keep(*args):
        frame, tag = fit_frame(*args)
        frames.append(frame)
        return frame, tag

    svgd_module.fit_frame = keep
    try:
        method = svgd_module.SVGD()
        gen = torch.Generator().manual_seed(0)
        fit = method.approximate(target, RunInputs(method.initial_points(target, 4, gen), gen, progress=False))
    finally:
        svgd_module.fit_frame = fit_frame
    return fit, frames[0]


def study(name: str) -> dict:
    target = PosteriorDB(name=name)
    fit, frame = svgd_with_frame(target)
    draws = fit.approximation.draws
    row = {"name": name, **reference_errors(target.constrain(draws).numpy(), target.posterior.reference),
           **{k: v for k, v in fit.metrics.items() if k.startswith("stein_")}}
    reference = torch.tensor(target.posterior.unconstrain(target.posterior.reference), dtype=draws.dtype)
    w = torch.linalg.solve_triangular(frame.gaussian.scale, (reference - frame.gaussian.mean).T, upper=False).T
    _, grad = frame.density_and_grad(target, w)
    rng = np.random.default_rng(1)
    subsets = [stein_checks(w[idx], grad[idx]) for idx in
               (torch.as_tensor(rng.choice(len(w), SUBSET_SIZE, replace=False)) for _ in range(SUBSETS))]
    row.update({"exact_spread_min_q02": float(np.quantile([s["stein_spread_min"] for s in subsets], 0.02)),
                "exact_score_zmax_q98": float(np.quantile([s["stein_score_zmax"] for s in subsets], 0.98)),
                "exact_subsets_flagged": sum(s["stein_spread_flagged"] > 0 for s in subsets)})
    return row


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or NAMES
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        print(f"svgd_stein_study: not in the suite: {', '.join(unknown)}; choose from {', '.join(NAMES)}",
              file=sys.stderr)
        return 2
    for name in names:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in study(name).items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
