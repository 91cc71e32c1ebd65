"""What NUTS's divergence ladder buys and costs: the same posteriors with ``raise_target_accept`` at its default
([0.95, 0.99]: where the first 500 draws diverge on more than 0.2% of transitions, re-tune at the next target) and
off ([]), by seed, from one store (issue 56, part 4).

    bayesx run -m model=posteriordb model.name=eight_schools_centered,horseshoe,sv_latent,hier_logistic \\
        method=nuts "method.raise_target_accept=[0.95,0.99],[]" seed=0,1 experiment_name=ladder
    python experiments/ladder_choice.py --uri sqlite:///mlflow.db --out results/ladder_choice.md

Per run: the target acceptance it ended at, its divergent transitions, gradients per unit of min bulk ESS (warm-up,
probes and re-tunes included: what the ladder costs, independent of how busy the machine was) and the worst errors
of the posterior means and sds against the reference draws, in reference sds (what it buys). Where the latest run of
a (posterior, rule, seed) is taken.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RULES = {"[0.95, 0.99]": "ladder [0.95, 0.99]", "[]": "no ladder"}


def number(value, digits: int = 3) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}g}"


def table(runs) -> list[str]:
    """One row per (posterior, seed): each rule's target, divergences, gradients per ESS, ref errors; the cost ratio."""
    runs = runs[runs["status"] == "FINISHED"].sort_values("start_time")
    latest = {}
    for _, run in runs.iterrows():
        rule = RULES.get(str(run.get("params.method.raise_target_accept")))
        if rule:
            latest[(run["params.model.name"], run["tags.seed"], rule)] = run
    lines = ["| posterior | seed | rule | target reached | divergent | gradients per ESS | mean error (max) | "
             "sd error (max) | R-hat |", "|---|---|---|---|---|---|---|---|---|"]
    for posterior, seed in sorted({(p, s) for p, s, _ in latest}):
        for rule in RULES.values():
            run = latest.get((posterior, seed, rule))
            if run is None:
                continue
            grads = run["metrics.n_grad_evals"] + run["metrics.n_grad_evals_warmup"]
            target = run.get("metrics.target_accept_final")
            lines.append(f"| {posterior} | {seed} | {rule} | {number(target if target == target else 0.8)} | "
                         f"{number(run['metrics.n_divergent'], 4)} | {number(grads / run['metrics.ess_bulk_min'])} | "
                         f"{number(run['metrics.ref_mean_err_max'], 2)} | {number(run['metrics.ref_sd_err_max'], 2)} | "
                         f"{number(run['metrics.rhat_max'], 4)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", required=True, help="the store of the sweep above")
    parser.add_argument("--experiment", default="ladder")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from bayesx.store.tracking import search_runs

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    lines = ["# The divergence ladder: what raising target_accept buys and costs", "",
             f"Made by: `python experiments/ladder_choice.py {' '.join(argv if argv is not None else sys.argv[1:])}` "
             f"from the sweep in its docstring; table written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
             f"at {commit.strip()}.", "",
             "Gradients per ESS count every gradient of the run (warm-up, dropped probes, re-tunes); errors are in "
             "reference sds (the horseshoe's scales on the log scale).", "",
             *table(search_runs(args.uri, args.experiment)), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
