"""``bayesx report``: one sweep's runs, read back from the MLflow store, as a markdown table (and a bar
plot), with the published numbers beside ours.

A reproduction is a sweep (``bayesx run experiment=<name>``: a Hydra multirun whose jobs are child runs
of one parent run, see :mod:`bayesx.cli.sweep`). The report reads nothing but the store: for each child
run its method, model, data and seed (tags), the config values that identify its row (params), and
the key metrics its family names in its ``compare_metrics`` tag. The paper's numbers come from a
small data file, ``results/published/<name>.yaml`` (see :class:`Published`), never from code.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from bayesx.errors import BayesxError
from bayesx.reports.markdown import format_number, markdown_table

RUN_COLUMNS = ("method", "model", "data", "seed")  # always shown, from the run's tags
ID_CHARS = 8  # run ids are shown (and may be given) by their first 8 characters, as `bayesx compare` does


# --- the published numbers ------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishedRow:
    """One row of a paper's table: the config values that identify our runs of it, and its numbers."""

    match: dict[str, str]
    values: dict[str, float]


@dataclass(frozen=True)
class Relative:
    """A ratio column: ``metric`` of each run over the mean of the baseline runs' (those matching ``to``)
    in its group (the runs that agree on ``within``); ``inverse``: the baseline's over the run's, as a
    paper's "speed-up" in sampling time over its baseline sampler. ``name`` titles the column."""

    metric: str
    to: dict[str, str]
    within: tuple[str, ...] = ()
    inverse: bool = False
    name: str = ""

    @property
    def column(self) -> str:
        baseline = ",".join(f"{k}={v}" for k, v in self.to.items())
        return self.name or (f"{baseline} / {self.metric}" if self.inverse else f"{self.metric} / {baseline}")


@dataclass(frozen=True)
class Published:
    """``results/published/<name>.yaml``: the table a reproduction is checked against.

    Keys: ``title``; ``citation`` (the paper); ``key`` (config keys whose values identify a row: a tag
    such as ``method`` or ``data``, or any config key such as ``model.mesh`` or ``method.n_leapfrog``);
    ``metrics`` (the columns to show; default: the runs' compare_metrics); ``relative`` (optional,
    see :class:`Relative`); ``notes`` (text under the table); ``rows``: a list of ``{match: {key:
    value}, <column>: number, ...}``, the published value of each column named like ours.
    """

    title: str
    citation: str
    key: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    relative: Relative | None = None
    notes: str = ""
    rows: tuple[PublishedRow, ...] = field(default_factory=tuple)

    def row_for(self, values: dict[str, str]) -> PublishedRow | None:
        for row in self.rows:
            if all(same_value(values.get(k), v) for k, v in row.match.items()):
                return row
        return None


def same_value(ours: object, theirs: object) -> bool:
    """Config values as the store keeps them (text) against the file's (YAML scalars): 40 == '40', 1.0 == '1'."""
    if ours is None:
        return False
    a, b = str(ours), str(theirs)
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() == b.lower()


