"""The per-parameter posterior summary (bayesx.diagnostics.summary): the moments and quantiles of known draws, the
diagnostics left blank where they do not apply, and the printed table bounded in rows."""

from __future__ import annotations

import numpy as np
import pytest

from bayesx.diagnostics.summary import posterior_summary, summary_lines, write_summary


def test_moments_quantiles_and_diagnostics_of_known_draws(tmp_path):
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(4, 2000, 2)) * [1.0, 3.0] + [0.0, -2.0]
    table = posterior_summary(draws, ["a", "b"])
    assert list(table.index) == ["a", "b"]
    se = np.array([1.0, 3.0]) / np.sqrt(8000)
    assert np.all(np.abs(table["mean"].to_numpy() - [0.0, -2.0]) < 4 * se)
    assert table["sd"].to_numpy() == pytest.approx([1.0, 3.0], rel=0.05)
    assert table.loc["b", "q5"] == pytest.approx(-2.0 - 1.645 * 3.0, abs=0.25)
    assert table["ess_bulk"].min() > 4000 and table["r_hat"].max() < 1.01
    # the control: chains stuck at different places show in R-hat
    stuck = draws + 5.0 * np.arange(4)[:, None, None]
    assert posterior_summary(stuck, ["a", "b"])["r_hat"].min() > 1.1
    assert (tmp_path / "posterior_summary.csv").samefile(write_summary(table, tmp_path))


def test_one_chain_has_no_r_hat_and_the_print_is_bounded():
    draws = np.random.default_rng(0).normal(size=(1, 500, 30))
    table = posterior_summary(draws, [f"theta[{j}]" for j in range(30)])
    assert table["r_hat"].isna().all() and table["ess_bulk"].notna().all()
    lines = summary_lines(table, limit=5)
    assert len(lines) == 7 and lines[-1].startswith("... and 25 more parameters")
    assert "nan" not in " ".join(lines).lower()
