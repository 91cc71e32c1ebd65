"""Issue 36: what a person sees of a run in the MLflow UI, and how `bayesx ui` opens it.

Every run logs its data's splits as MLflow dataset inputs (name, content digest, shapes), its preset
and family as tags, and a description (the run's note) with its key metrics rounded, what its
accuracy metrics compare with, and its warnings in full; samplers share ``posterior_mean_err`` with
the approximations in a sweep over methods (or where the reference is cached); no metric is NaN.
`bayesx ui` prints its link only once the server answers, and the link opens the model-training view.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import all_runs, call
from mlflow.tracking import MlflowClient

from bayesx.serve import ui
from bayesx.errors import BayesxError
from bayesx.store.provenance import content_digest, data_inputs
from bayesx.store.record import RunStart
from bayesx.store.run_note import describe_run, rounded
from bayesx.runner import sweeps_methods
from bayesx.store.tracking import DESCRIPTION_TAG, Tracker

ONE_THREAD = "device.num_threads=1"
TINY_NUTS = ["method.num_warmup=30", "method.num_draws=30", "n_chains=2"]
TINY_REFERENCE = ["reference.num_warmup=40", "reference.num_draws=40", "reference.n_chains=2"]
QUIET = ["plots.n_coords=0", "save_draws=false", "checkpoint_every=0", ONE_THREAD]
LONG_WARNING = ("psis_khat = 3.71 > 0.7: q misses mass of the posterior, so its draws and the evidence estimate "
                "are unreliable; use a richer family or an MCMC method. " * 8)


# --- the description -------------------------------------------------------------------------------
def test_rounded_keeps_integers_whole_and_four_digits_otherwise():
    assert rounded(17640.0) == "17640"
    assert rounded(0.031391234) == "0.03139"
    assert rounded(-120.04) == "-120"
    assert rounded(1294.4) == "1294"


def test_description_names_the_run_its_metrics_its_comparison_and_every_warning_in_full():
    identity = {"method": "pathfinder", "family": "approximation", "model": "logreg", "data": "digits",
                "preset": "quick"}
    metrics = {"psis_khat": 3.7101, "elbo_final": -120.04, "n_grad_evals": 4756.0, "wall_time_s": 1.5951,
               "posterior_mean_err": 0.21312}
    text = describe_run(identity, "FINISHED", metrics, ("elbo_final", "psis_khat", "posterior_mean_err"),
                        "posterior_mean_err against the reference NUTS run abcd1234", (LONG_WARNING,),
                        ("reference posterior: reused",))
    assert text.splitlines()[0] == "**pathfinder** (approximation) on logreg, data digits, preset quick: FINISHED"
    assert "elbo_final -120 · psis_khat 3.71 · posterior_mean_err 0.2131 · n_grad_evals 4756 · wall_time_s 1.595" in text
    assert "Compared with: posterior_mean_err against the reference NUTS run abcd1234" in text
    assert f"- {LONG_WARNING}" in text  # not cut, unlike a long tag in the run table
    assert "- reference posterior: reused" in text


def test_sweeps_over_methods_are_told_apart_from_other_sweeps():
    assert sweeps_methods("method=nuts,vi,pathfinder model=logreg data=digits")
    assert not sweeps_methods("seed=0,1,2 method=nuts")
    assert not sweeps_methods("method.lr=0.1,0.01")
    assert sweeps_methods("None +method=vi,laplace")  # a preset's hydra.sweeper.params, as overrides
    assert not sweeps_methods(None)


# --- the data as dataset inputs ------------------------------------------------------------------------
class _Split:
    def __init__(self, x_train, y_train, x_test, y_test):
        self.x_train, self.y_train, self.x_test, self.y_test, self.source = x_train, y_train, x_test, y_test, "made"


def test_content_digest_follows_the_numbers():
    x = np.arange(12.0).reshape(4, 3)
    assert content_digest(x, np.ones(4)) == content_digest(x.copy(), np.ones(4))
    changed = x.copy()
    changed[2, 1] += 1e-12
    assert content_digest(changed, np.ones(4)) != content_digest(x, np.ones(4))
    assert content_digest(x.reshape(3, 4)) != content_digest(x)  # the shape counts too


def test_data_inputs_are_the_training_and_test_splits():
    data = _Split(np.zeros((5, 2)), np.ones(5), np.zeros((3, 2)), np.zeros(3))
    train, test = data_inputs(data, "toy")
    assert (train.name, train.context, train.origin, train.features.shape) == ("toy", "training", "made", (5, 2))
    assert (test.context, test.targets.shape) == ("test", (3,))
    assert train.digest != test.digest
    assert data_inputs(object(), "none") == ()


def test_the_tracker_logs_dataset_inputs_and_drops_non_finite_metrics(tmp_path):
    uri = f"sqlite:///{tmp_path}/store.db"
    tracker = Tracker(uri, "unit")
    data = _Split(np.zeros((5, 2)), np.ones(5), np.zeros((3, 2)), np.zeros(3))
    with tracker.run(RunStart("unit", {}, {}, "", datasets=data_inputs(data, "toy"))) as run:
        run.log_metrics({"good": 1.0, "nan": math.nan, "inf": math.inf})
        run.log_series("curve", [(1, 0.5), (2, math.nan), (3, 0.25)])
        run_id = run.run_id
    client = MlflowClient(uri)
    stored = client.get_run(run_id)
    assert set(stored.data.metrics) == {"good", "curve"}
    assert [m.step for m in client.get_metric_history(run_id, "curve")] == [1, 3]
    inputs = stored.inputs.dataset_inputs
    assert sorted(i.tags[0].value for i in inputs) == ["test", "training"]
    assert {i.dataset.name for i in inputs} == {"toy"} and all(len(i.dataset.digest) == 16 for i in inputs)
    assert '"features_shape": [5, 2]' in next(i.dataset.profile for i in inputs if i.tags[0].value == "training")


# --- runs end to end -------------------------------------------------------------------------------------
@pytest.fixture
def fresh_store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/runs.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    return uri


def _no_nan(run) -> None:
    bad = {k: v for k, v in run.data.metrics.items() if not math.isfinite(v)}
    assert not bad, f"{run.info.run_name} logged non-finite metrics {bad}"


def test_a_sweep_over_methods_compares_every_run_with_one_reference(fresh_store):
    code, out, err = call(["run", "-m", "method=nuts,laplace", "model=logreg", "data=digits", "method.num_draws=40",
                           "n_chains=2", *TINY_REFERENCE, *QUIET])
    assert code == 0, err
    runs = all_runs(fresh_store)
    references = [r for r in runs if r.data.tags.get("role") == "reference"]
    children = [r for r in runs if r.data.tags.get("method") in ("nuts", "laplace") and r not in references]
    assert len(references) == 1 and len(children) == 2, [r.info.run_name for r in runs]
    reference_id = references[0].info.run_id
    for run in children:
        tags, metrics = run.data.tags, run.data.metrics
        assert "posterior_mean_err" in metrics and "posterior_sd_err" in metrics, run.info.run_name
        assert tags["reference_run_id"] == reference_id  # the same reference for both
        assert {"wall_time_s", "n_grad_evals", "test_accuracy", "test_lpd"} <= set(metrics)
        assert sorted(i.tags[0].value for i in run.inputs.dataset_inputs) == ["test", "training"]
        assert {i.dataset.name for i in run.inputs.dataset_inputs} == {"digits"}
        note = tags[DESCRIPTION_TAG]
        assert note.startswith(f"**{tags['method']}** ({tags['family']}) on logreg, data digits: FINISHED")
        assert f"reference NUTS run {reference_id[:8]}" in note and "2 chains x 40 draws" in note
        for warning in tags.get("health_warnings", "").split(" | "):
            assert warning in note
        _no_nan(run)
    nuts = next(r for r in children if r.data.tags["method"] == "nuts")
    assert "Monte Carlo error of both" in nuts.data.tags[DESCRIPTION_TAG]
    digests = {(r.info.run_id, i.dataset.digest) for r in children for i in r.inputs.dataset_inputs}
    assert len({d for _, d in digests}) == 2  # both runs fitted and tested on the same two splits
    reference = references[0]  # a child of the sweep too: its data and a description like every run's
    assert {i.dataset.digest for i in reference.inputs.dataset_inputs} == {d for _, d in digests}
    assert reference.data.tags[DESCRIPTION_TAG].startswith("**nuts (reference)** (sampler) on logreg, data digits")
    assert "The reference posterior of logreg" in reference.data.tags[DESCRIPTION_TAG]
    _no_nan(reference)


def test_a_single_sampler_run_reuses_a_cached_reference_but_never_pays_for_one(fresh_store):
    nuts = ["run", "method=nuts", "model=logreg", "data=digits", *TINY_NUTS, *TINY_REFERENCE, *QUIET]
    code, out, err = call([*nuts, "experiment=quick"])
    assert code == 0, err
    first = all_runs(fresh_store)
    assert len(first) == 1 and "posterior_mean_err" not in first[0].data.metrics  # no reference run made for it
    assert first[0].data.tags["preset"] == "quick" and first[0].data.tags["family"] == "sampler"

    started = time.time()
    code, out, err = call(["run", "method=laplace", "model=logreg", "data=digits", "method.num_draws=200",
                           *TINY_REFERENCE, *QUIET])  # computes the reference, its own run
    assert code == 0, err
    laplace = next(r for r in all_runs(fresh_store) if r.data.tags.get("method") == "laplace"
                   and r.data.tags.get("role") != "reference")
    reference = next(r for r in all_runs(fresh_store) if r.data.tags.get("role") == "reference")
    # the run's MLflow Duration leaves the reference out, as its wall_time_s does (issue 36, point 3)
    duration = (laplace.info.end_time - laplace.info.start_time) / 1000
    assert duration <= laplace.data.metrics["wall_time_s"] + 1.0
    assert reference.info.end_time <= laplace.info.start_time and reference.info.start_time >= started * 1000 - 1

    code, out, err = call(nuts)
    assert code == 0, err
    second = next(r for r in all_runs(fresh_store) if r.data.tags.get("method") == "nuts"
                  and r.data.tags.get("role") != "reference" and r.info.run_id != first[0].info.run_id)
    assert second.data.tags["reference_run_id"] == reference.info.run_id
    assert "posterior_mean_err" in second.data.metrics and "cached in the store" in second.data.tags[DESCRIPTION_TAG]
    assert len([r for r in all_runs(fresh_store) if r.data.tags.get("role") == "reference"]) == 1
    for run in all_runs(fresh_store):
        _no_nan(run)


def test_a_metric_that_comes_out_nan_is_left_out_and_named(fresh_store):
    # VI stopped before its first convergence window closes: its windowed rise is undefined (was logged as NaN)
    code, out, err = call(["run", "method=vi", "model=gaussian", "method.num_steps=5", *QUIET])
    assert code == 0, err
    (run,) = all_runs(fresh_store)
    _no_nan(run)
    assert "objective_window_rise" not in run.data.metrics and "elbo_final" in run.data.metrics
    assert "not logged, not a number: objective_window_rise" in run.data.tags[DESCRIPTION_TAG]


# --- bayesx ui -------------------------------------------------------------------------------------------
def _bundle() -> str:
    import mlflow

    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    return "".join(p.read_text(errors="replace") for p in js.glob("*.js"))


def test_the_link_names_the_view_that_mlflows_web_app_reads():
    """MLflow's bundled web app must read the query parameter and value the link uses."""
    bundle = _bundle()
    assert 'get("workflowType")' in bundle and f'MACHINE_LEARNING="{ui.MODEL_TRAINING}"' in bundle
    assert f'"{ui.KIND_TAG}"' in bundle and f'CUSTOM_MODEL_DEVELOPMENT="{ui.KIND}"' in bundle
    link = ui.experiment_link("http://127.0.0.1:5000", "7")
    assert link == "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
    shared = ui.experiment_link("http://127.0.0.1:5000", "7", "bayesx-0123")
    assert shared == "http://127.0.0.1:5000/#/experiments/7/runs?viewStateShareKey=bayesx-0123&workflowType=machine_learning"


