"""A sweep's comparison, on its parent run: what ``bayesx report`` prints, as files the MLflow UI shows, and a
description that says which run won on which criterion.

When a sweep ends (:meth:`bayesx.tracking.Tracker.end_parent`) its parent run gets, under ``comparison/``:

    report.md           the ``bayesx report`` table of the sweep's runs (their key metrics, rounded)
    table.csv           the same table, unrounded (MLflow shows it as a table)
    report.png          ``bayesx report``'s bars: one bar per run for each key metric
    error_vs_cost.png   accuracy against cost, one point per run, one colour per method: the error against the
                        reference posterior (``posterior_mean_err``, or the posteriordb gold standard's
                        ``ref_mean_err_max``) against gradient evaluations and against wall time
    ess_per_s.png       samplers only: the smallest bulk ESS per second of sampling, one bar per run

and its description (MLflow's note, ``mlflow.note.content``) names the winner on each criterion that at least
two runs report (:data:`CRITERIA`), or says that the runs tie. The whole is a courtesy: a store that fails
here leaves a warning, never a failed sweep.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bayesx.report import finite
from bayesx.tracking import DESCRIPTION_TAG as NOTE_TAG  # MLflow's run description
FOLDER = "comparison"
BEGIN, END = "<!-- bayesx sweep comparison -->", "<!-- end of the bayesx sweep comparison -->"

# (metric, True where lower wins, what it measures); the first two of these a run reports are plotted against cost
ERRORS = ("posterior_mean_err", "ref_mean_err_max")
CRITERIA = (
    ("posterior_mean_err", True, "closest posterior means to the reference"),
    ("posterior_sd_err", True, "closest posterior sds to the reference"),
    ("ref_mean_err_max", True, "closest means to the posteriordb gold standard"),
    ("ref_w1_mean", True, "closest marginals to the posteriordb gold standard"),
    ("ess_bulk_min_per_s", False, "most effective draws per second"),
    ("ess_bulk_min_per_grad", False, "most effective draws per gradient"),
    ("test_lpd", False, "best held-out log predictive density"),
    ("test_accuracy", False, "best held-out accuracy"),
    ("test_nll", True, "best held-out negative log likelihood"),
    ("wall_time_s", True, "fastest"),
)


def scored_metrics(sweep):
    """The sweep's runs' values of the criteria and costs (a DataFrame, one row per run in the table's order)."""
    import pandas as pd

    names = dict.fromkeys([m for m, _, _ in CRITERIA] + [*ERRORS, "n_grad_evals", "wall_time_s"])
    return pd.DataFrame({m: sweep.runs[f"metrics.{m}"].to_numpy() for m in names if f"metrics.{m}" in sweep.runs})


def unique_labels(labels: list[str], run_ids: list[str]) -> list[str]:
    """The runs' labels, with the run id added where two runs share one (two seeds of a method)."""
    return [label if labels.count(label) == 1 or label == run else f"{label} {run}"
            for label, run in zip(labels, run_ids)]


def winners(table, labels: list[str]) -> list[str]:
    """One sentence per criterion that two or more runs report: the best run, its value and the runner-up's,
    or that they tie."""
    from bayesx.report import format_number

    out = []
    for metric, lower, meaning in CRITERIA:
        if metric not in table:
            continue
        scored = sorted(((float(v), labels[i]) for i, v in enumerate(table[metric]) if finite(v)),
                        key=lambda pair: pair[0] if lower else -pair[0])
        if len(scored) < 2:
            continue
        (best, who), (second, next_who) = scored[0], scored[1]
        word = "lowest" if lower else "highest"
        if best == second and all(v == best for v, _ in scored):
            out.append(f"- {metric}: all {len(scored)} runs tie at {format_number(best)}")
        else:
            out.append(f"- {word} {metric} ({meaning}): **{who}** {format_number(best)} "
                       f"(next: {next_who} {format_number(second)})")
    return out


def warnings_lines(sweep, labels: list[str]) -> list[str]:
    """Each run's health warnings (its ``health_warnings`` tag), which say why a run fell short."""
    column = "tags.health_warnings"
    if column not in sweep.runs:
        return []
    return [f"- {labels[i]}: {text}" for i, text in enumerate(sweep.runs[column])
            if isinstance(text, str) and text.strip()]


def spread_axes(ax, xs, ys) -> None:
    """Log scales on an axis whose positive values span more than a factor of 20, plain numbers on its ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for values, axis, scale in ((xs, ax.xaxis, ax.set_xscale), (ys, ax.yaxis, ax.set_yscale)):
        positive = [float(v) for v in values if finite(v) and v > 0]
        if positive and max(positive) > 20 * min(positive):
            scale("log")
            axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k" if abs(v) >= 1000 else f"{v:.3g}"))
    ax.margins(0.15)


def error_vs_cost(table, labels: list[str], methods: list[str], path: Path) -> Path | None:
    """The sweep's error against the reference (the first of :data:`ERRORS` any run reports) against gradient
    evaluations and wall time, log-log, one point per run, coloured by method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    error = next((m for m in ERRORS if m in table and table[m].map(finite).sum() >= 1), None)
    costs = [c for c in ("n_grad_evals", "wall_time_s") if c in table and table[c].map(finite).any()]
    if error is None or not costs:
        return None
    colours = {m: f"C{k}" for k, m in enumerate(dict.fromkeys(methods))}
    fig, axes = plt.subplots(1, len(costs), figsize=(4.6 * len(costs), 3.6), squeeze=False, layout="constrained")
    shown = set()
    for ax, cost in zip(axes.flat, costs):
        for i in range(len(table)):
            x, y = table.at[i, cost], table.at[i, error]
            if finite(x) and finite(y) and x > 0 and y > 0:
                shown.add(methods[i])
                ax.scatter([x], [y], color=colours[methods[i]], s=40)
                ax.annotate(labels[i], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
        spread_axes(ax, table[cost], table[error])
        ax.set_xlabel(cost)
        ax.set_ylabel(f"{error} (lower is better)")
        ax.grid(alpha=0.3, which="both")
    for method in [m for m in colours if m in shown]:
        axes.flat[0].scatter([], [], color=colours[method], label=method)
    axes.flat[0].legend(fontsize=8, title="method", title_fontsize=8)
    missing = [m for m in colours if m not in shown]
    fig.suptitle(f"accuracy against cost: {error} of each run"
                 + (f" (no {error}: {', '.join(missing)})" if missing else ""), fontsize=10)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def ess_per_second(table, labels: list[str], methods: list[str], path: Path) -> Path | None:
    """Bars of ``ess_bulk_min_per_s`` for the runs that report it (the samplers), coloured by method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "ess_bulk_min_per_s"
    rows = [i for i in range(len(table)) if metric in table and finite(table.at[i, metric])]
    if not rows:
        return None
    colours = {m: f"C{k}" for k, m in enumerate(dict.fromkeys(methods))}
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(rows) + 1.4), layout="constrained")
    ax.barh(range(len(rows)), [table.at[i, metric] for i in rows], color=[colours[methods[i]] for i in rows])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([labels[i] for i in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("smallest bulk ESS per second of sampling (higher is better)")
    ax.set_title("samplers: ess_bulk_min_per_s", fontsize=10)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def log_sweep_comparison(client, uri: str, parent_run_id: str, status: str | None = None) -> str:
    """Log the sweep's comparison files on its parent run (module docstring) and return the description's text
    (markdown, between markers so a later call replaces it); "" when the sweep has no run to compare."""
    from bayesx.errors import BayesxError
    from bayesx.report import reference_lines, run_labels, select_sweep, sweep_report
    from bayesx.tracking import retry_locked, search_runs

    parent = retry_locked(client.get_run, parent_run_id)
    experiment = retry_locked(client.get_experiment, parent.info.experiment_id).name
    try:
        sweep = select_sweep(search_runs(uri, experiment), uri, parent_run_id, experiment)
    except BayesxError:  # no child run recorded: nothing to compare
        return ""
    with tempfile.TemporaryDirectory(prefix="bayesx-comparison-") as tmp:
        folder = Path(tmp)
        if status:
            sweep.parent["status"] = status  # the report's line on the sweep: as it ends, not RUNNING
        _, table, metrics = sweep_report(sweep, out=folder / "report.md")
        table.to_csv(folder / "table.csv", index=False)
        labels = unique_labels(run_labels(table, metrics), list(table["run"]))
        methods = [str(m) for m in table["method"]]
        scores = scored_metrics(sweep)
        error_vs_cost(scores, labels, methods, folder / "error_vs_cost.png")
        ess_per_second(scores, labels, methods, folder / "ess_per_s.png")
        for path in sorted(folder.iterdir()):
            retry_locked(client.log_artifact, parent_run_id, str(path), FOLDER)
        files = ", ".join(f"`{FOLDER}/{p.name}`" for p in sorted(folder.iterdir()))
    best = winners(scores, labels)
    lines = [BEGIN, f"**{len(table)} runs, {status or 'ended'}.** "
             + ("The winner on each criterion:" if best else "No criterion that two runs share to compare them on."),
             *best, ""]
    warned = warnings_lines(sweep, labels)
    lines += ["Warnings (why runs fell short):", *warned, ""] if warned else []
    lines += reference_lines(sweep)
    lines += [f"Files: {files}.", END]
    return "\n".join(lines)


def append_note(client, run_id: str, text: str) -> None:
    """Put ``text`` in the run's description (MLflow's note), replacing an earlier comparison there."""
    from bayesx.tracking import set_description_part

    if text:
        set_description_part(client, run_id, BEGIN, text, END)


def record_sweep_comparison(client, uri: str, parent_run_id: str, status: str | None = None) -> None:
    """The comparison files and the description, on the parent run (the one call where a sweep ends). A
    failure here is a warning: the sweep's runs are recorded either way."""
    try:
        append_note(client, parent_run_id, log_sweep_comparison(client, uri, parent_run_id, status))
    except Exception as exc:  # noqa: BLE001 - a courtesy, never the sweep's outcome
        print(f"bayesx: warning: the sweep's comparison was not recorded ({type(exc).__name__}: {exc})",
              file=sys.stderr)
