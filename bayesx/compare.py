"""The table of ``bayesx compare``: one row per run with the key metrics its family names, and a
``check`` column that flags MCMC runs whose R-hat or ESS make ESS-based rates meaningless."""

from __future__ import annotations

from bayesx.errors import BayesxError


def compare_columns(df) -> list[str]:
    """The union, in first-seen order, of the key metrics the runs name in their compare_metrics tag."""
    from bayesx.tracking import COMPARE_TAG

    columns: list[str] = []
    for names in df.get(f"tags.{COMPARE_TAG}", []):
        for name in (names.split(",") if isinstance(names, str) and names else []):
            if name not in columns and f"metrics.{name}" in df:
                columns.append(name)
    return columns


ESS_PER_CHAIN = 100  # Vehtari et al. (2021): bulk ESS of at least 100 per chain before trusting R-hat and ESS


def reliability(df) -> list[str]:
    """Per run: why its R-hat and ESS make ESS-based rates meaningless (R-hat above 1.01, bulk ESS below
    100 per chain), "ok", or "" for runs without them (approximations, trainers)."""
    from bayesx.diagnostics.convergence import RHAT_LIMIT

    def number(value) -> float | None:  # absent and NaN alike: the run has no such metric
        return None if value is None or value != value else float(value)

    out = []
    for _, row in df.iterrows():
        rhat, ess = number(row.get("metrics.rhat_max")), number(row.get("metrics.ess_bulk_min"))
        if rhat is None and ess is None:
            out.append("")
            continue
        chains_tag = str(row.get("tags.n_chains") or "")
        need = ESS_PER_CHAIN * (int(chains_tag) if chains_tag.isdigit() else 1)
        reasons = []
        if rhat is not None and rhat > RHAT_LIMIT:
            reasons.append(f"rhat {rhat:.3g}>{RHAT_LIMIT}")
        if ess is not None and ess < need:
            reasons.append(f"ess {ess:.3g}<{need}")
        out.append(",".join(reasons) or "ok")
    return out


ID_CHARS = 8  # run ids as the table shows them: enough for resume= and report --parent
IDENTITY_COLUMNS = ("run_id", "status", "method", "model", "data", "seed", "parent")
FORMATS = ("table", "json", "csv", "markdown")


def compare_table(df, sort: str | None, ascending: bool, id_chars: int | None = ID_CHARS):
    """One row per run: its id (``id_chars`` characters, None: whole), status, what it ran, its sweep's
    parent, the key metrics the runs name, and the ``check`` column; sorted by ``sort`` if given."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=[*IDENTITY_COLUMNS, "check"])
    method = df.get("tags.method")
    if "tags.role" in df and method is not None:  # a reference posterior's run (bayesx.reference) says so
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
    if sort:  # unreliable MCMC rows last, whatever their value
        table = table.assign(_unreliable=~table["check"].isin(["ok", ""]))
        table = table.sort_values(["_unreliable", sort], ascending=[True, ascending], na_position="last")
        table = table.drop(columns="_unreliable")
    return table.reset_index(drop=True)


def render(table, fmt: str) -> str:
    """The table as text in one of ``FORMATS``: ``table`` aligned for a terminal (absent values '-'),
    ``json`` an array of one object per row (absent and non-finite values null), ``csv`` with a header
    row, ``markdown`` a pipe table."""
    import pandas as pd

    if fmt == "json":
        return table.to_json(orient="records", double_precision=15)
    if fmt == "csv":
        return table.to_csv(index=False).rstrip("\n")
    if fmt == "markdown":
        from bayesx.report import markdown_table

        return markdown_table(table)
    with pd.option_context("display.max_columns", None, "display.width", 200, "display.float_format", "{:.4g}".format):
        return table.to_string(index=False, na_rep="-")