def test_the_shared_view_uses_the_keys_mlflows_web_app_reads():
    """The view bayesx stores is read by MLflow 3.17's web app: the query parameter and tag prefix of a shared view,
    the search facets and table state it takes from the tag, the column keys of its run table, and its rule that
    a sorted or filtered table lists child runs flat (not folded under their parent)."""
    bundle = _bundle()
    assert f'"{ui.SHARE_PARAM}"' in bundle and f'"{ui.SHARE_TAG}"' in bundle
    assert '["searchFilter","orderByKey","orderByAsc","startTime","lifecycleFilter","modelVersionFilter",' in bundle
    assert '["selectedColumns","columnOrder","columnWidths","runsExpanded",' in bundle
    assert re.search(r'\((\w),(\w)\)=>\1\+"\.`"\+\2\+"`"', bundle)  # the run table's column key: metrics.`name`
    # children are nested under their parent only in a table neither sorted (but by date) nor filtered
    assert re.search(r"\(\)=>!(\w)&&!(\w)\|\|\1===\w+\.\w+\.DATE,\[\1,\2\]", bundle)
    view = ui.sweep_view("p1", {"posterior_mean_err", "wall_time_s", "psis_khat", "other"})
    assert view == {"selectedColumns": ["metrics.`posterior_mean_err`", "metrics.`psis_khat`", "metrics.`wall_time_s`"],
                    "searchFilter": "tags.`mlflow.parentRunId` = 'p1'",
                    "orderByKey": "metrics.`posterior_mean_err`", "orderByAsc": True}
    assert ui.sweep_view(None, set()) == {"selectedColumns": [ui.column("metrics", m) for m in ui.KEY_METRICS]}


