"""The table of ``bayesx compare``: one row per run with the key metrics its family names, and a ``check`` column
that says, for every family, whether the run's own diagnostics let its numbers be trusted:

    samplers        R-hat above 1.01 or bulk ESS below 100 per chain: ESS-based rates are meaningless
    approximations  the importance weights p/q: Pareto k-hat above 0.7 (q misses posterior mass), else the share of
                    draws the weights keep (``is-ess``, weights_ess_fraction) below its limit, or q's moments off the
                    weights' estimate of the posterior's (the limits of bayesx.diagnostics.importance, which the
                    family's warnings use too); one without weights (SVGD's particles) by its health warnings
    trainers        their own health warnings

On a terminal the table fits :data:`WIDTH` characters: the key metrics first, the columns that do not fit named
under it (``--wide`` shows every column)."""

from __future__ import annotations

from bayesx.errors import BayesxError


def compare_columns(df) -> list[str]:
    """The union, in first-seen order, of the key metrics the runs name in their compare_metrics tag."""
    from bayesx.store.tracking import COMPARE_TAG

    columns: list[str] = []
    for names in df.get(f"tags.{COMPARE_TAG}", []):
        for name in (names.split(",") if isinstance(names, str) and names else []):
            if name not in columns and f"metrics.{name}" in df:
                columns.append(name)
    return columns


ESS_PER_CHAIN = 100  # Vehtari et al. (2021): bulk ESS of at least 100 per chain before trusting R-hat and ESS
OK = "ok"


def _number(value) -> float | None:
    """A metric's value; None where the run has none (absent and NaN alike)."""
    return None if value is None or value != value else float(value)


def sampler_reasons(row) -> list[str] | None:
    """Why a run's R-hat and ESS make ESS-based rates meaningless (R-hat above 1.01, bulk ESS below 100 per chain);
    None for a run with neither."""
    from bayesx.diagnostics.convergence import RHAT_LIMIT

    rhat, ess = _number(row.get("metrics.rhat_max")), _number(row.get("metrics.ess_bulk_min"))
    if rhat is None and ess is None:
        return None
    chains_tag = str(row.get("tags.n_chains") or "")
    need = ESS_PER_CHAIN * (int(chains_tag) if chains_tag.isdigit() else 1)
    reasons = []
    if rhat is not None and rhat > RHAT_LIMIT:
        reasons.append(f"rhat {rhat:.3g}>{RHAT_LIMIT}")
    if ess is not None and ess < need:
        reasons.append(f"ess {ess:.3g}<{need}")
    return reasons


def approximation_reasons(row) -> list[str] | None:
    """The importance weights' verdict, in the family's order (bayesx.methods.vi.family): k-hat above its limit says
    it all; below it, too small a share of draws kept and q's moments off; None for a run without k-hat."""
    from bayesx.diagnostics.importance import ESS_FRACTION_LIMIT, KHAT_LIMIT

    khat = _number(row.get("metrics.psis_khat"))
    if khat is None:
        return None
    if khat > KHAT_LIMIT:
        return [f"khat {khat:.3g}>{KHAT_LIMIT}"]
    reasons = []
    kept = _number(row.get("metrics.weights_ess_fraction"))
    if kept is not None and kept < ESS_FRACTION_LIMIT:
        reasons.append(f"is-ess {kept:.2g}<{ESS_FRACTION_LIMIT}")
    off = _number(row.get("metrics.psis_moments_flagged"))
    if off:
        reasons.append(f"moments off in {off:.0f}")
    return reasons


def warning_reasons(row) -> list[str]:
    """The run's own health warnings (its ``health_warnings`` tag), each cut to its first words."""
    from bayesx.store.tracking import WARNINGS_TAG

    text = row.get(f"tags.{WARNINGS_TAG}")
    if not isinstance(text, str) or not text.strip():
        return []
    return [f"warned: {w.strip().split(':')[0][:30].rstrip()}" for w in text.split(" | ") if w.strip()]


def check(row) -> str:
    """One run's verdict (module docstring): the reasons not to trust it joined by commas, ``ok``, or "" for a run
    nothing judges (no diagnostics, no family)."""
    family = str(row.get("tags.family") or "")
    reasons = sampler_reasons(row)
    if reasons is None and family != "sampler":
        reasons = approximation_reasons(row)
    if reasons is None and family in ("approximation", "trainer"):  # no weights to read (SVGD, a trainer): warnings
        reasons = warning_reasons(row)
    if reasons is None:
        return ""
    return ",".join(reasons) or OK


def reliability(df) -> list[str]:
    """Per run (row of ``df``, as :func:`bayesx.store.tracking.search_runs` gives them): :func:`check`."""
    return [check(row) for _, row in df.iterrows()]


def unreliable(verdict: str) -> bool:
    """Whether a :func:`check` verdict says the run is not to be trusted."""
    return verdict not in (OK, "")


ID_CHARS = 8  # run ids as the table shows them: enough for resume= and report --parent
IDENTITY_COLUMNS = ("run_id", "status", "method", "model", "data", "seed", "parent")
FORMATS = ("table", "json", "csv", "markdown")
WIDTH = 120  # characters the terminal table fits without --wide
ALWAYS = ("run_id", "status", "method", "check")
ERROR_METRICS = ("posterior_mean_err", "ref_mean_err_max")  # the error against a reference posterior / gold standard
KEY_METRICS = (*ERROR_METRICS, "ess_bulk_min", "rhat_max", "psis_khat", "wall_time_s",
               "n_grad_evals")