def load_published(path: Path) -> Published:
    """Read and check a published-numbers file; every problem is one line naming the file."""
    import yaml

    def bad(what: str) -> BayesxError:
        return BayesxError(f"published-numbers file {path}: {what}")

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise bad(f"cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise bad(f"not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise bad("expected a mapping with title, citation and rows")
    unknown = set(data) - {"title", "citation", "key", "metrics", "relative", "notes", "rows"}
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))}; use title, citation, key, metrics, relative, notes, rows")
    for required in ("title", "citation"):
        if not data.get(required):
            raise bad(f"missing '{required}'")
    rows = []
    for i, row in enumerate(data.get("rows") or []):
        if not isinstance(row, dict) or not isinstance(row.get("match"), dict):
            raise bad(f"row {i + 1} needs a 'match' mapping of config keys to values")
        values = {k: v for k, v in row.items() if k != "match"}
        for k, v in values.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise bad(f"row {i + 1}: '{k}' must be a number, got {v!r}")
        rows.append(PublishedRow({k: str(v) for k, v in row["match"].items()},
                                 {k: float(v) for k, v in values.items()}))
    relative = None
    if data.get("relative"):
        rel = data["relative"]
        if not isinstance(rel, dict) or "metric" not in rel or not isinstance(rel.get("to"), dict):
            raise bad("'relative' needs a metric and a 'to' mapping (the baseline row's config values)")
        unknown = set(rel) - {"metric", "to", "within", "inverse", "name"}
        if unknown:
            raise bad(f"'relative' takes metric, to, within, inverse, name; not {', '.join(sorted(unknown))}")
        relative = Relative(str(rel["metric"]), {k: str(v) for k, v in rel["to"].items()},
                            tuple(str(k) for k in rel.get("within") or ()), bool(rel.get("inverse", False)),
                            str(rel.get("name") or ""))
    return Published(str(data["title"]), str(data["citation"]).strip(), tuple(map(str, data.get("key") or ())),
                     tuple(map(str, data.get("metrics") or ())), relative, str(data.get("notes") or "").strip(),
                     tuple(rows))


def published_dir() -> Path:
    """``results/published`` of the source checkout (beside ``conf/``)."""
    from bayesx.settings import conf_dir

    return conf_dir().parent / "results" / "published"


def preset_name(overrides: str) -> str | None:
    """The experiment preset a sweep ran (``experiment=NAME`` among its overrides), if any."""
    found = re.search(r"(?:^|\s)\+{0,2}experiment=([\w.-]+)", overrides or "")
    return found.group(1) if found else None


def preset_swept_keys(name: str | None) -> list[str]:
    """The config keys the preset ``name`` sweeps itself (its ``hydra.sweeper.params``, rows aside): they say
    what each run is even when the command line names none of them (``experiment=posteriordb`` sweeps model.name)."""
    from bayesx.settings import conf_dir

    path = conf_dir() / "experiment" / f"{name}.yaml" if name else None
    if path is None or not path.is_file():
        return []
    import yaml

    params = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    return [str(k).lstrip("+~") for k in params if "/" not in str(k)]


# --- reading the sweep from the store -------------------------------------------------------------
@dataclass
class Sweep:
    """A parent run and its child runs (a DataFrame of :func:`bayesx.store.tracking.search_runs`, oldest first)."""

    parent: dict[str, object]
    runs: object  # pandas.DataFrame
    uri: str
    references: object = None  # the reference posteriors' runs made in the sweep (bayesx.methods.reference), not rows
    parts: tuple = ()  # a preset run in parts: every part's parent run, this one's first (:func:`joined`)

    @property
    def parent_id(self) -> str:
        return str(self.parent["run_id"])

    @property
    def overrides(self) -> str:
        return str(self.parent.get("tags.sweep_overrides") or "")


def joined(sweeps: list[Sweep]) -> Sweep:
    """Sweeps of one preset run in parts (``bayesx run experiment=NAME model.name=...`` in several sessions) as one:
    their runs in one table, every part's parent named in the header."""
    import pandas as pd

    if len(sweeps) == 1:
        return sweeps[0]
    first = sweeps[0]
    references = [s.references for s in sweeps if s.references is not None]
    return Sweep(first.parent, pd.concat([s.runs for s in sweeps], ignore_index=True), first.uri,
                 pd.concat(references, ignore_index=True) if references else None,
                 tuple(s.parent for s in sweeps))


