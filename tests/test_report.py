"""``bayesx report`` on a real sweep, and the reproduction presets: every ``conf/experiment/*.yaml``
composes (each row of a preset's sweep too), and every published-numbers file parses and names a preset.

One small sweep (NUTS and mean-field VI on digits, two chains, one thread) is recorded into a
temporary store for the whole file; the report must show both rows with the metrics the store holds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import all_runs, call, error_line, isolated_store

import bayesx
from bayesx.cli.config import compose
from bayesx.reports.report import load_published, preset_name
from bayesx.reports.markdown import format_number

REPO = Path(bayesx.__file__).resolve().parent.parent
PRESETS = sorted((REPO / "conf" / "experiment").glob("*.yaml"))
PUBLISHED = sorted((REPO / "results" / "published").glob("*.yaml"))
SWEEP = ["run", "-m", "method=nuts,vi", "model=logreg", "data=digits", "n_chains=2", "++method.num_draws=100",
         "reference.enabled=false", "save_draws=false", "device.num_threads=1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep's store: (root, uri, {method: run})."""
    with isolated_store(tmp_path_factory, "report") as (root, uri):
        code, out, err = call(SWEEP)
        assert code == 0, err
        runs = {r.data.tags.get("method"): r for r in all_runs(uri) if r.data.tags.get("sweep") != "parent"}
        assert sorted(runs) == ["nuts", "vi"]
        yield root, uri, runs


def table_rows(markdown: str) -> list[dict[str, str]]:
    """The first markdown table of a report as dicts (header -> cell)."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


def test_report_writes_both_rows_with_their_metrics_and_a_plot(sweep):
    root, uri, runs = sweep
    published = root / "digits.yaml"
    published.write_text(yaml.safe_dump({
        "title": "NUTS and VI on digits", "citation": "A made-up paper (2026), Table 1",
        "key": ["method"], "metrics": ["test_accuracy", "ess_bulk_min", "elbo_final", "wall_time_s"],
        "relative": {"metric": "wall_time_s", "to": {"method": "nuts"}},
        "rows": [{"match": {"method": "nuts"}, "test_accuracy": 0.99}, {"match": {"method": "vi"}, "elbo_final": -30.5}]}))
    out = root / "report" / "digits.md"
    out.parent.mkdir()
    code, stdout, err = call(["report", "--published", str(published), "--out", str(out), "--note", "a busy machine"])
    assert code == 0, err
    text = out.read_text()
    assert out.with_suffix(".png").stat().st_size > 1000 and "![metrics per run](digits.png)" in text
    assert text.startswith("# NUTS and VI on digits") and "A made-up paper (2026), Table 1" in text
    assert "`bayesx run -m method=nuts,vi model=logreg data=digits" in text and "Machine: host " in text
    assert "\nNote: a busy machine\n" in text
    rows = {r["method"]: r for r in table_rows(text)}
    assert sorted(rows) == ["nuts", "vi"]
    for method, run in runs.items():
        row = rows[method]
        assert row["run"] == run.info.run_id[:8] and row["data"] == "digits" and row["seed"] == "0"
        assert row["test_accuracy"] == format_number(run.data.metrics["test_accuracy"])
        assert row["wall_time_s"] == format_number(run.data.metrics["wall_time_s"])
    assert rows["nuts"]["ess_bulk_min"] == format_number(runs["nuts"].data.metrics["ess_bulk_min"])
    assert rows["vi"]["elbo_final"] == format_number(runs["vi"].data.metrics["elbo_final"])
    assert rows["vi"]["ess_bulk_min"] == "-" and rows["nuts"]["elbo_final"] == "-"
    ratio = runs["vi"].data.metrics["wall_time_s"] / runs["nuts"].data.metrics["wall_time_s"]
    assert rows["nuts"]["wall_time_s / method=nuts"] == "1" and rows["vi"]["wall_time_s / method=nuts"] == format_number(ratio)
    assert rows["nuts"]["paper test_accuracy"] == "0.99" and rows["vi"]["paper test_accuracy"] == "-"
    assert rows["vi"]["paper elbo_final"] == "-30.5"


def test_report_prints_the_newest_sweep_or_the_named_one(sweep):
    root, uri, runs = sweep
    parent = next(r for r in all_runs(uri) if r.data.tags.get("sweep") == "parent").info.run_id
    code, newest, err = call(["report"])
    assert code == 0, err
    code, named, err = call(["report", "--parent", parent[:10], "--experiment-name", "bayesx"])
    assert code == 0, err
    assert newest == named and f"parent run {parent[:8]}" in named
    assert {r["method"] for r in table_rows(named)} == {"nuts", "vi"}
    assert "ess_bulk_min" in table_rows(named)[0]  # without a published file: the runs' compare_metrics


def test_report_help():
    code, out, _ = call(["report", "--help"])
    assert code == 0 and "--parent" in out and "--published" in out and "--out" in out


@pytest.mark.parametrize("argv, needles", [
    (["--parent", "0123456789abcdef"], ["--parent 0123456789abcdef", "no run with that id", "known sweeps"]),
    (["--parent", "0123"], ["at least 8 characters"]),
    (["--experiment", "nope"], ["no experiment named 'nope'"]),
    (["--published", "missing.yaml"], ["missing.yaml", "cannot read"]),
    (["--out", "no/such/folder/t.md"], ["does not exist"]),
])
def test_report_errors_are_one_line(sweep, argv, needles):
    code, _, err = call(["report", *argv])
    line = error_line(err)
    assert code == 2 and all(n in line for n in needles), line


def test_report_on_an_empty_store_is_one_line(tmp_path):
    code, _, err = call(["report", "--uri", f"sqlite:///{tmp_path}/none.db"])
    assert code == 2 and "no runs recorded" in error_line(err)


def test_a_bad_published_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("title: t\ncitation: c\nrows:\n  - match: {method: nuts}\n    ess: high\n")
    with pytest.raises(bayesx.errors.BayesxError, match="row 1: 'ess' must be a number"):
        load_published(bad)


# --- the reproduction presets ------------------------------------------------------------------------
def sweep_params(preset: Path) -> dict[str, str]:
    return ((yaml.safe_load(preset.read_text()) or {}).get("hydra") or {}).get("sweeper", {}).get("params") or {}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_and_each_of_its_rows_composes(preset):
    """The preset composes with the first value of each swept key (Hydra, once), and every row of its sweep
    (``+experiment/rows/<group>=<row>``) names a method whose options, the row's over the method's yaml,
    pass that method's Settings (without Hydra: a compose per row would cost seconds each)."""
    from omegaconf import OmegaConf

    from bayesx.runner import build

    params = sweep_params(preset)
    cfg = compose([f"experiment={preset.stem}", *(f"{k}={v}" for k, v in params.items())])
    assert cfg.model._target_ and cfg.method._target_
    preset_method = (yaml.safe_load(preset.read_text()) or {}).get("method") or {}
    for key, values in params.items():
        if not key.startswith("+experiment/rows/"):
            continue
        for row in str(values).split(","):
            path = REPO / "conf" / key.lstrip("+") / f"{row.strip()}.yaml"
            spec = yaml.safe_load(path.read_text())
            method = next(d["override /method"] for d in spec["defaults"] if "override /method" in d)  # rows name it
            base = OmegaConf.load(REPO / "conf" / "method" / f"{method}.yaml")
            build(OmegaConf.merge(base, preset_method, spec.get("method") or {}), "method")


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.stem)
def test_every_published_file_parses_and_has_its_preset(path):
    published = load_published(path)
    assert published.title and published.citation
    assert (REPO / "conf" / "experiment" / f"{path.stem}.yaml").is_file(), "a published file names its preset"
    assert preset_name(f"experiment={path.stem} seed=1") == path.stem


