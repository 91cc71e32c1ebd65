"""A sweep's answer (which method, at what error, at what cost, and whether to trust it): at the end of the sweep on
the terminal, and on its parent run as files the MLflow UI shows and a description.

When a sweep's parent run has ended (:func:`end_sweep`, from the sweep's Hydra callback in bayesx.cli.sweep; or
again when a resumed job settles it, through the runner's :func:`parent_ended`) it gets, under ``comparison/``:

    report.md           the ``bayesx report`` table of the sweep's runs (their key metrics, rounded)
    table.csv           the same table, unrounded (MLflow shows it as a table)
    report.png          ``bayesx report``'s bars: one bar per run for each key metric
    error_vs_cost.png   accuracy against cost, one point per run, one colour per method, hollow where the run's own
                        diagnostics say it is unreliable (bayesx.reports.compare.check): the error against the reference
                        posterior (``posterior_mean_err``, or the posteriordb gold standard's ``ref_mean_err_max``)
                        against gradient evaluations and against wall time
    ess_per_s.png       samplers only: the smallest bulk ESS per second of sampling, one bar per run

its metrics ``<metric>/<run>`` (each run's error, wall time and gradients, which the Overview lists), and its
description (MLflow's note, ``mlflow.note.content``, which the Overview shows too) opens with the answer
table (:func:`answer_table`: per run its error, wall time, gradients and whether it is reliable) and the
error-against-cost plot, then names the winner on each criterion that at least two runs report (:data:`CRITERIA`):
a tie where the best values are equal as printed, and an unreliable winner as unreliable, beside the best reliable
run. The sweeping process prints the same answer table on the terminal (:func:`sweep_answer`). The whole is a
courtesy: a store that fails here leaves a warning, never a failed sweep.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from pathlib import Path

from bayesx.reports.compare import ERROR_METRICS as ERRORS
from bayesx.reports.compare import reliability, unreliable
from bayesx.reports.report import finite
from bayesx.store.tracking import DESCRIPTION_TAG as NOTE_TAG  # MLflow's run description

FOLDER = "comparison"
PLOT = "error_vs_cost.png"
TERMINAL_WIDTH = 100  # characters the answer table printed at the end of a sweep fits
DESCRIBED_RUNS = 30  # rows of the answer table in the description (MLflow caps a tag's length); the rest: report.md
BEGIN, END = "<!-- bayesx sweep comparison -->", "<!-- end of the bayesx sweep comparison -->"

# (metric, True where lower wins, what it measures); the first of ERRORS a run reports is plotted against cost
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


def winners(table, labels: list[str], verdicts: list[str] | None = None) -> list[str]:
    """One sentence per criterion that two or more runs report: the best run and its value, and the runner-up's;
    a tie where several runs share the best value as printed (all of them: "all N runs tie"). ``verdicts`` (per run,
    :func:`bayesx.reports.compare.check`) mark an unreliable run among the best as such, and the best reliable run is named
    beside it."""
    from bayesx.reports.markdown import format_number

    verdicts = verdicts or [""] * len(labels)

    def named(i: int, value: str = "") -> str:
        flag = f" (unreliable: {verdicts[i]})" if unreliable(verdicts[i]) else ""
        return f"**{labels[i]}**{value}{flag}"

    out = []
    for metric, lower, meaning in CRITERIA:
        if metric not in table:
            continue
        scored = sorted(((float(v), i) for i, v in enumerate(table[metric]) if finite(v)),
                        key=lambda pair: pair[0] if lower else -pair[0])
        if len(scored) < 2:
            continue
        shown = format_number(scored[0][0])
        best = [i for v, i in scored if format_number(v) == shown]
        rest = [(v, i) for v, i in scored if format_number(v) != shown]
        if not rest:
            out.append(f"- {metric}: all {len(scored)} runs tie at {shown}")
            continue
        word = "lowest" if lower else "highest"
        who = (f"tie at {shown} between {', '.join(named(i) for i in best)}" if len(best) > 1
               else named(best[0], f" {shown}"))
        line = f"- {word} {metric} ({meaning}): {who} (next: {labels[rest[0][1]]} {format_number(rest[0][0])})"
        if any(unreliable(verdicts[i]) for i in best):
            trusted = [(v, i) for v, i in scored if not unreliable(verdicts[i])]
            line += (f"; reliable best: **{labels[trusted[0][1]]}** {format_number(trusted[0][0])}" if trusted
                     else "; no reliable run reports it")
        out.append(line)
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


def error_metric(table) -> str | None:
    """The first of :data:`ERRORS` any run of ``table`` reports: what the comparison is about."""
    return next((m for m in ERRORS if m in table and table[m].map(finite).sum() >= 1), None)


def error_vs_cost_figure(table, labels: list[str], methods: list[str], flagged: list[bool] | None = None):
    """The figure of :func:`error_vs_cost` (None where no run reports an error or a cost): one panel per cost, a point
    per run coloured by method, hollow where ``flagged`` (the run's diagnostics say it is unreliable), named in the
    legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flagged = flagged or [False] * len(table)
    error = error_metric(table)
    costs = [c for c in ("n_grad_evals", "wall_time_s") if c in table and table[c].map(finite).any()]
    if error is None or not costs:
        return None
    colours = {m: f"C{k}" for k, m in enumerate(dict.fromkeys(methods))}
    fig, axes = plt.subplots(1, len(costs), figsize=(4.6 * len(costs), 3.6), squeeze=False, layout="constrained")
    shown, hollow = set(), False
    for ax, cost in zip(axes.flat, costs):
        for i in range(len(table)):
            x, y = table.at[i, cost], table.at[i, error]
            if finite(x) and finite(y) and x > 0 and y > 0:
                shown.add(methods[i])
                hollow |= flagged[i]
                colour = colours[methods[i]]
                ax.scatter([x], [y], s=40, edgecolors=colour, linewidths=1.5,
                           facecolors="none" if flagged[i] else colour)
                ax.annotate(labels[i] + (" (unreliable)" if flagged[i] else ""), (x, y), fontsize=7, xytext=(4, 3),
                            textcoords="offset points")
        spread_axes(ax, table[cost], table[error])
        ax.set_xlabel(cost)
        ax.set_ylabel(f"{error} (lower is better)")
        ax.grid(alpha=0.3, which="both")
    for method in [m for m in colours if m in shown]:
        axes.flat[0].scatter([], [], color=colours[method], label=method)
    if hollow:
        axes.flat[0].scatter([], [], facecolors="none", edgecolors="grey", linewidths=1.5,
                             label="hollow: unreliable (R-hat/ESS, k-hat, warnings)")
    axes.flat[0].legend(fontsize=8, title="method", title_fontsize=8)
    missing = [m for m in colours if m not in shown]
    fig.suptitle(f"accuracy against cost: {error} of each run"
                 + (f" (no {error}: {', '.join(missing)})" if missing else ""), fontsize=10)
    return fig


def error_vs_cost(table, labels: list[str], methods: list[str], path: Path,
                  flagged: list[bool] | None = None) -> Path | None:
    """The sweep's error against the reference (the first of :data:`ERRORS` any run reports) against gradient
    evaluations and wall time, one point per run, coloured by method, hollow where the run is unreliable; written
    to ``path`` (None where there is nothing to plot)."""
    import matplotlib.pyplot as plt

    fig = error_vs_cost_figure(table, labels, methods, flagged)
    if fig is None:
        return None
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


def answer_table(sweep, labels: list[str], verdicts: list[str]):
    """The sweep's answer, one row per run: what tells it apart (``run``: method and any other swept key), its error
    against the reference (the first of :data:`ERRORS` the runs report; no such column without one), wall time,
    gradient evaluations, and ``reliable``: ``yes``, ``no: <why>`` (:func:`bayesx.reports.compare.check`), or ``-`` where
    nothing judges it."""
    import pandas as pd

    runs = sweep.runs
    table = pd.DataFrame({"run": labels})
    error = next((m for m in ERRORS if f"metrics.{m}" in runs and runs[f"metrics.{m}"].map(finite).any()), None)
    for metric in ([error] if error else []) + ["wall_time_s", "n_grad_evals"]:
        if f"metrics.{metric}" in runs:
            table[metric] = runs[f"metrics.{metric}"].to_numpy()
    table["reliable"] = ["-" if v == "" else "yes" if not unreliable(v) else f"no: {v}" for v in verdicts]
    return table


def answer_text(table, width: int = TERMINAL_WIDTH) -> str:
    """The answer table aligned for a terminal in at most ``width`` characters (long labels and reasons cut, values
    to 4 significant digits, absent ones '-')."""
    from bayesx.reports.compare import _text
    from bayesx.reports.markdown import format_number

    shown = table.copy()
    for column in shown.columns:
        if column not in ("run", "reliable"):
            shown[column] = [format_number(v) for v in shown[column]]
    shown["run"] = left([cut(str(v), 32) for v in shown["run"]])
    text = _text(shown)
    overflow = max(len(line) for line in text.splitlines()) - width
    if overflow > 0:
        longest = max(len(v) for v in shown["reliable"])
        shown["reliable"] = [cut(v, max(8, longest - overflow)) for v in shown["reliable"]]
    shown["reliable"] = left(list(shown["reliable"]))
    shown.columns = [c.ljust(len(shown.at[0, c])) if c in ("run", "reliable") and len(shown) else c
                     for c in shown.columns]
    return "\n".join(line.rstrip() for line in _text(shown).splitlines())


def left(values: list[str]) -> list[str]:
    """Text values padded to one width, so that the aligned table shows them left-justified."""
    most = max((len(v) for v in values), default=0)
    return [v.ljust(most) for v in values]


def cut(text: str, most: int) -> str:
    """``text`` in at most ``most`` characters, a cut one ending in '...'."""
    return text if len(text) <= most else text[:most - 3] + "..."


def parent_metrics(answer) -> dict[str, float]:
    """The answer table as the parent's own metrics, ``<metric>/<run>`` (``posterior_mean_err/nuts``), which its
    Overview lists and its metric charts group by metric; a run's label made a valid metric name."""
    import re

    out = {}
    for _, row in answer.iterrows():
        name = re.sub(r"[^\w./ -]", "_", str(row["run"]))
        for column in answer.columns:
            if column not in ("run", "reliable") and finite(row[column]):
                out[f"{column}/{name}"] = float(row[column])
    return out


def describe(sweep, scores, labels: list[str], verdicts: list[str], status: str | None, files: str, plotted: bool) -> str:
    """The description's comparison part (markdown between :data:`BEGIN` and :data:`END`): the answer table, the
    plot (MLflow serves it at ``get-artifact``), the winners, the runs' warnings, the reference runs, the files."""
    from bayesx.reports.markdown import markdown_table
    from bayesx.reports.report import ID_CHARS, reference_lines

    answer = answer_table(sweep, labels, verdicts)
    more = len(answer) - DESCRIBED_RUNS
    best = winners(scores, labels, verdicts)
    lines = [BEGIN, f"**{len(answer)} runs, {status or 'ended'}** (sweep {sweep.parent_id[:ID_CHARS]}):", "",
             markdown_table(answer.head(DESCRIBED_RUNS)), *([f"({more} more runs in `{FOLDER}/report.md`)"] if more > 0
                                                             else []), ""]
    if plotted:
        lines += [f"![error against cost](get-artifact?path={FOLDER}/{PLOT}&run_uuid={sweep.parent_id})", ""]
    lines += ["The winner on each criterion:" if best else "No criterion that two runs share to compare them on.",
              *best, ""]
    warned = warnings_lines(sweep, labels)
    lines += ["Warnings (why runs fell short):", *warned, ""] if warned else []
    lines += reference_lines(sweep)
    lines += [f"Files: {files}.", END]
    return "\n".join(lines)


def log_sweep_comparison(client, uri: str, parent_run_id: str, status: str | None = None) -> str:
    """Log the sweep's comparison files on its parent run (module docstring) and return the description's text
    (markdown, between markers so a later call replaces it); "" when the sweep has no run to compare."""
    from bayesx.errors import BayesxError
    from bayesx.reports.report import run_labels, select_sweep, sweep_report
    from bayesx.store.tracking import TrackedRun, retry_locked, search_runs

    parent = retry_locked(client.get_run, parent_run_id)
    experiment = retry_locked(client.get_experiment, parent.info.experiment_id).name
    try:
        sweep = select_sweep(search_runs(uri, experiment), uri, parent_run_id, experiment)
    except BayesxError:  # no child run recorded: nothing to compare
        return ""
    verdicts = reliability(sweep.runs)
    with tempfile.TemporaryDirectory(prefix="bayesx-comparison-") as tmp:
        folder = Path(tmp)
        if status:
            sweep.parent["status"] = status  # the report's line on the sweep: as it ends, not RUNNING
        _, table, metrics = sweep_report(sweep, out=folder / "report.md")
        table.to_csv(folder / "table.csv", index=False)
        labels = unique_labels(run_labels(table, metrics), list(table["run"]))
        methods = [str(m) for m in table["method"]]
        scores = scored_metrics(sweep)
        plotted = error_vs_cost(scores, labels, methods, folder / PLOT, [unreliable(v) for v in verdicts])
        ess_per_second(scores, labels, methods, folder / "ess_per_s.png")
        for path in sorted(folder.iterdir()):
            retry_locked(client.log_artifact, parent_run_id, str(path), FOLDER)
        files = ", ".join(f"`{FOLDER}/{p.name}`" for p in sorted(folder.iterdir()))
    TrackedRun(client, parent_run_id).log_metrics(parent_metrics(answer_table(sweep, labels, verdicts)))
    return describe(sweep, scores, labels, verdicts, status, files, plotted is not None)


def sweep_answer(uri: str, parent_run_id: str) -> str:
    """What the sweeping process prints when the sweep has ended: the answer table (:func:`answer_text`), the best
    run by the error (reliable or not, as the description says it) and where the error-against-cost plot is; ""
    when the sweep recorded no run."""
    from bayesx.errors import BayesxError
    from bayesx.reports.report import ID_CHARS, run_labels, select_sweep, build_table, metric_columns
    from bayesx.store.tracking import search_runs

    try:
        sweep = select_sweep(search_runs(uri), uri, parent_run_id)
    except BayesxError:
        return ""
    verdicts = reliability(sweep.runs)
    table, metrics = build_table(sweep, None), metric_columns(sweep, None)
    labels = unique_labels(run_labels(table, metrics), list(table["run"]))
    answer = answer_table(sweep, labels, verdicts)
    lines = [f"sweep {parent_run_id[:ID_CHARS]} ({sweep.parent.get('status')}): {len(answer)} runs", "",
             answer_text(answer), ""]
    scores = scored_metrics(sweep)
    error = error_metric(scores)
    for line in winners(scores, labels, verdicts):
        if error and f" {error} " in line:
            lines += textwrap.wrap(line[2:].replace("**", ""), TERMINAL_WIDTH, subsequent_indent="  ")
    plot = plot_location(str(sweep.parent.get("artifact_uri") or ""))
    if error and plot:
        lines.append(f"plot: {plot}")
    lines.append("browse: bayesx ui   (a table of these runs' key metrics, and the sweep's page with the plot)")
    return "\n".join(lines)


def plot_location(artifact_uri: str) -> str | None:
    """Where the parent's error-against-cost plot is: a path (relative to the working directory where it lies
    below it) for a store on this machine, else its artifact URI; None where a local plot is missing."""
    import os
    from urllib.parse import unquote, urlparse

    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme not in ("", "file"):
        return f"{artifact_uri}/{FOLDER}/{PLOT}"
    path = Path(unquote(parsed.path)) / FOLDER / PLOT
    if not path.is_file():
        return None
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except ValueError:
        return str(path)


def append_note(client, run_id: str, text: str) -> None:
    """Put ``text`` in the run's description (MLflow's note), replacing an earlier comparison there."""
    from bayesx.store.tracking import set_description_part

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


def end_sweep(tracker, parent_run_id: str, unrecorded=(), failed: bool = False) -> str:
    """End a sweep's parent run (the store's :meth:`~bayesx.store.tracking.Tracker.end_parent`: its status from
    its jobs') and then record its comparison on it; the parent's status."""
    status = tracker.end_parent(parent_run_id, unrecorded, failed)
    parent_ended(tracker, parent_run_id, status)
    return status


def parent_ended(tracker, parent_run_id: str, status: str) -> None:
    """A sweep's parent has ended (its sweep, or a resumed job that settled it): its comparison, recorded again."""
    record_sweep_comparison(tracker.client, tracker.uri, parent_run_id, status)