def select_sweep(df, uri: str, parent: str | None = None, experiment: str | None = None) -> Sweep:
    """The sweep ``parent`` (a run id or a prefix of at least 8 characters), or the newest sweep of
    ``df``. One-line errors for an empty store, an unknown id and a sweep without runs."""
    from bayesx.store.tracking import PARENT_TAG

    where = f"experiment '{experiment}' of {uri}" if experiment else uri
    if df.empty:
        raise BayesxError(f"no runs recorded in {where}; run a sweep first, e.g. "
                          "`bayesx run -m method=nuts,vi model=logreg data=digits`")
    parent_col = f"tags.{PARENT_TAG}"
    child_of = df[parent_col] if parent_col in df else df["run_id"].map(lambda _: None)  # no child run anywhere
    if parent:
        if len(parent) < ID_CHARS:
            raise BayesxError(f"--parent {parent}: give at least {ID_CHARS} characters of the run id "
                              "(`bayesx compare` prints them in its parent column)")
        found = df[df["run_id"].str.startswith(parent)]
        if len(found) != 1:
            raise BayesxError(f"--parent {parent}: {'no run' if found.empty else f'{len(found)} runs'} with that id "
                              f"in {uri}; known sweeps: {known_sweeps(df) or 'none'}")
        chosen = found.iloc[0]
    else:
        parents = df[df["tags.sweep"] == "parent"] if "tags.sweep" in df else df.iloc[:0]
        if parents.empty:
            raise BayesxError(f"no sweep (parent run) in {uri}; record one with `bayesx run -m ...` or "
                              "`bayesx run experiment=NAME`, or name a parent with --parent")
        chosen = parents.sort_values("start_time", ascending=False).iloc[0]
    runs = df[child_of == chosen["run_id"]].sort_values("start_time")
    is_reference = runs["tags.role"] == "reference" if "tags.role" in runs else runs["run_id"].map(lambda _: False)
    references, runs = runs[is_reference], runs[~is_reference]
    if runs.empty:
        raise BayesxError(f"the sweep {chosen['run_id'][:ID_CHARS]} in {uri} has no runs (its jobs failed before "
                          f"recording one?); known sweeps: {known_sweeps(df)}")
    return Sweep(chosen.to_dict(), runs.reset_index(drop=True), uri, references.reset_index(drop=True))


def known_sweeps(df, most: int = 5) -> str:
    if "tags.sweep" not in df:
        return ""
    parents = df[df["tags.sweep"] == "parent"].sort_values("start_time", ascending=False).head(most)
    return ", ".join(f"{r.run_id[:ID_CHARS]} ({r.get('tags.sweep_overrides') or ''})" for _, r in parents.iterrows())


def config_value(run, key: str) -> str | None:
    """A run's value of a config key: the tag for method/model/data/seed and run names, else the param."""
    for column in (f"tags.{key}", f"params.{key}"):
        value = run.get(column)
        if isinstance(value, str) and value not in ("", "None"):
            return value
    return None


# --- the table --------------------------------------------------------------------------------------
def metric_columns(sweep: Sweep, published: Published | None) -> list[str]:
    from bayesx.reports.compare import compare_columns

    if published and published.metrics:
        return [m for m in published.metrics if f"metrics.{m}" in sweep.runs]
    return compare_columns(sweep.runs)


def key_columns(sweep: Sweep, published: Published | None) -> list[str]:
    """The columns that say what each run is: method/model/data/seed and the file's key (or, without
    a file, the plain ``key=values`` sweeps of the command and of its preset), if their values differ
    between runs."""
    keys = list(published.key) if published else []
    if "params.row" in sweep.runs and "row" not in keys:  # a preset's named rows (conf/experiment/rows/<preset>/)
        keys.insert(0, "row")
    for override in sweep.overrides.split():
        key, _, values = override.lstrip("+~").partition("=")
        if "," in values and key not in keys and not key.startswith(("hydra", "tracking")):
            keys.append(key)
    keys += [k for k in preset_swept_keys(preset_name(sweep.overrides)) if k not in keys]
    out = []
    for key in keys:
        if key in RUN_COLUMNS or key in out:
            continue
        if len({config_value(r, key) for _, r in sweep.runs.iterrows()}) > 1 or key in (published.key if published else ()):
            out.append(key)
    return out


