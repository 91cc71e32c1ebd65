"""`bayesx ui`: start MLflow's UI, wait until it answers, and print a link to a page that shows the newest sweep's
key metrics without a click.

The page. MLflow 3 opens an experiment in its GenAI view (traces, token usage) unless told otherwise; its web app
reads the view from the query parameter ``workflowType`` (``machine_learning``: the model-training run table) and,
without one, from the experiment's tag ``mlflow.experimentKind``. So the link names the view, and the experiment it
opens is tagged ``custom_model_development`` (where it has no kind yet), so that MLflow's own Home link leads to the
same table. The run table's columns, sort and filter are not query parameters: MLflow keeps them in the browser
(local storage), so a fresh browser shows no metric column. What a link can carry is a *shared view*: the query
parameter ``viewStateShareKey=KEY`` makes the web app read the experiment's tag ``mlflow.sharedViewState.KEY``, a
JSON object of search facets (``searchFilter``, ``orderByKey``, ``orderByAsc``, ...) and table state
(``selectedColumns``, ``columnWidths``, ...; ``runsExpanded`` is ignored there), which is what MLflow's own "Share"
button writes (MLflow 3.17's bundle: the hook that reads ``viewStateShareKey``, the lists of facet and state keys
beside it; tests/test_ui_metadata.py checks they are still there). The view bayesx writes (:func:`sweep_view`):
the newest sweep's runs (filtered by their parent, so MLflow lists them flat rather than folded under it), sorted by
their error against the reference, with the key metrics as columns.

Which experiment: ``--experiment NAME``; else the one that holds the store's newest run; else the configured
``experiment_name`` where it exists; else MLflow's home page.

Starting: ``mlflow ui`` with one uvicorn worker, without MLflow's job runner (a process for GenAI scorers that
bayesx never uses) and without uvicorn's access log (``--verbose`` keeps it). On a 2-core machine shared with other
work (load 7-16), MLflow 3.17's default (four workers, each importing MLflow, and the job runner) answered after
41-67 s, one worker alone after 27-31 s, one worker without the job runner after 7-9 s. Everything after the start
talks to the server over its REST API, so this process never imports MLflow.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from bayesx.reports.compare import ERROR_METRICS, KEY_METRICS
from bayesx.errors import BayesxError

WORKERS = 1
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner: bayesx records no GenAI traces
MODEL_TRAINING = "machine_learning"  # the value of MLflow's ``workflowType`` query parameter
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
SHARE_PARAM, SHARE_TAG = "viewStateShareKey", "mlflow.sharedViewState."  # MLflow's shared view: the link's key, its tag
PARENT_TAG, SWEEP_TAG = "mlflow.parentRunId", "sweep"  # a sweep's child names its parent; the parent says "parent"
POLL_S, NOTE_AFTER_S = 0.25, 60.0
QUIET_SERVER = "--no-access-log"  # uvicorn's option, passed through mlflow ui --uvicorn-opts


def server_options(verbose: bool = False) -> list[str]:
    """The ``mlflow ui`` options bayesx adds: one worker, and no access log unless ``verbose`` (a line per
    request, hundreds per page, would scroll the printed link away)."""
    return ["--workers", str(WORKERS), *([] if verbose else ["--uvicorn-opts", QUIET_SERVER])]


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether the MLflow server at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_until_answers(url: str, alive: Callable[[], bool], out=sys.stdout) -> bool:
    """Poll ``url`` until it answers (True) or ``alive()`` turns False (the server exited: False), showing
    progress on ``out``: a spinner with the seconds waited on a terminal, else a dot every few seconds."""
    tty = getattr(out, "isatty", lambda: False)()
    start, last_dot, noted = time.monotonic(), 0.0, False
    for spin in itertools.cycle("|/-\\"):
        if answers(url):
            if tty:
                out.write("\r" + " " * 60 + "\r")
            else:
                out.write("\n")
            out.flush()
            return True
        if not alive():
            out.write("\n")
            out.flush()
            return False
        waited = time.monotonic() - start
        if tty:
            out.write(f"\r{spin} waiting for the MLflow server ... {waited:.0f} s")
        elif waited - last_dot >= 2.0:
            out.write(".")
            last_dot = waited
        if waited > NOTE_AFTER_S and not noted:
            out.write(f"\n(still starting after {NOTE_AFTER_S:.0f} s: a loaded machine or a large store)\n")
            noted = True
        out.flush()
        time.sleep(POLL_S)
    raise AssertionError("unreachable")


def _call(url: str, path: str, body: dict | None = None, query: dict | None = None) -> dict:
    """One call of the server's REST API (a JSON body: POST, else GET)."""
    address = f"{url}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(address, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise BayesxError(f"the MLflow server at {url} refused {path} (HTTP {exc.code}): "
                          f"{exc.read()[:200].decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise BayesxError(f"the MLflow server at {url} stopped answering ({exc})") from None


def experiments(url: str) -> list[dict]:
    """The store's active experiments (id, name, tags), as the server lists them."""
    found, token = [], None
    while True:
        page = _call(url, "experiments/search", {"max_results": 1000, **({"page_token": token} if token else {})})
        found += page.get("experiments", [])
        token = page.get("next_page_token")
        if not token:
            return found


