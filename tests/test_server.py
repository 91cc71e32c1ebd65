"""`bayesx server`: a real PostgreSQL cluster and a real MLflow tracking server in a temporary folder;
four parallel jobs log to it and all four are there with their metrics and artifacts; the cluster lets
nobody in without its password, and one made by an older bayesx with trust authentication is
converted on its next start, its data kept. Skipped, with the reason, where PostgreSQL or its Python
driver is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cli_helpers import call, error_line
from tracking_server import psql, running_server
from tracking_server import why_not as _why_not

from bayesx.serve.server import DB_USER, Cluster, cluster_user, free_port, postgres_bin


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


def _old_trust_cluster(data: Path, port: int) -> None:
    """A cluster as bayesx made it before passwords (initdb --auth=trust, started with its old options), with a
    table of one row in database mlflow; left stopped."""
    user = cluster_user()
    data.parent.mkdir(parents=True)
    if user:
        shutil.chown(data.parent, user)
    as_cluster_user = {"user": user, "check": True, "capture_output": True, "timeout": 120}
    subprocess.run([postgres_bin("initdb"), "-D", str(data), "-U", DB_USER, "--auth=trust", "-E", "UTF8"],
                   **as_cluster_user)
    subprocess.run([postgres_bin("pg_ctl"), "-D", str(data), "-o", f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
                    "-l", str(data.parent / "postgres.log"), "-w", "start"], **as_cluster_user)
    try:
        for sql in ("CREATE DATABASE mlflow", "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"):
            subprocess.run([postgres_bin("psql"), "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER, "-d",
                            "mlflow" if "kept" in sql else "postgres", "-c", sql], check=True, capture_output=True)
    finally:
        subprocess.run([postgres_bin("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], **as_cluster_user)


@pytest.mark.slow
@pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
def test_a_trust_cluster_of_an_older_bayesx_is_converted_to_passwords(capsys, monkeypatch):
    """Under trust, psql without a password gets in (the control); after one start by this bayesx the same psql is
    refused over TCP and over the socket, the password file (mode 600) lets us in, and the old data are there."""
    monkeypatch.delenv("PGPASSFILE", raising=False)  # Cluster.start sets it for this process: undone at the end
    folder = Path(tempfile.mkdtemp(prefix="bayesx-trust-", dir="/tmp"))
    folder.chmod(0o755)  # the postgres user must reach its data directory
    data, port = folder / "srv" / "pgdata", free_port()
    _old_trust_cluster(data, port)
    cluster = Cluster(data, port, cluster_user())
    before = subprocess.run([postgres_bin("pg_ctl"), "-D", str(data), "-o", f"-p {port} -k {data} -c "
                             "listen_addresses=127.0.0.1", "-l", str(folder / "srv" / "control.log"), "-w", "start"],
                            user=cluster.user, capture_output=True, timeout=120, check=True)
    try:
        control = psql(port, "mlflow")
    finally:
        cluster.stop()
    assert before.returncode == 0 and control.returncode == 0 and control.stdout.strip() == "1", control.stderr
    try:
        note = cluster.start()
        assert note is not None and "let every local user in (trust authentication" in note
        assert f"it now needs the password in {folder / 'srv' / 'pgpass'}" in capsys.readouterr().err
        for host in ("127.0.0.1", str(data)):
            refused = psql(port, "mlflow", host=host)
            assert refused.returncode != 0 and "no password supplied" in refused.stderr, refused
        wrong = psql(port, "mlflow", env={**os.environ, "PGPASSWORD": "not-the-password", "PGPASSFILE": "/dev/null"})
        assert wrong.returncode != 0 and "password authentication failed for user \"bayesx\"" in wrong.stderr
        assert oct((folder / "srv" / "pgpass").stat().st_mode & 0o777) == "0o600"
        assert oct(data.stat().st_mode & 0o777) == "0o700"
        kept = subprocess.run([postgres_bin("psql"), "-w", "-h", "127.0.0.1", "-p", str(port), "-U", DB_USER, "-d",
                               "mlflow", "-tAc", "SELECT x FROM kept"], env=cluster.client_env(), capture_output=True,
                              text=True, timeout=60)
        assert kept.stdout.strip() == "42", kept.stderr
        assert "trust" not in (data / "pg_hba.conf").read_text()
    finally:
        cluster.stop()
    assert cluster.start() is None  # converted once: the next start changes nothing
    cluster.stop()
    assert "not-the-password" not in (folder / "srv" / "postgres.log").read_text()
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