# the modules that hold method classes (methods/common's numerics and the VAE models beside the trainers are not)
METHOD_MODULE = re.compile(r"bayesx\.methods\.(base|mcmc|vi|vae\.(family|trainer|hvi|flowvae|dppvae))\b"
                           r"|from bayesx\.methods import|from bayesx\.methods\.vae import (family|trainer|hvi|flowvae|dppvae)\b")


def test_no_experiment_script_calls_a_method_directly():
    """Issue 32: reproductions go through the runner; no script imports a method class or RunInputs, or
    calls a bayesx method's infer/run/fit (peers.py calls its peers' own run methods)."""
    offenders = []
    for script in (REPO / "experiments").glob("*.py"):
        text = script.read_text()
        if "RunInputs" in text or METHOD_MODULE.search(text) or re.search(r"\.(infer|fit)\(\s*(target|model)", text):
            offenders.append(script.name)
    assert offenders == []
    assert METHOD_MODULE.search("from bayesx.methods.mcmc.nuts import NUTS")  # the pattern's negative control
    assert not METHOD_MODULE.search("from bayesx.methods.vae.model import VAEModel")


def test_a_peer_run_sits_beside_the_bayesx_runs_of_its_sweep(sweep):
    """experiments/peers.py: a peer's draws (here iid normal draws standing in for a sampler's output) are
    summarized by bayesx's ESS code and logged as a child of the sweep, tagged peer=<name>; the sweep's
    report then shows the peer beside bayesx's rows."""
    import importlib.util

    import numpy as np

    from bayesx.store.tracking import Tracker

    root, uri, runs = sweep
    spec = importlib.util.spec_from_file_location("experiment_peers", REPO / "experiments" / "peers.py")
    peers = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = peers  # dataclasses look their module up
    spec.loader.exec_module(peers)
    parent = runs["nuts"].data.tags["mlflow.parentRunId"]
    post = peers.posterior_from(["model=logreg", "data=digits"])
    draws = np.random.default_rng(0).normal(size=(2, 400, post.dim))
    run_id = peers.log_peer(Tracker(uri, "bayesx"), parent, "numpyro-nuts", post,
                            peers.PeerRun(2.0, draws, 8000.0, 3.0, 0.0), {"chains": 2, "warmup": 400, "draws": 400, "seed": 0})
    run = next(r for r in all_runs(uri) if r.info.run_id == run_id)
    assert run.data.tags["peer"] == "numpyro-nuts" and run.data.tags["mlflow.parentRunId"] == parent
    ess = run.data.metrics["ess_bulk_min"]
    assert 500 < ess < 1000 and run.data.metrics["ess_bulk_min_per_s"] == pytest.approx(ess / 2.0)
    assert 0.0 <= run.data.metrics["test_accuracy"] <= 1.0
    code, out, err = call(["report", "--parent", parent])
    assert code == 0, err
    rows = {r["method"]: r for r in table_rows(out)}
    assert sorted(rows) == ["numpyro-nuts", "nuts", "vi"]
    assert rows["numpyro-nuts"]["ess_bulk_min"] == format_number(ess) and rows["numpyro-nuts"]["data"] == "digits"


