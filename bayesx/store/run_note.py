"""A run's description: the note a person reads on the run's page in the MLflow UI.

MLflow shows a run's note (markdown) above its metrics. bayesx writes there what the run table and the
metric list do not say at a glance: what ran on what, the family's key metrics rounded (the same list,
in the same order, as the terminal summary), what the accuracy metrics were measured against, and the
run's warnings and remarks in full. Nothing here imports MLflow; the tracker stores the text.
"""

from __future__ import annotations

import math

SIGNIFICANT = 4  # digits the note rounds each metric to
COST_KEYS = ("n_grad_evals", "wall_time_s")  # listed for every run that has them, after the family's


def rounded(value: float) -> str:
    """``value`` to :data:`SIGNIFICANT` significant digits; integers as integers (``17640``, not ``1.764e+04``)."""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.{SIGNIFICANT}g}"


def headline(identity: dict[str, str], status: str) -> str:
    """``nuts (sampler) on logreg, data digits, preset quick: FINISHED``."""
    what = f"**{identity.get('method') or '?'}** ({identity.get('family', '?')}) on {identity.get('model', '?')}"
    if identity.get("data") and identity["data"] != "none":
        what += f", data {identity['data']}"
    if identity.get("preset"):
        what += f", preset {identity['preset']}"
    return f"{what}: {status}"


def describe_run(identity: dict[str, str], status: str, metrics: dict[str, float], shown: tuple[str, ...],
                 compared_with: str | None, warnings: tuple[str, ...], remarks: tuple[str, ...],
                 error: str | None = None) -> str:
    """The run's note (markdown).

    identity       method, family, model, data and preset (the run's tags)
    shown          the family's key metrics in the summary's order; the cost (``n_grad_evals``,
                   ``wall_time_s``) follows where the run has it
    compared_with  one sentence on what ``posterior_mean_err`` and the like measure against (a
                   reference run, exact moments, a gold standard), or None
    """
    keys = [k for k in (*shown, *COST_KEYS) if k in metrics]
    lines = [headline(identity, status), ""]
    if error:
        lines += [f"Error: {error}", ""]
    if keys:
        lines += ["Key metrics: " + " · ".join(f"{k} {rounded(metrics[k])}" for k in dict.fromkeys(keys)), ""]
    if compared_with:
        lines += [f"Compared with: {compared_with}", ""]
    if warnings:
        lines += ["Warnings:", *(f"- {w}" for w in warnings), ""]
    if remarks:
        lines += ["Notes:", *(f"- {r}" for r in remarks), ""]
    return "\n".join(lines).rstrip() + "\n"