def newest_run_experiment(url: str, ids: list[str]) -> str | None:
    """The id of the experiment that holds the newest run among ``ids``; None where none has a run."""
    if not ids:
        return None
    runs = _call(url, "runs/search", {"experiment_ids": ids, "max_results": 1,
                                       "order_by": ["attributes.start_time DESC"]}).get("runs", [])
    return runs[0]["info"]["experiment_id"] if runs else None


def choose_experiment(url: str, asked: str | None, configured: str | None) -> dict | None:
    """The experiment the link opens (see the module's docstring); a name that does not exist is an error."""
    known = experiments(url)
    by_name = {e["name"]: e for e in known}
    if asked is not None:
        if asked not in by_name:
            names = ", ".join(sorted(by_name)) or "none"
            raise BayesxError(f"--experiment {asked}: no such experiment in this store (known: {names}); "
                              "leave --experiment out for the one with the newest run")
        return by_name[asked]
    newest = newest_run_experiment(url, [e["experiment_id"] for e in known])
    if newest is not None:
        return next(e for e in known if e["experiment_id"] == newest)
    return by_name.get(configured) if configured else None


def mark_model_training(url: str, experiment: dict) -> None:
    """Tag the experiment as model development (MLflow then opens its run table by default), unless it
    has a kind already."""
    if not any(tag.get("key") == KIND_TAG for tag in experiment.get("tags", [])):
        _call(url, "experiments/set-experiment-tag",
              {"experiment_id": experiment["experiment_id"], "key": KIND_TAG, "value": KIND})


def newest_sweep(url: str, experiment_id: str) -> str | None:
    """The id of the experiment's newest sweep parent; None where it has none."""
    runs = _call(url, "runs/search", {"experiment_ids": [experiment_id], "max_results": 1,
                                       "filter": f"tags.{SWEEP_TAG} = 'parent'",
                                       "order_by": ["attributes.start_time DESC"]}).get("runs", [])
    return runs[0]["info"]["run_id"] if runs else None


def child_metrics(url: str, experiment_id: str, parent_id: str) -> set[str]:
    """The metric names the sweep's child runs report (its first 1000 runs)."""
    runs = _call(url, "runs/search", {"experiment_ids": [experiment_id], "max_results": 1000,
                                       "filter": f"tags.`{PARENT_TAG}` = '{parent_id}'"}).get("runs", [])
    return {m["key"] for run in runs for m in run.get("data", {}).get("metrics", [])}


def column(kind: str, name: str) -> str:
    """A column's key as MLflow's run table names it (``metrics.`posterior_mean_err```)."""
    return f"{kind}.`{name}`"


def sweep_view(parent_id: str | None, metrics: set[str]) -> dict:
    """The shared view the link opens (module docstring): the sweep's runs (every run where ``parent_id`` is None),
    sorted by the first error metric they report, with the :data:`bayesx.reports.compare.KEY_METRICS` they report as
    columns (all of them where they report none)."""
    shown = [m for m in KEY_METRICS if m in metrics] or list(KEY_METRICS)
    view: dict = {"selectedColumns": [column("metrics", m) for m in shown]}
    if parent_id:
        view["searchFilter"] = f"tags.`{PARENT_TAG}` = '{parent_id}'"
    error = next((m for m in ERROR_METRICS if m in metrics), None)
    if error:
        view.update(orderByKey=column("metrics", error), orderByAsc=True)
    return view


def share_view(url: str, experiment_id: str, view: dict) -> str:
    """Store ``view`` as a shared view of the experiment and return its key (named by its content, so the same view
    is one tag and an older link keeps its own)."""
    value = json.dumps(view, sort_keys=True)
    key = "bayesx-" + hashlib.sha256(value.encode()).hexdigest()[:16]
    _call(url, "experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": SHARE_TAG + key,
                                                  "value": value})
    return key


def experiment_link(url: str, experiment_id: str, share_key: str | None = None) -> str:
    """The address of the experiment's run table in MLflow's model-training view (in the shared view
    ``share_key``, if given)."""
    shared = f"{SHARE_PARAM}={share_key}&" if share_key else ""
    return f"{url}/#/experiments/{experiment_id}/runs?{shared}workflowType={MODEL_TRAINING}"


def landing(url: str, asked: str | None, configured: str | None) -> tuple[str, str]:
    """The link to print and what it opens (``the newest sweep of experiment 'bayesx'``, ``the runs of ...`` or
    ``MLflow's home page``)."""
    experiment = choose_experiment(url, asked, configured)
    if experiment is None:
        return f"{url}/", "MLflow's home page (the store has no runs yet)"
    mark_model_training(url, experiment)
    eid = experiment["experiment_id"]
    parent = newest_sweep(url, eid)
    key = share_view(url, eid, sweep_view(parent, child_metrics(url, eid, parent) if parent else set()))
    what = (f"the newest sweep of experiment '{experiment['name']}' (its runs, sorted by error; 'Exit shared view' "
            "for every run)" if parent else f"the runs of experiment '{experiment['name']}'")
    return experiment_link(url, eid, key), what