"""The metrics that say which run to trust and what it cost, shown first when the table must be narrowed."""


def compare_table(df, sort: str | None, ascending: bool, id_chars: int | None = ID_CHARS):
    """One row per run: its id (``id_chars`` characters, None: whole), status, what it ran, its sweep's
    parent, the key metrics the runs name, and the ``check`` column; sorted by ``sort`` if given, the runs
    the check column flags last."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=[*IDENTITY_COLUMNS, "check"])
    method = df.get("tags.method")
    if "tags.role" in df and method is not None:  # a reference posterior's run (bayesx.methods.reference) says so
        method = method.where(df["tags.role"] != "reference", "nuts (reference)")
    table = pd.DataFrame({
        "run_id": df["run_id"].str[:id_chars],
        "status": df["status"],
        "method": method,
        "model": df.get("tags.model"),
        "data": df.get("tags.data"),
        "seed": df.get("tags.seed"),
        "parent": df.get("tags.mlflow.parentRunId", pd.Series([None] * len(df))).fillna("").str[:id_chars],
    })
    metric_cols = compare_columns(df)
    if sort and sort not in metric_cols:
        if f"metrics.{sort}" not in df:
            known = sorted(c[len("metrics."):] for c in df.columns if c.startswith("metrics."))
            raise BayesxError(f"no metric named '{sort}' in these runs; sort by one of: {', '.join(known)}")
        metric_cols.append(sort)
    for m in metric_cols:
        table[m] = df[f"metrics.{m}"]
    table["check"] = reliability(df)
    if sort:  # unreliable rows last, whatever their value
        table = table.assign(_unreliable=table["check"].map(unreliable))
        table = table.sort_values(["_unreliable", sort], ascending=[True, ascending], na_position="last")
        table = table.drop(columns="_unreliable")
    return table.reset_index(drop=True)


def check_note(table, sorted_by: str | None) -> str | None:
    """What the check column's flags mean, one line (of at most :data:`WIDTH` characters) per kind of run flagged;
    None where no run is flagged."""
    from bayesx.diagnostics.convergence import RHAT_LIMIT
    from bayesx.diagnostics.importance import ESS_FRACTION_LIMIT, KHAT_LIMIT

    flags = {reason.split()[0] for v in table["check"] if unreliable(v) for reason in v.split(",")}
    last = "; they are sorted last" if sorted_by else ""
    lines = []
    if flags & {"rhat", "ess"}:
        lines.append(f"check: runs with R-hat > {RHAT_LIMIT} or bulk ESS < {ESS_PER_CHAIN} per chain have no reliable "
                     f"ESS or ESS/s{last}")
    if flags & {"khat", "is-ess", "moments"}:
        lines.append(f"check: approximations with k-hat > {KHAT_LIMIT}, is-ess < {ESS_FRACTION_LIMIT} or moments off "
                     f"are unreliable{last}")
    if "warned:" in flags:
        lines.append(f"check: runs with health warnings (in full on their run pages and in their summaries){last}")
    return "\n".join(lines) or None


def _text(table) -> str:
    import pandas as pd

    with pd.option_context("display.max_columns", None, "display.width", 10_000, "display.max_colwidth", None,
                           "display.float_format", "{:.4g}".format):
        return table.to_string(index=False, na_rep="-")


def _width(table) -> int:
    return max(len(line) for line in _text(table).splitlines())


def narrowed(table, width: int = WIDTH, sort: str | None = None) -> tuple[object, list[str]]:
    """The table's columns that fit ``width`` characters, taken in order of use (:data:`ALWAYS`, the sort metric,
    :data:`KEY_METRICS`, model and data, the other metrics, seed and parent) and shown in the table's own order;
    and the names of those left out."""
    metrics = [c for c in table.columns if c not in IDENTITY_COLUMNS and c != "check"]
    order = [*ALWAYS, *([sort] if sort else []), *[m for m in KEY_METRICS if m in metrics], "model", "data",
             *metrics, "seed", "parent"]
    chosen: list[str] = []
    for column in dict.fromkeys(c for c in order if c in table.columns):
        trial = [c for c in table.columns if c in (*chosen, column)]
        if column in ALWAYS or column == sort or _width(table[trial]) <= width:
            chosen.append(column)
    kept = [c for c in table.columns if c in chosen]
    return table[kept], [c for c in table.columns if c not in chosen]


def render(table, fmt: str, wide: bool = False, sort: str | None = None) -> str:
    """The table as text in one of ``FORMATS``: ``table`` aligned for a terminal (absent values '-'; narrowed to
    :data:`WIDTH` characters unless ``wide``, with a line naming the columns left out), ``json`` an array of one
    object per row (absent and non-finite values null), ``csv`` with a header row, ``markdown`` a pipe table (every
    column in all three)."""
    if fmt == "json":
        return table.to_json(orient="records", double_precision=15)
    if fmt == "csv":
        return table.to_csv(index=False).rstrip("\n")
    if fmt == "markdown":
        from bayesx.reports.markdown import markdown_table

        return markdown_table(table)
    if wide:
        return _text(table)
    shown, hidden = narrowed(table, WIDTH, sort)
    text = _text(shown)
    if hidden:
        note = f"({len(hidden)} more columns, --wide shows them: {', '.join(hidden)})"
        text += "\n" + (note if len(note) <= WIDTH else note[:WIDTH - 5] + " ...)")
    return text
