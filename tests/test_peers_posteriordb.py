"""The peers harness on posteriordb posteriors (experiments/peers.py, experiments/peers_posteriordb.py): each peer
(NumPyro NUTS, nutpie default and low-rank, BlackJAX NUTS, MAMS and ChEES) samples a small posterior of the suite
and its draws agree with posteriordb's reference draws within Monte Carlo error, while the same draws moved
by five posterior sds do not (negative control); the suite driver logs the peers into one MLflow store under one
parent and writes the suite table with every contender's column. Skipped where a peer is not installed (the
optional ``bench`` extra)."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
NEEDS = {"numpyro-nuts": "numpyro", "nutpie": "nutpie", "nutpie-lowrank": "nutpie", "blackjax-nuts": "blackjax",
         "blackjax-mams": "blackjax", "blackjax-mams-esslength": "blackjax", "blackjax-chees": "blackjax"}
# each peer on one of four small posteriors of the suite (3 to 10 coordinates, a regression with correlated
# coefficients, a hierarchical model, an autoregression). BlackJAX ChEES on earn_height (8 chains, 400 + 400)
# did not reach the posterior (ref err 18 sds, ESS 11): its chains start uniformly in (-2, 2), the metric the identity
# until the last half of warm-up, while the coefficients' scales differ by 10^3; it is checked on the autoregression
PAIRS = [("numpyro-nuts", "earn_height"), ("nutpie", "arK"), ("nutpie-lowrank", "kidscore_momiq"),
         ("blackjax-nuts", "eight_schools_noncentered"), ("blackjax-mams", "eight_schools_noncentered"),
         ("blackjax-mams-esslength", "arK"), ("blackjax-chees", "arK")]


@pytest.fixture
def experiments(monkeypatch):
    monkeypatch.syspath_prepend(str(EXPERIMENTS))
    for name in ("peers", "peers_posteriordb"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return lambda name: importlib.import_module(name)


@pytest.mark.slow
@pytest.mark.parametrize(("peer", "posterior"), PAIRS)
def test_peer_draws_match_the_reference_draws(experiments, peer, posterior):
    pytest.importorskip(NEEDS[peer])
    peers = experiments("peers")
    post = peers.posterior_from(["model=posteriordb", f"model.name={posterior}"])
    chains = 16 if peer == "blackjax-chees" else 2  # ChEES adapts across chains
    args = argparse.Namespace(chains=chains, warmup=400, draws=400, seed=1, jax_dtype="float64")
    out = peers.PEERS[peer](post, args)
    assert out.draws.shape == (chains, 400, post.dim) and np.isfinite(out.draws).all()
    assert out.grads > 0 and out.grads_warmup > 0 and out.wall > 0
    metrics = peers.peer_metrics(post, out)
    tolerance = experiments("peers_posteriordb").reference_tolerance(metrics["ess_bulk_min"], post.dim)
    assert metrics["ref_mean_err_max"] < tolerance, (metrics, tolerance)
    assert metrics["grads_per_ess"] == pytest.approx((out.grads + out.grads_warmup) / metrics["ess_bulk_min"])
    # negative control: the first coordinate moved by five of its posterior sds is caught
    moved = out.draws.copy()
    moved[..., 0] += 5.0 * out.draws[..., 0].std()
    assert post.reference_errors(moved)["ref_mean_err_max"] > tolerance


def test_suite_driver_logs_the_peers_and_writes_every_column(experiments, tmp_path):
    """One peer (BlackJAX NUTS, short) on one posterior through experiments/peers_posteriordb.py: the run is a
    child of the parent in the store with the posterior's name, and the table has every contender's column,
    the run's cell a number, the others the reason they are empty."""
    pytest.importorskip("blackjax")
    driver = experiments("peers_posteriordb")
    from bayesx.store.tracking import search_runs

    out, uri = tmp_path / "suite.md", f"sqlite:///{tmp_path}/mlflow.db"
    argv = ["--posteriors", "kidscore_momiq", "--peers", "blackjax-nuts", "--bayesx", "", "--chains", "2",
            "--warmup", "100", "--draws", "100", "--tracking-uri", uri, "--out", str(out)]
    assert driver.main(argv) == 0
    runs = search_runs(uri, driver.EXPERIMENT)
    child = runs[runs["tags.peer"] == "blackjax-nuts"].iloc[0]
    assert child["params.model.name"] == "kidscore_momiq"
    assert child["tags.mlflow.parentRunId"] in set(runs["run_id"])
    lines = [line for line in out.read_text().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[2:10] == ["NumPyro", "nutpie default", "nutpie low-rank", "BlackJAX NUTS", "BlackJAX MAMS",
                            "BlackJAX MAMS (ESS-based L)", "bayesx NUTS", "bayesx MAMS"]
    row = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert row["posterior"] == "kidscore_momiq" and row["dim"] == "3"
    rate, _, sampler_rate = row["BlackJAX NUTS"].split(" ")[:3]
    ess = child["metrics.ess_bulk_min"]
    # the whole command: the wall time plus BlackJAX's and JAX's import; the sampler: the wall time less its JIT
    assert child["metrics.command_time_s"] > child["metrics.wall_time_s"] > child["metrics.sampler_time_s"] > 0
    assert child["metrics.fixed_time_s"] > 0.1  # the jit of the warm-up and the draws, from JAX's own events
    assert float(rate) == pytest.approx(ess / child["metrics.command_time_s"], rel=6e-3)
    assert float(sampler_rate) == pytest.approx(ess / child["metrics.sampler_time_s"], rel=6e-3)
    assert row["NumPyro"] == "not run: not in --peers" and row["bayesx NUTS"] == "not run: not in --bayesx"


@pytest.mark.slow
def test_a_bayesx_contender_runs_as_its_own_command_under_the_parent(experiments, tmp_path):
    """bayesx's contender (no peers) on one posterior: its own ``bayesx run`` command, timed from outside, its run a
    child of the harness's parent with ``command_time_s`` above its ``wall_time_s``; the table's cell is its
    min-ESS per second of that command and of warm-up plus sampling."""
    driver = experiments("peers_posteriordb")
    from bayesx.store.tracking import search_runs

    assert driver.bayesx_contenders("method=nuts,mams method.mass=diag") == [
        ["method=nuts", "method.mass=diag"], ["method=mams", "method.mass=diag"]]
    assert driver.bayesx_contenders("") == []
    out, uri = tmp_path / "suite.md", f"sqlite:///{tmp_path}/mlflow.db"
    argv = ["--posteriors", "kidscore_momiq", "--peers", "--bayesx", "method=nuts", "--chains", "2",
            "--tracking-uri", uri, "--out", str(out)]
    assert driver.main(argv) == 0
    runs = search_runs(uri, driver.EXPERIMENT)
    nuts = runs[runs["tags.method"] == "nuts"].iloc[0]
    parent = runs[runs["tags.sweep"] == "parent"].iloc[0]
    assert nuts["status"] == "FINISHED" and nuts["tags.mlflow.parentRunId"] == parent["run_id"]
    assert parent["status"] == "FINISHED"
    assert nuts["metrics.command_time_s"] > nuts["metrics.wall_time_s"] > 0
    row = [line for line in out.read_text().splitlines() if line.startswith("| kidscore_momiq")][0]
    cell = [c.strip() for c in row.strip("|").split("|")][8]
    rate, _, sampler_rate = cell.split(" ")[:3]
    ess = nuts["metrics.ess_bulk_min"]
    assert float(rate) == pytest.approx(ess / nuts["metrics.command_time_s"], rel=6e-3)
    sampler = nuts["metrics.warmup_time_s"] + nuts["metrics.sampling_time_s"]
    assert float(sampler_rate) == pytest.approx(ess / sampler, rel=6e-3)


def test_a_peer_past_the_time_limit_is_stopped_and_recorded_as_killed(experiments, tmp_path):
    """BlackJAX MAMS's shipped tuning ran for 9 minutes and more on two posteriors, in one jitted call no signal
    stops: a peer past --peer-limit is stopped with its process, recorded KILLED with the reason, and the next
    peer runs in a fresh process. Here BlackJAX NUTS and then NumPyro with a 1 s limit (their JIT alone takes
    longer) are each stopped, NumPyro in the process started after BlackJAX's was stopped. The control, the same
    BlackJAX NUTS run under the default limit, finishes in the test above."""
    pytest.importorskip("blackjax")
    pytest.importorskip("numpyro")
    driver = experiments("peers_posteriordb")
    from bayesx.store.tracking import search_runs

    out, uri = tmp_path / "suite.md", f"sqlite:///{tmp_path}/mlflow.db"
    argv = ["--posteriors", "kidscore_momiq", "--peers", "blackjax-nuts", "numpyro-nuts", "--bayesx", "",
            "--chains", "2", "--warmup", "100", "--draws", "100", "--peer-limit", "1", "--tracking-uri", uri,
            "--out", str(out)]
    assert driver.main(argv) == 0
    runs = search_runs(uri, driver.EXPERIMENT)
    stopped = runs[runs["tags.peer"] == "blackjax-nuts"].iloc[0]
    assert stopped["status"] == "KILLED" and stopped["tags.error"] == "stopped at the 1 s limit"
    assert runs[runs["tags.peer"] == "numpyro-nuts"].iloc[0]["status"] == "KILLED"  # the next peer ran
    row = [line for line in out.read_text().splitlines() if line.startswith("| kidscore_momiq")][0]
    assert row.count("not run: stopped at the 1 s limit") == 2 and "no peer finished: no ratio" in row


def test_the_table_counts_the_goals_and_says_why_bayesx_is_not_twice_the_best_peer(experiments):
    """The suite table's goal lines and its last column from made-up cells: the ratio of two min-ESS/s splits
    exactly into gradients per ESS times wall time per gradient; a bayesx NUTS run whose mean misses the
    reference by more than Monte Carlo error does not count as a win (the negative control), nor does one
    with R-hat > 1.01."""
    driver = experiments("peers_posteriordb")

    def cell(rate, grads_per_ess, rhat=1.0, ref=0.02, compile_s=None, wall=10.0, sampler_rate=None):
        return {"rate": rate, "rhat": rhat, "grads_per_ess": grads_per_ess, "ref": ref, "wall": wall,
                "compile": compile_s, "ess": rate * wall, "clock": "command",
                "sampler_rate": rate * 2 if sampler_rate is None else sampler_rate}

    # on a, bayesx NUTS is ahead on the whole command but behind on the sampler's time alone
    cells = {("a", "nutpie default"): cell(100.0, 20.0),
             ("a", "bayesx NUTS"): cell(150.0, 10.0, compile_s=2.0, sampler_rate=190.0),
             ("b", "NumPyro"): cell(10.0, 50.0), ("b", "bayesx NUTS"): cell(40.0, 40.0),
             ("c", "NumPyro"): cell(10.0, 50.0), ("c", "bayesx NUTS"): cell(40.0, 40.0, ref=3.0),
             ("d", "NumPyro"): cell(10.0, 50.0), ("d", "bayesx NUTS"): cell(40.0, 40.0, rhat=1.05),
             ("e", "NumPyro"): cell(10.0, 50.0, rhat=1.2), ("e", "bayesx NUTS"): cell(40.0, 40.0)}
    why = driver.why_not_twice(cells, "a")
    # 1.5x = (20 / 10 gradients per ESS) x (0.75x the speed per gradient)
    assert "needs 0.5x nutpie default's gradients per ESS, at 0.75x its speed per gradient" in why
    assert "compile 2 s of its 10 s" in why
    assert driver.why_not_twice(cells, "b") == ""  # 4x: nothing to explain
    assert driver.why_not_twice(cells, "e") == "no peer converged: no ratio"
    assert driver.why_not_twice(cells, "d").startswith("no bayesx sampler converged (R-hat 1.05)")
    assert driver.why_not_twice({("f", "bayesx NUTS"): cell(40.0, 40.0)}, "f") == "no peer finished: no ratio"
    lines = "\n".join(driver.goals(cells, list("abcde"), dict.fromkeys("abcde", 3)))
    assert "on the 4 posteriors where a peer converged** (of 5; on 1 no peer that finished" in lines
    assert "on the whole command's wall time, converged" in lines
    assert "2 of 4 (50%); not on c, d." in lines  # c: 3 sds off the reference; d: not converged
    assert "on the sampler's time alone, converged and within the reference check (worst mean error below Monte " \
           "Carlo error, see `reference_tolerance`): 1 of 4 (25%); not on a, c, d." in lines
    assert "at 2x the best converged peer or more (whole command): 2 of 4" in lines  # b and c (c's rate, not its reference)
