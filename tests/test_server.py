"""`bayesx server`: a real PostgreSQL cluster and a real MLflow tracking server in a temporary folder;
four parallel jobs log to it and all four are there with their metrics and artifacts. Skipped, with
the reason, where PostgreSQL or its Python driver is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_helpers import call, error_line
from tracking_server import running_server
from tracking_server import why_not as _why_not

from bayesx.server import free_port


@pytest.mark.slow
@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_four_parallel_jobs_log_to_a_postgresql_backed_server():
    from mlflow.tracking import MlflowClient

    folder = Path(tempfile.mkdtemp(prefix="bayesx-server-", dir="/tmp"))
    with running_server(folder) as url:
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        sweep = subprocess.run([sys.executable, "-m", "bayesx", "run", "-m", "hydra/launcher=local_parallel",
                                "hydra.launcher.n_jobs=4", "tracking=server", f"tracking.uri={url}", "method=laplace",
                                "model=gaussian", "progress=false", "seed=0,1,2,3"],
                               cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        client = MlflowClient(tracking_uri=url)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        children = [r for r in runs if r.data.tags.get("sweep") != "parent"]
        assert sorted(r.data.tags["seed"] for r in children) == ["0", "1", "2", "3"]
        for run in children:
            assert run.info.status == "FINISHED" and "log_evidence" in run.data.metrics
            assert "config.yaml" in {a.path for a in client.list_artifacts(run.info.run_id)}
        assert not (folder / "mlflow.db").exists()  # nothing went to a local file
    assert not (folder / "srv" / "pgdata" / "postmaster.pid").exists()  # the cluster was stopped too
    shutil.rmtree(folder, ignore_errors=True)


def test_server_refuses_a_port_in_use_and_a_bad_port():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = call(["server", "--port", str(port)])
    assert code == 2 and f"port {port} on 127.0.0.1 is already in use" in error_line(err)
    code, _, err = call(["server", "--db-port", "70000"])
    assert code == 2 and "--db-port must be between 1 and 65535" in error_line(err)


def test_run_against_an_unreachable_server_fails_before_sampling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = free_port()
    code, out, err = call(["run", "tracking=server", f"tracking.uri=http://127.0.0.1:{port}", "method=nuts",
                           "data=digits", "progress=false"])
    assert code == 2
    assert f"cannot reach the MLflow tracking server at http://127.0.0.1:{port}" in error_line(err)
    assert "ess_bulk_min" not in out
