"""The posteriordb suite table of every method beside NUTS (issue 34): gold-standard error, the run's own reliability
warnings, and cost, per posterior and method, over seeds; from the runs of one experiment in an MLflow store.

    bayesx run -m model=posteriordb model.name=<13 names> +experiment/rows/posteriordb=<rows> seed=0,1,2 \
        experiment_name=posteriordb_approximations_all tracking.uri=URI
    python experiments/approximation_table.py --tracking-uri URI --out results/posteriordb_approximations_all.md

A run is **off** where its worst error against the reference draws (ref_mean_err_max or ref_sd_err_max, in reference
sds) exceeds OFF (0.25); it is **warned** where its record carries one of the reliability warnings the methods give
(k-hat, the weights' ESS fraction, the weights' moments, Stein's identity for SVGD, R-hat or divergences for
samplers), read from the run's ``health_warnings`` tag, not recomputed here. The agreement table counts the four
cases per method; a failed run (a method that refuses, in one line) counts as warned and off.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

OFF = 0.25
RELIABILITY = ("psis_khat =", "weights_ess_fraction =", "by the importance weights", "Stein's identity",
               "stein_score_zmax", "rhat_max =", "divergent transitions", "the ELBO is not finite")
ORDER = ("nuts", "laplace", "vi_meanfield", "vi_fullrank", "pathfinder", "pathfinder_paper", "flowvi", "gap", "svgd")


def load(uri: str, experiment: str) -> list[dict]:
    """One dict per run: row, posterior, seed, status, metrics, warned."""
    from bayesx.store.tracking import experiment_runs

    runs = experiment_runs(uri, experiment)
    if not runs:
        raise SystemExit(f"approximation_table: no runs of experiment {experiment!r} in {uri}")
    out = []
    for run in runs:
        params = run.data.params
        if "row" not in params or "model.name" not in params or run.info.status not in ("FINISHED", "FAILED"):
            continue  # a sweep's parent, or a run still going (or killed)
        warnings = run.data.tags.get("health_warnings", "")
        failed = run.info.status == "FAILED"
        out.append({"row": params["row"], "posterior": params["model.name"], "seed": params.get("seed", "0"),
                    "failed": failed, "metrics": run.data.metrics,
                    "warned": failed or any(phrase in warnings for phrase in RELIABILITY)})
    return out


def worst(run: dict) -> float:
    m = run["metrics"]
    return max(m.get("ref_mean_err_max", float("inf")), m.get("ref_sd_err_max", float("inf")))


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def cell(runs: list[dict]) -> str:
    done = [r for r in runs if not r["failed"]]
    if not done:
        return f"failed {len(runs)}/{len(runs)}"
    mean = median([r["metrics"].get("ref_mean_err_max", float("nan")) for r in done])
    sd = median([r["metrics"].get("ref_sd_err_max", float("nan")) for r in done])
    warned = sum(r["warned"] for r in runs)
    text = f"{mean:.2f} / {sd:.2f}"
    if warned:
        text += f" **w{warned}/{len(runs)}**"
    failed = len(runs) - len(done)
    return text + (f" (failed {failed})" if failed else "")


def tables(runs: list[dict]) -> str:
    by = defaultdict(list)
    for run in runs:
        by[(run["posterior"], run["row"])].append(run)
    rows = [r for r in ORDER if any(key[1] == r for key in by)] + sorted({k[1] for k in by} - set(ORDER))
    posteriors = sorted({k[0] for k in by})
    seeds = sorted({r["seed"] for r in runs})
    lines = [f"Runs: {len(runs)} ({len(posteriors)} posteriors, seeds {', '.join(seeds)}).", "",
             "## Error against the gold standard", "",
             "Each cell: median over seeds of ref_mean_err_max / ref_sd_err_max (reference sds); **wK/N**: K of the N "
             "runs carried a reliability warning.", "",
             "| posterior | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for name in posteriors:
        lines.append(f"| {name} | " + " | ".join(cell(by[(name, r)]) if by[(name, r)] else "" for r in rows) + " |")
    lines += ["", "## Cost", "", "Each cell: median over seeds of n_grad_evals / wall_time_s.", "",
              "| posterior | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for name in posteriors:
        cells = []
        for r in rows:
            done = [x for x in by[(name, r)] if not x["failed"]]
            grads = median([x["metrics"].get("n_grad_evals", float("nan")) for x in done])
            wall = median([x["metrics"].get("wall_time_s", float("nan")) for x in done])
            cells.append(f"{grads:.3g} / {wall:.3g} s" if done else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"## Do the warnings find the runs that are off (worst error > {OFF} reference sds)?", "",
              "| method | runs | off and warned | off, not warned (missed) | within, warned (false alarm) | within, quiet |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        these = [x for key, xs in by.items() if key[1] == r for x in xs]
        off = [x["failed"] or worst(x) > OFF for x in these]
        counts = [sum(o and w for o, w in zip(off, (x["warned"] for x in these))),
                  sum(o and not x["warned"] for o, x in zip(off, these)),
                  sum(not o and x["warned"] for o, x in zip(off, these)),
                  sum(not o and not x["warned"] for o, x in zip(off, these))]
        lines.append(f"| {r} | {len(these)} | " + " | ".join(str(c) for c in counts) + " |")
    missed = sorted((x["row"], x["posterior"], x["seed"], worst(x)) for x in runs
                    if not x["failed"] and worst(x) > OFF and not x["warned"])
    alarms = sorted((x["row"], x["posterior"], x["seed"], worst(x)) for x in runs
                    if not x["failed"] and worst(x) <= OFF and x["warned"])
    lines += ["", "Missed: " + ("; ".join(f"{r} {p} seed {s} ({e:.2f})" for r, p, s, e in missed) or "none") + ".",
              "", "False alarms: " + ("; ".join(f"{r} {p} seed {s} ({e:.2f})" for r, p, s, e in alarms) or "none") + "."]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    """A heatmap of the median worst error per posterior and method, with the warned share written in each cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by = defaultdict(list)
    for run in runs:
        by[(run["posterior"], run["row"])].append(run)
    rows = [r for r in ORDER if any(key[1] == r for key in by)]
    posteriors = sorted({k[0] for k in by})
    grid = np.full((len(posteriors), len(rows)), np.nan)
    for i, name in enumerate(posteriors):
        for j, r in enumerate(rows):
            done = [worst(x) for x in by[(name, r)] if not x["failed"]]
            grid[i, j] = median(done) if done else np.nan
    fig, ax = plt.subplots(figsize=(1.1 * len(rows) + 3, 0.45 * len(posteriors) + 2))
    shown = ax.imshow(np.log10(np.clip(grid, 1e-2, 1e2)), cmap="RdYlGn_r", vmin=-2, vmax=1, aspect="auto")
    for i, name in enumerate(posteriors):
        for j, r in enumerate(rows):
            these = by[(name, r)]
            if these:
                label = "fail" if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}"
                warned = sum(x["warned"] for x in these)
                ax.text(j, i, label + (f"\nw{warned}/{len(these)}" if warned else ""), ha="center", va="center",
                        fontsize=7)
    ax.set_xticks(range(len(rows)), rows, rotation=30, ha="right")
    ax.set_yticks(range(len(posteriors)), posteriors)
    fig.colorbar(shown, label="log10 median worst error (reference sds)")
    ax.set_title(f"posteriordb: worst error against the gold standard; wK/N: runs warned (off: > {OFF})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument("--experiment", default="posteriordb_approximations_all")
    parser.add_argument("--out", type=Path, help="markdown file (default: print)")
    args = parser.parse_args()
    runs = load(args.tracking_uri, args.experiment)
    text = tables(runs)
    if args.out is None:
        print(text)
        return
    args.out.write_text(text)
    plot(runs, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
