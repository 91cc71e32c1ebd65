"""The posterior summary a person reads first: per named parameter, its mean, sd, 5% and 95% quantiles, bulk and
tail ESS and R-hat (ArviZ's rank-normalized diagnostics, Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021).

It is computed on the parameters a user reads (``target.constrain``: posteriordb's constrained parameters, a
custom model's theta), printed for the first PRINTED_ROWS of them, and stored whole as ``posterior_summary.csv``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bayesx.diagnostics.convergence import coordinate_blocks, ess_per_coordinate, rhat_per_coordinate

PRINTED_ROWS = 20
COLUMNS = ("mean", "sd", "q5", "q95", "ess_bulk", "ess_tail", "r_hat")


def posterior_summary(draws: np.ndarray, names: list[str]) -> pd.DataFrame:
    """One row per parameter of ``draws`` (chains, draws, p), indexed by ``names``. ESS needs four draws per chain
    and R-hat two chains: where they are missing the column is NaN (an approximation's iid draws come as one
    chain, so their R-hat is NaN and their ESS is about the number of draws)."""
    draws = np.asarray(draws, dtype=np.float64)
    parts = (draws[..., block] for block in coordinate_blocks(draws))  # numpy's std and quantiles copy their input
    moments = [_moments(part.reshape(-1, part.shape[-1])) for part in parts]
    table = pd.DataFrame({key: np.concatenate([m[key] for m in moments]) for key in ("mean", "sd", "q5", "q95")},
                         index=pd.Index(names, name="parameter"))
    enough = draws.shape[1] >= 4
    table["ess_bulk"] = ess_per_coordinate(draws, "bulk") if enough else np.nan
    table["ess_tail"] = ess_per_coordinate(draws, "tail") if enough else np.nan
    table["r_hat"] = rhat_per_coordinate(draws) if enough and draws.shape[0] >= 2 else np.nan
    return table


def _moments(flat: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, sd, 5% and 95% quantiles of each column of ``flat`` (n, k)."""
    sd = flat.std(0, ddof=1) if len(flat) > 1 else np.full(flat.shape[1], np.nan)
    return {"mean": flat.mean(0), "sd": sd, "q5": np.quantile(flat, 0.05, axis=0),
            "q95": np.quantile(flat, 0.95, axis=0)}


def summary_lines(table: pd.DataFrame, limit: int = PRINTED_ROWS) -> list[str]:
    """The table as aligned text lines (blank where a diagnostic does not apply), at most ``limit`` parameters,
    and a last line naming how many more the stored file holds."""
    width = max(9, *(len(str(n)) for n in table.index[:limit]))
    lines = [f"{'parameter':<{width}} " + " ".join(f"{c:>9}" for c in COLUMNS)]
    for name, row in table.head(limit).iterrows():
        cells = []
        for column in COLUMNS:
            value = row[column]
            if not np.isfinite(value):
                cells.append(f"{'':>9}")
            elif column.startswith("ess"):
                cells.append(f"{value:>9.0f}")
            elif column == "r_hat":
                cells.append(f"{value:>9.3f}")
            else:
                cells.append(f"{value:>9.3g}")
        lines.append(f"{str(name):<{width}} " + " ".join(cells))
    if len(table) > limit:
        lines.append(f"... and {len(table) - limit} more parameters in posterior_summary.csv")
    return lines


def write_summary(table: pd.DataFrame, folder: Path) -> Path:
    path = Path(folder) / "posterior_summary.csv"
    table.to_csv(path, float_format="%.6g")
    return path
