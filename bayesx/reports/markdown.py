"""Numbers and tables as markdown text, shared by `bayesx report`, `bayesx compare --format markdown` and a
sweep's summary."""

from __future__ import annotations

import math


def format_number(value) -> str:
    """Four significant digits, integers as integers, absent as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    value = float(value)
    if value.is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.4g}"


def markdown_table(table) -> str:
    header = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(format_number(v) if v is not None else "-" for v in row) + " |"
            for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body])
