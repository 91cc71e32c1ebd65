"""A sweep's answer where it ends (bayesx.reports.sweep_summary, bayesx.reports.compare): the check column judges every family, the
terminal tables fit their widths, the winners' sentences say "tie" and name an unreliable winner as such, the plot
draws unreliable runs hollow, and a real sweep of nuts, vi and pathfinder ends with its answer table."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_helpers import all_runs, call

from bayesx.reports.compare import WIDTH, check, compare_table, render
from bayesx.reports.markdown import format_number
from bayesx.reports.sweep_summary import TERMINAL_WIDTH, answer_text, error_vs_cost_figure, winners

NAN = float("nan")


def row(**values) -> pd.Series:
    """One run as bayesx.store.tracking.search_runs gives it: metrics.* and tags.* columns."""
    return pd.Series({(k if k.startswith("tags_") else f"metrics.{k}").replace("tags_", "tags."): v
                      for k, v in values.items()})


# --- the check column -----------------------------------------------------------------------------------
def test_the_check_column_judges_every_family():
    approximation = {"tags_family": "approximation"}
    assert check(row(psis_khat=1.93, weights_ess_fraction=0.004, **approximation)) == "khat 1.93>0.7"
    assert check(row(psis_khat=0.5, weights_ess_fraction=0.11, **approximation)) == "is-ess 0.11<0.25"
    assert check(row(psis_khat=0.3, weights_ess_fraction=0.9, psis_moments_flagged=2.0, **approximation)) == \
        "moments off in 2"
    assert check(row(psis_khat=0.3, weights_ess_fraction=0.9, psis_moments_flagged=0.0, **approximation)) == "ok"
    svgd = row(elbo_final=-3.0, tags_health_warnings="Stein's identity fails on the particles: spread 0.4 | x: y",
               **approximation)
    assert check(svgd) == "warned: Stein's identity fails on the,warned: x"
    assert check(row(elbo_final=-3.0, **approximation)) == "ok"
    assert check(row(test_nll=90.0, tags_family="trainer", tags_health_warnings="the ELBO fell: retry")) == \
        "warned: the ELBO fell"
    assert check(row(test_nll=90.0, tags_family="trainer")) == "ok"
    assert check(row(rhat_max=1.2, ess_bulk_min=900.0, tags_family="sampler", tags_n_chains="4")) == "rhat 1.2>1.01"
    assert check(row(rhat_max=1.001, ess_bulk_min=900.0, tags_family="sampler", tags_n_chains="4")) == "ok"
    assert check(row(wall_time_s=1.0)) == ""  # nothing to judge it by


def test_compare_sorts_a_vi_run_past_its_khat_last():
    df = pd.DataFrame({"run_id": ["vi000000", "nuts0000"], "status": ["FINISHED"] * 2,
                       "tags.method": ["vi", "nuts"], "tags.family": ["approximation", "sampler"],
                       "tags.n_chains": ["4", "4"], "tags.compare_metrics": ["posterior_mean_err,psis_khat"] * 2,
                       "metrics.posterior_mean_err": [0.01, 0.02], "metrics.psis_khat": [1.93, NAN],
                       "metrics.rhat_max": [NAN, 1.002], "metrics.ess_bulk_min": [NAN, 2000.0]})
    table = compare_table(df, "posterior_mean_err", ascending=True)
    assert list(table["method"]) == ["nuts", "vi"] and list(table["check"]) == ["ok", "khat 1.93>0.7"]


# --- widths ---------------------------------------------------------------------------------------------
def wide_table(n_metrics: int = 14) -> pd.DataFrame:
    names = ["posterior_mean_err", "wall_time_s", "n_grad_evals"] + [f"some_long_metric_name_{k}" for k in range(n_metrics)]
    df = pd.DataFrame({"run_id": [f"{k:08d}" + "f" * 24 for k in range(3)], "status": ["FINISHED"] * 3,
                       "tags.method": ["nuts", "vi", "pathfinder"], "tags.model": ["logreg"] * 3,
                       "tags.data": ["digits"] * 3, "tags.seed": ["0"] * 3,
                       "tags.family": ["sampler", "approximation", "approximation"],
                       "tags.compare_metrics": [",".join(names)] * 3})
    for k, name in enumerate(names):
        df[f"metrics.{name}"] = [0.123456789 * (k + 1), 12345.678, 3.0]
    return df


def test_compare_fits_120_columns_and_wide_shows_every_one():
    table = compare_table(wide_table(), None, False)
    text = render(table, "table")
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    header = text.splitlines()[0].split()
    assert header[:3] == ["run_id", "status", "method"] and "check" in header
    assert {"posterior_mean_err", "wall_time_s", "n_grad_evals"} <= set(header)
    assert "--wide shows them" in text.splitlines()[-1]
    wide = render(table, "table", wide=True)
    assert set(wide.splitlines()[0].split()) == set(table.columns)  # control: every column, wider than 120
    assert max(len(line) for line in wide.splitlines()) > WIDTH
    narrow = compare_table(wide_table(0), None, False)  # a table that fits: no note, nothing left out
    assert render(narrow, "table") == render(narrow, "table", wide=True)


def test_the_answer_table_fits_100_columns_however_long_the_reasons():
    table = pd.DataFrame({"run": ["nuts", "a very long label of a run with many swept keys in it"],
                          "posterior_mean_err": [0.01, 0.2], "wall_time_s": [3.3, 1.5], "n_grad_evals": [1e5, 2e4],
                          "reliable": ["yes", "no: " + ",".join(["rhat 1.06>1.01", "ess 300<400"] * 4)]})
    text = answer_text(table)
    assert max(len(line) for line in text.splitlines()) <= TERMINAL_WIDTH, text
    assert text.splitlines()[0].split() == ["run", "posterior_mean_err", "wall_time_s", "n_grad_evals", "reliable"]
    assert "no: rhat 1.06>1.01" in text and "..." in text


# --- the description's winners ---------------------------------------------------------------------------
def test_equal_values_as_printed_are_a_tie_and_an_unreliable_winner_is_named_so():
    table = pd.DataFrame({"test_accuracy": [0.98613, 0.98611, 0.97], "test_lpd": [-0.0152, -0.0081, -0.0157],
                          "posterior_mean_err": [0.0198, 0.2421, 0.2981]})
    labels, verdicts = ["nuts", "vi", "pathfinder"], ["ok", "khat 1.93>0.7", "khat 2.75>0.7"]
    lines = winners(table, labels, verdicts)
    accuracy = next(line for line in lines if "test_accuracy" in line)
    assert "tie at 0.9861 between **nuts**, **vi** (unreliable: khat 1.93>0.7)" in accuracy, accuracy
    assert "(next: pathfinder 0.97)" in accuracy
    lpd = next(line for line in lines if "test_lpd" in line)
    assert "**vi** -0.0081 (unreliable: khat 1.93>0.7)" in lpd and lpd.endswith("reliable best: **nuts** -0.0152")
    error = next(line for line in lines if "posterior_mean_err" in line)
    assert "**nuts** 0.0198 (next: vi 0.2421)" in error and "unreliable" not in error

    control = winners(table.assign(test_accuracy=[0.9864, 0.9861, 0.97]), labels, ["ok"] * 3)
    assert not any("tie" in line or "unreliable" in line for line in control), control
    nobody = winners(table, labels, ["rhat 1.2>1.01"] * 3)
    assert next(line for line in nobody if "test_lpd" in line).endswith("; no reliable run reports it")


# --- the plot ---------------------------------------------------------------------------------------------
def test_the_plot_draws_unreliable_runs_hollow_and_says_so():
    import matplotlib.pyplot as plt

    table = pd.DataFrame({"posterior_mean_err": [0.02, 0.24, 0.30], "n_grad_evals": [1.2e5, 1.6e4, 2.5e3],
                          "wall_time_s": [3.3, 1.5, 0.9]})
    labels = ["nuts", "vi", "pathfinder"]
    fig = error_vs_cost_figure(table, labels, labels, [False, True, True])
    try:
        ax = fig.axes[0]
        points = [c for c in ax.collections if len(c.get_offsets())]
        hollow = [np.asarray(c.get_facecolors()).size == 0 or np.all(np.asarray(c.get_facecolors())[:, 3] == 0)
                  for c in points]
        assert hollow == [False, True, True]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[:3] == labels and any(t.startswith("hollow: unreliable") for t in legend)
        assert {t.get_text() for t in ax.texts} == {"nuts", "vi (unreliable)", "pathfinder (unreliable)"}
    finally:
        plt.close(fig)
    control = error_vs_cost_figure(table, labels, labels, [False] * 3)
    try:
        assert not any("hollow" in t.get_text() for t in control.axes[0].get_legend().get_texts())
    finally:
        plt.close(control)


# --- a sweep, end to end ----------------------------------------------------------------------------------
QUIET = ["plots.n_coords=0", "save_draws=false", "checkpoint_every=0", "device.num_threads=1"]
TINY_REFERENCE = ["reference.num_warmup=100", "reference.num_draws=100", "reference.n_chains=2"]


def test_a_sweep_of_three_methods_ends_with_its_answer_in_100_columns(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/sweep.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["run", "-m", "method=nuts,vi,pathfinder", "model=logreg", "data=digits", "n_chains=2",
                           *TINY_REFERENCE, *QUIET])
    assert code == 0, err
    runs = {r.data.tags["method"]: r for r in all_runs(uri)
            if r.data.tags.get("method") and r.data.tags.get("role") != "reference"}
    answer = out[out.index("\nsweep "):].strip("\n").splitlines()
    assert re.match(r"sweep [0-9a-f]{8} \(FINISHED\): 3 runs$", answer[0]), answer
    table = answer[2:answer.index("", 2)]
    assert max(len(line) for line in table) <= 100, table
    assert table[0].split() == ["run", "posterior_mean_err", "wall_time_s", "n_grad_evals", "reliable"]
    for method, run in runs.items():
        line = next(ln for ln in table if ln.split()[0] == method)
        metrics = run.data.metrics
        assert line.split()[1:4] == [format_number(metrics[m]) for m in ("posterior_mean_err", "wall_time_s",
                                                                        "n_grad_evals")]
        reliable = line.split(None, 4)[4]
        if metrics.get("psis_khat", 0.0) > 0.7:  # digits: VI's and Pathfinder's k-hat are 2-3 at their defaults
            assert reliable == f"no: khat {metrics['psis_khat']:.3g}>0.7", line
        else:
            assert reliable == "yes" or reliable.startswith(("no: rhat", "no: ess", "no: is-ess", "no: moments")), line
    plot = next(ln for ln in answer if ln.startswith("plot: "))[len("plot: "):]
    assert Path(plot).name == "error_vs_cost.png" and (tmp_path / plot).is_file()

    code, out, err = call(["compare"])  # the same store in bayesx compare: within 120 columns
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= WIDTH, out
    assert {"posterior_mean_err", "check"} <= set(out.splitlines()[0].split())