def build_table(sweep: Sweep, published: Published | None):
    """One row per run: its identity, status, key metrics, the ratio column and the published values."""
    import pandas as pd

    keys, metrics = key_columns(sweep, published), metric_columns(sweep, published)
    rows = []
    for _, run in sweep.runs.iterrows():
        row = {"run": run["run_id"][:ID_CHARS], **{k: config_value(run, k) for k in (*RUN_COLUMNS, *keys)},
               "status": run["status"]}
        for m in metrics:
            row[m] = run.get(f"metrics.{m}")
        rows.append(row)
    table = pd.DataFrame(rows)
    if published and published.relative:
        table[published.relative.column] = relative_values(sweep, published.relative)
    if published:
        for column in published_columns(published, table.columns):
            table[f"paper {column}"] = [published_value(published, sweep.runs.iloc[i], column) for i in range(len(table))]
    return table


def published_columns(published: Published, ours) -> list[str]:
    """The published columns, in the order of ours (a ratio column is published under its name)."""
    named = {k for row in published.rows for k in row.values}
    columns = [c for c in ours if c in named]
    return columns + sorted(named - set(columns))


def published_value(published: Published, run, column: str) -> float | None:
    keys = {k for row in published.rows for k in row.match}
    row = published.row_for({k: config_value(run, k) for k in keys})
    return None if row is None else row.values.get(column)


def relative_values(sweep: Sweep, relative: Relative) -> list[float | None]:
    """Each run's ``relative.metric`` over the mean of its group's baseline runs (NaN without a baseline)."""
    runs = sweep.runs
    column = f"metrics.{relative.metric}"

    def group(run) -> tuple:
        return tuple(config_value(run, k) for k in relative.within)

    baseline: dict[tuple, list[float]] = {}
    for _, run in runs.iterrows():
        if all(same_value(config_value(run, k), v) for k, v in relative.to.items()) and finite(run.get(column)):
            baseline.setdefault(group(run), []).append(float(run[column]))
    out = []
    for _, run in runs.iterrows():
        base = baseline.get(group(run))
        value = run.get(column)
        if not base or not finite(value):
            out.append(None)
            continue
        mean = sum(base) / len(base)
        out.append(mean / float(value) if relative.inverse else float(value) / mean)
    return out


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def seed_means(table, metrics: list[str]):
    """The runs that agree on everything but the seed, pooled: mean and sd of each metric, and the count.
    None when no two runs differ only in their seed."""
    import pandas as pd

    ident = [c for c in table.columns if c not in ("run", "seed", "status", *metrics) and not c.startswith("paper ")]
    numeric = [m for m in metrics if pd.api.types.is_numeric_dtype(table[m])]
    grouped = table.groupby(ident, dropna=False, sort=False)
    if grouped.ngroups == len(table):
        return None
    pooled = grouped[numeric].agg(["mean", "std"])
    out = pd.DataFrame(index=pooled.index)
    for m in numeric:
        out[m] = [f"{format_number(a)} ± {format_number(s)}" if finite(s) else format_number(a)
                  for a, s in zip(pooled[(m, "mean")], pooled[(m, "std")])]
    out["runs"] = grouped.size().values
    return out.reset_index()


# --- writing ----------------------------------------------------------------------------------------
def machine_line(sweep: Sweep) -> str:
    """Where the runs ran, from their provenance tags (the first run's; others that differ are named)."""
    def tag(name: str) -> str:
        values = sorted({str(v) for v in sweep.runs.get(f"tags.{name}", []) if isinstance(v, str) and v})
        return " / ".join(values) or "?"

    return (f"host {tag('host')}, device {tag('device')}, {tag('torch_threads')} torch threads, "
            f"torch {tag('torch_version')}, python {tag('python_version')}, bayesx {tag('bayesx_version')} "
            f"(git {tag('git_commit')}), native kernels {tag('native_kernels')}")


def reference_lines(sweep: Sweep) -> list[str]:
    """Where the posterior errors come from: the NUTS reference runs the sweep made (its own runs, not rows)."""
    if sweep.references is None or sweep.references.empty:
        return []
    made = ", ".join(f"{r['run_id'][:ID_CHARS]} ({r.get('metrics.wall_time_s', float('nan')):.0f} s)"
                     for _, r in sweep.references.iterrows())
    return [f"Reference posteriors made in this sweep (NUTS, their own runs): {made}"]


