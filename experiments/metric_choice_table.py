"""The default NUTS metric, chosen by measurement: NUTS with mass=diag, dense and lowrank on the posteriordb suite,
read back from the store as one row per posterior (gradients per bulk ESS, R-hat, reference error) and the
summary that states the rule (``DENSE_UP_TO`` in bayesx/methods/mcmc/sampler.py).

    bayesx run -m model=posteriordb model.name=<names> method=nuts method.mass=diag,dense,lowrank \
        experiment_name=metric_choice tracking.uri=sqlite:///metric.db progress=false plots.n_coords=0
    python experiments/metric_choice_table.py --uri sqlite:///metric.db --out results/metric_choice.md

Gradients per ESS (``n_grad_evals / ess_bulk_min``) is the criterion: it does not move with the machine's load
(the wall clock does, on a shared machine), and the three metrics cost the same gradients per leapfrog step; a
dense metric's O(d^2) product per step is small beside a gradient below ~100 coordinates.

``--second-tier`` lists the runs of the suite's second tier (100-1,042 coordinates, where ``mass=auto`` is diag_grad)
one per line, killed ones included (a run stopped by hand keeps its draws, and its diagnostics say how far it got):

    bayesx run -m model=posteriordb model.name=<second-tier names> method=nuts \
        method.mass=diag_grad,diag,lowrank,dense seed=0,1 experiment_name=metric_choice_tier2 \
        tracking.uri=sqlite:///metric2.db progress=false plots.n_coords=0
    python experiments/metric_choice_table.py --second-tier --uri sqlite:///metric2.db \
        --experiment metric_choice_tier2 --out results/metric_choice_tier2.md
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from bayesx.store.tracking import experiment_runs

FORMS = ("diag", "dense", "lowrank")


def measurements(uri: str, experiment: str) -> dict[str, dict[str, dict]]:
    """{posterior: {mass: {grads_per_ess, rhat, ref_err, dim}}} of the FINISHED NUTS runs."""
    runs = experiment_runs(uri, experiment)
    if not runs:
        raise SystemExit(f"no runs of experiment '{experiment}' in {uri}; run the sweep in this module's docstring first")
    table: dict[str, dict[str, dict]] = {}
    for run in runs:
        name, mass = run.data.params.get("model.name"), run.data.params.get("method.mass")
        metrics = run.data.metrics
        if run.info.status != "FINISHED" or mass not in FORMS or "ess_bulk_min" not in metrics:
            continue
        table.setdefault(name, {})[mass] = {"grads_per_ess": metrics["n_grad_evals"] / metrics["ess_bulk_min"],
                                            "rhat": metrics["rhat_max"], "ref_err": metrics.get("ref_mean_err_max"),
                                            "dim": int(run.data.tags.get("target.dim", 0))}
    return table


def markdown(table: dict[str, dict[str, dict]], command: str) -> str:
    complete = {n: row for n, row in table.items() if all(m in row for m in FORMS)}
    ratios = {m: [row[m]["grads_per_ess"] / min(v["grads_per_ess"] for v in row.values()) for row in complete.values()]
              for m in FORMS}
    lines = ["# Which metric NUTS adapts by default: diag, dense or lowrank on the posteriordb suite", "",
             f"Made by: {command}", "",
             f"{len(complete)} posteriors (the suite without its four 400-step loop densities, whose first compile "
             "is slow on this machine), seed 0, NUTS's defaults otherwise (4 chains, 300 warm-up, 1000+ draws, "
             "init=laplace, mass_rank=10 clipped to the dimension). Cell: gradients per bulk ESS (lower is better) / "
             "R-hat max / worst mean error against posteriordb's reference draws in reference sds. Measured on a "
             "machine shared with other work: gradients per ESS does not depend on it.", "",
             "| form | geometric mean of (gradients per ESS / best form's) | median | worst | within 1.5x of the best | R-hat <= 1.01 |",
             "|---|---|---|---|---|---|"]
    for m in FORMS:
        r = ratios[m]
        lines.append(f"| {m} | {math.exp(statistics.mean(map(math.log, r))):.2f} | {statistics.median(r):.2f} | "
                     f"{max(r):.1f} | {sum(x <= 1.5 for x in r)} of {len(r)} | "
                     f"{sum(row[m]['rhat'] <= 1.01 for row in complete.values())} of {len(r)} |")
    lines += ["", "**Rule** (`mass=auto`, `DENSE_UP_TO` in bayesx/methods/mcmc/sampler.py): dense up to 100 coordinates, "
              "diag_grad above. Dense is the best or within 1.5x of the best form on most posteriors and never worse "
              "than about 5x; lowrank (the Fisher-divergence fit of draws and gradients, nutpie's form) wins where a "
              "few directions dominate (sblri/sblrc_blr, eight_schools_centered) but loses up to 5x on four of the "
              "eight nes regressions (10 coordinates; why was not investigated: its cutoff keeps only directions "
              "whose variance ratio lies outside [1/2, 2], the rest stay on the gradient-based diagonal); diag is an order of "
              "magnitude behind on correlated regressions. Above 100 coordinates the dense product and its "
              "estimate from a few hundred warm-up draws cost more than they gain (results/bench_samplers.md).", "",
              "| posterior | dim | " + " | ".join(FORMS) + " | best |", "|---|---|" + "---|" * (len(FORMS) + 1)]
    for name, row in sorted(table.items(), key=lambda item: (next(iter(item[1].values()))["dim"], item[0])):
        cells = []
        for m in FORMS:
            v = row.get(m)
            cells.append("-" if v is None else f"{v['grads_per_ess']:.1f} / {v['rhat']:.3f} / "
                                               f"{v['ref_err'] if v['ref_err'] is not None else float('nan'):.2f}")
        best = min(row, key=lambda m: row[m]["grads_per_ess"])
        lines.append(f"| {name} | {next(iter(row.values()))['dim']} | " + " | ".join(cells) + f" | {best} |")
    return "\n".join(lines) + "\n"


SECOND_TIER_FORMS = ("diag_grad", "diag", "lowrank", "dense")


def second_tier_markdown(uri: str, experiment: str, command: str, note: str) -> str:
    """One line per NUTS run of the second tier (FINISHED or KILLED with draws), by posterior and form."""
    rows = []
    for run in experiment_runs(uri, experiment):
        params, metrics = run.data.params, run.data.metrics
        if params.get("method.mass") not in SECOND_TIER_FORMS or "ess_bulk_min" not in metrics:
            continue
        rows.append((params["model.name"], int(run.data.tags.get("target.dim", 0)),
                     SECOND_TIER_FORMS.index(params["method.mass"]), params["method.mass"], params.get("seed", "0"),
                     run.info.status, metrics.get("draws_per_chain", float("nan")),
                     metrics["n_grad_evals"] / metrics["ess_bulk_min"], metrics.get("n_grad_evals_warmup", float("nan")),
                     metrics["rhat_max"], metrics.get("ref_mean_err_max", float("nan"))))
    lines = ["# The metric above 100 coordinates: NUTS on the suite's second tier", "", f"Made by: {command}", "",
             note, "",
             "| posterior | dim | mass | seed | status | draws per chain | sampling gradients per bulk ESS | "
             "warm-up gradients | R-hat max | worst mean error (reference sds) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, dim, _, mass, seed, status, draws, per_ess, warmup, rhat, err in sorted(rows):
        lines.append(f"| {name} | {dim} | {mass} | {seed} | {status} | {draws:.0f} | {per_ess:.1f} | {warmup:.0f} | "
                     f"{rhat:.3f} | {err:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uri", default="sqlite:///metric.db")
    parser.add_argument("--experiment", default="metric_choice")
    parser.add_argument("--out", type=Path, default=Path("results/metric_choice.md"))
    parser.add_argument("--command", default="the sweep in experiments/metric_choice_table.py's docstring, then "
                                              "`python experiments/metric_choice_table.py`")
    parser.add_argument("--second-tier", action="store_true", help="list the second tier's runs (module docstring)")
    parser.add_argument("--note", default="", help="the reading of the second tier's runs, set above the table")
    args = parser.parse_args()
    if args.second_tier:
        args.out.write_text(second_tier_markdown(args.uri, args.experiment, args.command, args.note))
    else:
        args.out.write_text(markdown(measurements(args.uri, args.experiment), args.command))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