def test_a_reference_posterior_made_in_a_sweep_is_named_not_tabulated():
    """The NUTS reference (bayesx.methods.reference) is a child of the sweep like its jobs, but not a row of it."""
    import pandas as pd

    from bayesx.reports.report import reference_lines, select_sweep

    df = pd.DataFrame({
        "run_id": ["p" * 32, "a" * 32, "r" * 32], "start_time": pd.to_datetime([1, 3, 2], unit="s"),
        "tags.sweep": ["parent", None, None], "tags.mlflow.parentRunId": [None, "p" * 32, "p" * 32],
        "tags.role": [None, None, "reference"], "tags.method": [None, "vi", "nuts"],
        "metrics.wall_time_s": [None, 3.0, 42.0]})
    chosen = select_sweep(df, "sqlite:///x.db")
    assert list(chosen.runs["run_id"]) == ["a" * 32]
    assert reference_lines(chosen) == ["Reference posteriors made in this sweep (NUTS, their own runs): rrrrrrrr (42 s)"]


def test_a_preset_run_in_parts_is_one_table_naming_each_part(sweep, tmp_path):
    """Two sweeps of the store, given as two --parent values, make one table with both sweeps' rows, and the header
    names each part's command and parent. Control: one of them alone shows only its own rows."""
    root, uri, runs = sweep

    def parents() -> set[str]:
        return {r.data.tags["mlflow.parentRunId"] for r in all_runs(uri) if "mlflow.parentRunId" in r.data.tags}

    before = parents()
    code, out, err = call(["run", "-m", "method=vi", "seed=1", *SWEEP[3:]])
    assert code == 0, err
    first = runs["nuts"].data.tags["mlflow.parentRunId"]
    (second,) = parents() - before
    def report(*parents: str) -> str:
        out_md = tmp_path / "parts.md"
        code, _, err = call(["report", "--uri", uri, *[a for p in parents for a in ("--parent", p[:8])], "--out",
                             str(out_md), "--no-plot"])
        assert code == 0, err
        return out_md.read_text()

    text, alone_first, alone_second = report(first, second), report(first), report(second)
    assert len(table_rows(alone_second)) == 1  # the second sweep's one run
    assert len(table_rows(text)) == len(table_rows(alone_first)) + 1
    assert "(part 1 of 2: parent run" in text and "(part 2 of 2: parent run" in text
    assert text.count("Made by: ") == 2 and f"--parent {first[:8]} --parent {second[:8]}" in text
    assert "part 1" not in alone_second and alone_second.count("Made by: ") == 1


def test_a_table_too_long_for_a_bar_each_is_plotted_as_dots_per_group(tmp_path):
    """120 runs (4 methods x 30 posteriors): one line per method, not 120 bars, so the image stays readable
    (a bar per run made the 552-run posteriordb preset's plot about 36,000 pixels tall). Control: 40 runs keep a bar
    each."""
    import numpy as np
    import pandas as pd
    from PIL import Image

    from bayesx.reports import report as report_module

    rng = np.random.default_rng(0)
    long = pd.DataFrame({"run": [f"r{i}" for i in range(120)], "method": [f"m{i % 4}" for i in range(120)],
                         "posterior": [f"p{i // 4}" for i in range(120)], "err": rng.random(120),
                         "ess_per_s": 10 ** rng.uniform(0, 4, 120)})
    assert report_module.group_column(long, ["err", "ess_per_s"]) == "method"
    assert report_module.plot(long, ["err", "ess_per_s"], tmp_path / "long.png")
    assert Image.open(tmp_path / "long.png").size[1] < 600
    short = long.iloc[:40]
    assert report_module.plot(short, ["err", "ess_per_s"], tmp_path / "short.png")
    assert Image.open(tmp_path / "short.png").size[1] > 1000  # a bar per run