def render(sweep: Sweep, published: Published | None, table, metrics: list[str], plot_name: str | None,
           note: str | None = None) -> str:
    lines = [f"# {published.title if published else 'Sweep ' + sweep.parent_id[:ID_CHARS]}", ""]
    if published:
        lines += [f"Published: {published.citation}", ""]
    parents = sweep.parts or (sweep.parent,)
    named = " ".join(f"--parent {str(p['run_id'])[:ID_CHARS]}" for p in parents)
    lines += [*made_by_lines(sweep, parents), f"Table by: `bayesx report {named}` from {sweep.uri}",
              f"Machine: {machine_line(sweep)}", *([f"Note: {note}"] if note else []), *reference_lines(sweep), "",
              markdown_table(table), ""]
    pooled = seed_means(table, metrics)
    if pooled is not None:
        lines += ["Mean ± sd over seeds:", "", markdown_table(pooled), ""]
    if plot_name:
        lines += [f"![metrics per run]({plot_name})", ""]
    if published and published.notes:
        lines += [published.notes, ""]
    return "\n".join(lines)


def made_by_lines(sweep: Sweep, parents: tuple) -> list[str]:
    """The command of each part of the sweep, with its parent run, its runs, its start, its status and its commit."""
    from bayesx.store.tracking import PARENT_TAG

    parent_col = f"tags.{PARENT_TAG}"
    lines = []
    for k, parent in enumerate(parents):
        run_id = str(parent["run_id"])
        runs = (sweep.runs[sweep.runs[parent_col] == run_id] if len(parents) > 1 and parent_col in sweep.runs
                else sweep.runs)
        commits = runs["tags.git_commit"].dropna().unique() if "tags.git_commit" in runs else []
        commit = ", ".join(str(c)[:10] for c in commits)
        part = f"part {k + 1} of {len(parents)}: " if len(parents) > 1 else ""
        lines.append(f"Made by: `bayesx run -m {parent.get('tags.sweep_overrides') or ''}`".rstrip()
                     + f" ({part}parent run {run_id[:ID_CHARS]}, {len(runs)} runs, started "
                     + f"{str(parent.get('start_time'))[:19]}"
                     + f" UTC; sweep status {parent.get('status')}" + (f"; commit {commit}" if commit else "")
                     + ")")
    return lines


def telling_apart(table, metrics: list[str]) -> list[str]:
    """The columns whose values differ between runs (method, a swept key...), beside the run id, the status, the
    metrics and the paper's numbers."""
    return [c for c in table.columns if c not in ("run", "status", *metrics) and not c.startswith("paper ")
            and table[c].nunique(dropna=False) > 1]


def run_labels(table, metrics: list[str]) -> list[str]:
    """Each row's name from what tells the runs apart, else its run id."""
    ident = telling_apart(table, metrics)
    return [" ".join(str(table.at[i, c]) for c in ident) or str(table.at[i, "run"]) for i in range(len(table))]


MAX_BARS = 60  # a table of more runs is plotted as one row of dots per group (:func:`dot_panel`), not a bar each
MAX_GROUPS = 20  # the most lines a dot plot shows


def group_column(table, metrics: list[str]) -> str | None:
    """Of the columns that tell runs apart (and not every run from every other), the finest with at most
    MAX_GROUPS values (a preset's row rather than its method, which merges the row's variants), else the coarsest:
    what a table too long for a bar per run is grouped by."""
    counts = {c: table[c].nunique(dropna=False) for c in telling_apart(table, metrics)}
    counts = {c: n for c, n in counts.items() if n < len(table)}
    if not counts:
        return None
    few = [c for c, n in counts.items() if n <= MAX_GROUPS]
    return max(few, key=counts.get) if few else min(counts, key=counts.get)