def test_the_server_keeps_its_access_log_only_when_asked():
    assert ui.server_options() == ["--workers", "1", "--uvicorn-opts", "--no-access-log"]
    assert ui.server_options(verbose=True) == ["--workers", "1"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


class _Progress:
    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_waiting_ends_only_once_the_server_answers():
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = ThreadingHTTPServer(("127.0.0.1", port), _Health)
    opened_at = []

    def open_late():
        time.sleep(2.5)
        opened_at.append(time.monotonic())
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=open_late, daemon=True)
    thread.start()
    progress = _Progress()
    try:
        assert ui.wait_until_answers(url, lambda: True, progress)
        assert opened_at and time.monotonic() >= opened_at[0]
        assert ui.answers(url)
        assert "." in progress.text  # a dot every two seconds while waiting (not a terminal)
    finally:
        server.shutdown()
        server.server_close()


def test_waiting_stops_when_the_server_exits_first():
    url = f"http://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    assert not ui.wait_until_answers(url, lambda: time.monotonic() - started < 0.6, _Progress())


class _FakeStore(BaseHTTPRequestHandler):
    """Answers the REST calls `bayesx ui` makes, from ``server.experiments``, ``server.newest`` (the experiment of the
    newest run), ``server.sweep`` (its newest sweep parent) and ``server.metrics`` (its children's metrics)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        store = self.server
        if self.path.endswith("experiments/search"):
            answer = {"experiments": store.experiments}
        elif self.path.endswith("runs/search") and "sweep" in body.get("filter", ""):
            answer = {"runs": [{"info": {"run_id": store.sweep}}] if store.sweep else []}
        elif self.path.endswith("runs/search") and "parentRunId" in body.get("filter", ""):
            assert body["filter"] == f"tags.`mlflow.parentRunId` = '{store.sweep}'"
            answer = {"runs": [{"data": {"metrics": [{"key": m, "value": 1.0} for m in store.metrics]}}]}
        elif self.path.endswith("runs/search"):
            answer = {"runs": [{"info": {"experiment_id": store.newest}}] if store.newest in body["experiment_ids"]
                      else []}
        else:  # set-experiment-tag
            store.tagged.append((body["experiment_id"], body["key"], body["value"]))
            answer = {}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_store():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeStore)
    server.experiments = [{"experiment_id": "0", "name": "Default", "tags": []},
                          {"experiment_id": "3", "name": "bayesx", "tags": []},
                          {"experiment_id": "5", "name": "digits", "tags": [{"key": ui.KIND_TAG, "value": "genai_development"}]}]
    server.newest, server.tagged, server.sweep, server.metrics = "3", [], None, []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _shared(server, experiment_id: str) -> tuple[str, dict]:
    """The key and view of the one shared view the link stored on ``experiment_id``."""
    (key, value), = [(k, v) for e, k, v in server.tagged if e == experiment_id and k.startswith(ui.SHARE_TAG)]
    return key[len(ui.SHARE_TAG):], json.loads(value)


def test_the_link_opens_the_newest_runs_experiment_and_marks_it_model_training(fake_store):
    server, url = fake_store
    link, what = ui.landing(url, None, "digits")
    key, view = _shared(server, "3")
    assert link == ui.experiment_link(url, "3", key) and what == "the runs of experiment 'bayesx'"
    assert server.tagged[0] == ("3", ui.KIND_TAG, ui.KIND)
    assert view == ui.sweep_view(None, set())


def test_the_link_opens_the_newest_sweep_sorted_by_error_with_its_key_metrics(fake_store):
    server, url = fake_store
    server.sweep, server.metrics = "p1", ["posterior_mean_err", "n_grad_evals", "rhat_max", "test_lpd"]
    link, what = ui.landing(url, None, None)
    key, view = _shared(server, "3")
    assert link == ui.experiment_link(url, "3", key) and what.startswith("the newest sweep of experiment 'bayesx'")
    assert view == ui.sweep_view("p1", set(server.metrics))
    assert view["searchFilter"] == "tags.`mlflow.parentRunId` = 'p1'" and view["orderByAsc"] is True
    assert ui.landing(url, None, None)[0] == link  # the same view again: the same key, one tag
    assert len({k for _, k, _ in server.tagged if k.startswith(ui.SHARE_TAG)}) == 1


def test_the_link_opens_the_asked_experiment_and_keeps_a_kind_it_has(fake_store):
    server, url = fake_store
    link, _ = ui.landing(url, "digits", None)
    assert link == ui.experiment_link(url, "5", _shared(server, "5")[0])
    assert not [t for t in server.tagged if t[1] == ui.KIND_TAG]  # the user's own choice of view stays
    with pytest.raises(BayesxError, match=r"--experiment nope: no such experiment .*known: Default, bayesx, digits"):
        ui.landing(url, "nope", None)


def test_without_runs_the_link_opens_the_configured_experiment_or_home(fake_store):
    server, url = fake_store
    server.newest = None
    assert ui.landing(url, None, "digits")[0] == ui.experiment_link(url, "5", _shared(server, "5")[0])
    assert ui.landing(url, None, "missing") == (f"{url}/", "MLflow's home page (the store has no runs yet)")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs process groups")
def test_bayesx_ui_prints_the_model_training_link_only_once_the_server_answers(tmp_path):
    uri = f"sqlite:///{tmp_path}/ui.db"
    tracker = Tracker(uri, "my-experiment")
    with tracker.run(RunStart("r", {}, {}, "")):
        pass
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "bayesx", "ui", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in first and "waiting" in first
        link = None
        while link is None:
            line = proc.stdout.readline()
            assert line, f"bayesx ui ended (status {proc.poll()}) before it printed a link"
            match = re.search(r"MLflow UI: (\S+)", line)
            if match:
                link = match.group(1)
                assert ui.answers(f"http://127.0.0.1:{port}", timeout=5)  # printed once the server answers
        answered_after = time.monotonic() - started
        tags = MlflowClient(uri).get_experiment(tracker.experiment_id).tags
        (key,) = [k[len(ui.SHARE_TAG):] for k in tags if k.startswith(ui.SHARE_TAG)]
        assert link == ui.experiment_link(f"http://127.0.0.1:{port}", tracker.experiment_id, key)
        with urllib.request.urlopen(link, timeout=10) as page:
            assert page.status == 200
        kind = MlflowClient(uri).get_experiment(tracker.experiment_id).tags.get(ui.KIND_TAG)
        assert kind == ui.KIND
        print(f"bayesx ui answered after {answered_after:.1f} s")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
