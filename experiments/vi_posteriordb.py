"""Gaussian VI's old and new defaults on the posteriordb suite (issue 34): one line of JSON per run.

    python experiments/vi_posteriordb.py new '{}' /tmp/new.jsonl                                   # every posterior
    python experiments/vi_posteriordb.py old '{"whiten": false, "init": "points"}' /tmp/old.jsonl diamonds,arK

Each run is what ``bayesx run model=posteriordb model.name=<name> method=vi method.family=<family> seed=0`` fits (the
preset rows vi_meanfield and vi_fullrank of experiment=posteriordb) and scores: the method's ``infer`` with the
runner's initial points and generator, then the target's ``evaluate`` against posteriordb's reference draws, without
the runner's MLflow logging and plots (the old settings reproduce results/posteriordb.md's rows to four digits).
One torch thread; the wall time is the fit's and the draws' weighing, not the scoring.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bayesx.methods.base import RunInputs
from bayesx.methods.vi.gaussian import GaussianVI
from bayesx.targets.posteriordb import NAMES
from bayesx.targets.posteriordb.target import PosteriorDB


def run(name: str, family: str, options: dict, seed: int = 0) -> dict:
    target, method = PosteriorDB(name=name), GaussianVI(family=family, **options)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    result = method.infer(target, RunInputs(method.initial_points(target, 4, gen), gen, progress=False))
    wall = time.perf_counter() - start
    scores = target.evaluate(result.draws).metrics if result.draws is not None else {}
    return {"name": name, "family": family, "wall": wall, "error": result.error,
            **{k: scores.get(k) for k in ("ref_mean_err_max", "ref_sd_err_max")},
            **{k: result.metrics.get(k) for k in ("psis_khat", "elbo_final", "n_grad_evals", "converged")},
            "start": result.tags.get("vi_start")}


def main() -> None:
    label, options, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    names = sys.argv[4].split(",") if len(sys.argv) > 4 else NAMES
    torch.set_num_threads(1)
    for name in names:
        for family in ("meanfield", "fullrank"):
            row = {"label": label, **run(name, family, options)}
            print(json.dumps(row), flush=True)
            with open(out, "a") as stream:
                stream.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