def bar_panel(ax, table, metric: str) -> None:
    """One bar per run; the published value as a black mark."""
    values = [float(v) if finite(v) else 0.0 for v in table[metric]]
    ax.barh(range(len(values)), values, color="tab:blue")
    paper = f"paper {metric}"
    if paper in table:
        for i, v in enumerate(table[paper]):
            if finite(v):
                ax.plot([v], [i], marker="|", color="black", markersize=14, mew=2)


def dot_panel(ax, table, metric: str, by: str, groups: list[str]) -> None:
    """One line per group of ``by``, a dot per run (log scale where the metric spans more than 100x): the spread
    of each group across what else varies, e.g. a method across the posteriors."""
    values = table[metric].map(lambda v: float(v) if finite(v) else float("nan"))
    for i, group in enumerate(groups):
        picked = values[table[by].astype(str) == group].dropna()
        ax.plot(picked, [i] * len(picked), "o", color="tab:blue", alpha=0.5, markersize=3)
    present = values.dropna()
    if len(present) and (present > 0).all() and present.max() > 100 * present.min():
        ax.set_xscale("log")


def plot(table, metrics: list[str], path: Path) -> bool:
    """One panel per metric (at most 8): a horizontal bar per run with the published value marked, or for a
    table of more than MAX_BARS runs a line of dots per group (:func:`group_column`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in metrics if m in table and table[m].map(finite).any()][:8]
    if not shown:
        return False
    by = group_column(table, metrics) if len(table) > MAX_BARS else None
    if by is None:
        labels, draw = run_labels(table, metrics), (lambda ax, metric: bar_panel(ax, table, metric))
    else:
        labels = list(dict.fromkeys(str(v) for v in table[by]))
        draw = lambda ax, metric: dot_panel(ax, table, metric, by, labels)  # noqa: E731
    ncols = min(len(shown), 4)
    nrows = -(-len(shown) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.3 * ncols + (1.5 if by is None else 2.0),
                                                    (0.3 * len(labels) + 1.2) * nrows), squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= len(shown):
            ax.axis("off")
            continue
        draw(ax, shown[k])
        ax.set_title(shown[k], fontsize=9)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels if k % ncols == 0 else [""] * len(labels), fontsize=7)
        ax.invert_yaxis()
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def report(uri: str, experiment: str | None = None, parent: str | list[str] | None = None,
           published_path: Path | None = None, out: Path | None = None, with_plot: bool = True,
           note: str | None = None) -> str:
    """The markdown report of one sweep, or of several parents' sweeps joined (a preset run in parts), written to
    ``out`` with its plot beside it, if given."""
    from bayesx.store.tracking import search_runs

    runs = search_runs(uri, experiment)
    parents = parent if isinstance(parent, list) else [parent]
    sweep = joined([select_sweep(runs, uri, one, experiment) for one in parents])
    return sweep_report(sweep, published_path, out, with_plot, note)[0]


def sweep_report(sweep: Sweep, published_path: Path | None = None, out: Path | None = None, with_plot: bool = True,
                 note: str | None = None):
    """:func:`report` of a sweep already read: the markdown, the table (a DataFrame) and its metric columns."""
    if published_path is None:
        name = preset_name(sweep.overrides)
        candidate = published_dir() / f"{name}.yaml" if name else None
        published_path = candidate if candidate is not None and candidate.is_file() else None
    published = load_published(published_path) if published_path else None
    table = build_table(sweep, published)
    metrics = metric_columns(sweep, published)
    plotted = None
    if out is not None:
        if not out.parent.is_dir():
            raise BayesxError(f"--out {out}: the folder {out.parent} does not exist; create it first")
        ratio = [published.relative.column] if published and published.relative else []
        if with_plot and plot(table, metrics + ratio, out.with_suffix(".png")):
            plotted = out.with_suffix(".png").name
    text = render(sweep, published, table, metrics, plotted, note)
    if out is not None:
        out.write_text(text)
    return text, table, metrics
