"""`bayesx server --auth`: MLflow's basic-auth app (as bayesx wraps it) in front of a real tracking server on a
real PostgreSQL cluster (users in the cluster's database mlflow_auth). A request without credentials is
refused (401) and creates nothing; a user with edit records a FINISHED run; a read-only user creates no
experiment and no run, over REST or through bayesx run; a wrong password is one line before anything
runs; another local user (nobody) cannot open either database, over TCP or the socket. The rules that
need no server (who may listen where, the password file's mode) are fast tests of their own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cli_helpers import call, error_line
from tracking_server import psql, why_not_other_user

from bayesx.serve.server import free_port
from bayesx.errors import BayesxError
from bayesx.serve.auth import check_admin, check_exposure, is_loopback, new_user_password, request

CAROL_PASSWORD, DAVE_PASSWORD = "carol-pass-0123", "dave-pass-01234"

ADMIN_PASSWORD, ALICE_PASSWORD, BOB_PASSWORD = "admin-pass-0123", "alice-pass-0123", "bob-pass-01234"
STARTED = "MLflow tracking server at"


def secret_file(folder: Path, name: str, text: str, mode: int = 0o600) -> Path:
    path = folder / name
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


# --- without a server -------------------------------------------------------------------------------
def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_listening_beyond_localhost_needs_auth_or_insecure(monkeypatch):
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    code, _, err = call(["server", "--host", "0.0.0.0", "--port", str(free_port())])
    line = error_line(err)
    assert code == 2 and "refusing to listen on 0.0.0.0 without authentication" in line
    assert "--auth" in line and "--insecure" in line
    check_exposure("0.0.0.0", auth=False, insecure=True)  # allowed, with the summary's warning
    check_exposure("0.0.0.0", auth=True, insecure=False)
    check_exposure("127.0.0.1", auth=False, insecure=False)  # the local default stays open (tests, one user)
    code, _, err = call(["server", "--host", "0.0.0.0", "--auth", "--insecure"])
    assert code == 2 and "--insecure is for a server without --auth" in error_line(err)


def test_admin_password_comes_from_a_private_file_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_AUTH_ADMIN_PASSWORD", raising=False)
    port = str(free_port())
    code, _, err = call(["server", "--auth", "--port", port])
    assert code == 2 and "the admin password is missing: set $MLFLOW_AUTH_ADMIN_PASSWORD" in error_line(err)
    shared = secret_file(tmp_path, "admin.txt", ADMIN_PASSWORD, mode=0o640)
    code, _, err = call(["server", "--auth", "--port", port, "--admin-password-file", str(shared)])
    line = error_line(err)
    assert code == 2 and f"{shared} is readable by others (mode 640); run: chmod 600 {shared}" in line
    short = secret_file(tmp_path, "short.txt", "tooshort")
    code, _, err = call(["server", "--auth", "--port", port, "--admin-password-file", str(short)])
    assert code == 2 and "has 8 characters; MLflow needs at least 12" in error_line(err)
    code, _, err = call(["server", "--auth", "--port", port, "--admin-password-file", str(tmp_path / "none")])
    assert code == 2 and "cannot read the admin password file" in error_line(err)


def test_user_add_refuses_a_readable_password_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", ADMIN_PASSWORD)
    readable = secret_file(tmp_path, "alice.txt", ALICE_PASSWORD, mode=0o644)
    with pytest.raises(BayesxError, match=r"readable by others \(mode 644\)"):
        new_user_password("alice", str(readable))
    monkeypatch.delenv("BAYESX_USER_PASSWORD", raising=False)
    typed = iter([ALICE_PASSWORD, ALICE_PASSWORD + "x"])
    with pytest.raises(BayesxError, match="the two passwords typed for 'alice' differ"):
        new_user_password("alice", None, prompt=lambda _: next(typed))


def test_the_routes_whose_creator_becomes_owner_are_found_in_mlflows_tables():
    """bayesx's app refuses READ users exactly where MLflow makes a creator MANAGE what it made: read from MLflow's
    after-request tables, so they must include experiment creation (REST and UI) and registered models."""
    from bayesx.serve.app import creation_routes, fastapi_creation_prefixes

    routes = creation_routes()
    for api in ("/api/2.0", "/ajax-api/2.0"):
        assert (f"{api}/mlflow/experiments/create", "POST") in routes
        assert (f"{api}/mlflow/registered-models/create", "POST") in routes
    assert all(method == "POST" for _, method in routes)
    assert not any("runs" in path or "search" in path for path, _ in routes)  # MLflow's own checks govern those
    assert "/api/3.0/mlflow/mcp-servers" in fastapi_creation_prefixes()


def test_an_install_without_bayesx_app_is_one_line(monkeypatch):
    """An environment installed before the entry point: `bayesx server --auth` says so instead of MLflow's
    'Failed to find app' from inside the started server."""
    import importlib.metadata

    from bayesx.serve.auth import require_auth_app

    require_auth_app()  # this install registers it
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [])
    with pytest.raises(BayesxError, match="MLflow does not know bayesx's app 'bayesx-auth'.*install bayesx again"):
        require_auth_app()
    before_the_move = "bayesx." + "server_app:create_app"  # split: /work/move_packages.py rewrites the whole name
    stale = importlib.metadata.EntryPoint("bayesx-auth", before_the_move, "mlflow.app")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **_: [stale])
    with pytest.raises(BayesxError, match="before its modules moved"):
        require_auth_app()


def test_pg_hba_lines_other_than_scram_are_found():
    from bayesx.serve.server import HBA, hba_methods

    assert set(hba_methods(HBA)) == {"scram-sha-256"}
    old = ("local all all trust\nhost all all 127.0.0.1/32 trust # x\nhost all all 127.0.0.1 255.255.255.255 md5\n"
           "host all all samehost peer\n# host all all ::1/128 trust\ninclude_if_exists more.conf\n")
    assert hba_methods(old) == ["trust", "trust", "md5", "peer", "include_if_exists"]


# --- a real server on PostgreSQL ---------------------------------------------------------------------
def _why_not() -> str | None:
    from test_server import _why_not as postgres_missing

    if postgres_missing():
        return postgres_missing()
    try:
        import flask_wtf  # noqa: F401 - MLflow's basic-auth app needs it
    except ImportError:
        return "Flask-WTF is not installed (pip install 'bayesx[server]')"
    return None


def start_server(folder: Path, args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """``bayesx server`` in its own process group, once it has printed its summary: (process, summary)."""
    out = folder / "server.out"
    with open(out, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "bayesx", "server", *args], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 240
    while STARTED not in out.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            pytest.fail(f"bayesx server did not start:\n{out.read_text()[-3000:]}")
        time.sleep(0.5)
    time.sleep(0.5)  # the lines after the first
    return proc, out.read_text()


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)


@pytest.fixture(scope="module")
def auth_server():
    """One authenticated server for the module: (url, admin credentials, folder, database port)."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="bayesx-auth-", dir="/tmp"))
    folder.chmod(0o755)  # the postgres user must reach its data directory
    admin_file = secret_file(folder, "admin.txt", ADMIN_PASSWORD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    port, db_port = free_port(), free_port()
    proc, summary = start_server(folder, ["--dir", str(folder / "srv"), "--port", str(port), "--db-port", str(db_port),
                                          "--auth", "--admin-password-file", str(admin_file)], env)
    try:
        assert "authentication on (users in postgresql://" in summary and "/mlflow_auth)" in summary
        assert ADMIN_PASSWORD not in summary and ADMIN_PASSWORD not in (folder / "srv" / "basic_auth.ini").read_text()
        command_lines = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert "--app-name bayesx-auth" in command_lines and ADMIN_PASSWORD not in command_lines
        yield f"http://127.0.0.1:{port}", ("admin", ADMIN_PASSWORD), folder, db_port
    finally:
        stop_server(proc)
    assert not (folder / "srv" / "pgdata" / "postmaster.pid").exists()
    shutil.rmtree(folder, ignore_errors=True)


def experiments(url: str, admin) -> dict[str, str]:
    status, body = request(url, "/api/2.0/mlflow/experiments/search", admin, query={"max_results": 1000})
    assert status == 200, body
    return {e["name"]: e["experiment_id"] for e in body.get("experiments", [])}


def runs(url: str, admin) -> list[dict]:
    status, body = request(url, "/api/2.0/mlflow/runs/search", admin,
                           payload={"experiment_ids": list(experiments(url, admin).values()), "max_results": 1000})
    assert status == 200, body
    return body.get("runs", [])


def as_user(monkeypatch, name: str | None, password: str | None = None) -> None:
    for variable, value in (("MLFLOW_TRACKING_USERNAME", name), ("MLFLOW_TRACKING_PASSWORD", password)):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)


def run_argv(url: str) -> list[str]:
    return ["run", "tracking=server", f"tracking.uri={url}", "method=laplace", "model=gaussian", "progress=false"]


@pytest.mark.slow
def test_a_request_without_credentials_is_refused_and_creates_nothing(auth_server):
    url, admin, _, _ = auth_server
    for path, payload in (("/api/2.0/mlflow/experiments/create", {"name": "intruder"}),
                          ("/api/2.0/mlflow/runs/create", {"experiment_id": "0"})):
        status, _ = request(url, path, None, payload=payload)
        assert status == 401
        status, _ = request(url, path, ("admin", "not-the-password"), payload=payload)
        assert status == 401
    assert "intruder" not in experiments(url, admin) and runs(url, admin) == []


@pytest.mark.slow
def test_users_added_by_bayesx_log_and_read_as_granted(auth_server, tmp_path, monkeypatch):
    url, admin, _, _ = auth_server
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", ADMIN_PASSWORD)
    monkeypatch.setenv("BAYESX_USER_PASSWORD", ALICE_PASSWORD)
    code, out, err = call(["server", "user", "add", "alice", "--uri", url, "--permission", "edit"])
    assert code == 0, err
    assert f"created user 'alice' on {url}: edit on every experiment" in out
    monkeypatch.delenv("BAYESX_USER_PASSWORD")
    bob_file = secret_file(tmp_path, "bob.txt", BOB_PASSWORD)
    code, out, err = call(["server", "user", "add", "bob", "--uri", url, "--password-file", str(bob_file)])
    assert code == 0 and "created user 'bob'" in out and "read on every experiment (reads: sees every" in out, err
    assert "records nothing: it creates no experiment and no run" in out

    as_user(monkeypatch, "alice", ALICE_PASSWORD)  # an authenticated run is recorded
    code, out, err = call(run_argv(url))
    assert code == 0, err
    recorded = runs(url, admin)
    assert [r["info"]["status"] for r in recorded] == ["FINISHED"]

    as_user(monkeypatch, "alice", "wrong-password-0")  # a wrong password: one line, before anything runs
    started = time.monotonic()
    code, out, err = call(run_argv(url))
    assert code == 2 and "refused user 'alice' (HTTP 401): wrong password or no such user" in error_line(err)
    assert "log_evidence" not in out and time.monotonic() - started < 30

    as_user(monkeypatch, None)  # no credentials at all
    code, _, err = call(run_argv(url))
    assert code == 2 and "requires a login: set $MLFLOW_TRACKING_USERNAME" in error_line(err)

    as_user(monkeypatch, "bob", BOB_PASSWORD)  # a read-only user reads, and cannot write
    code, out, err = call(["compare", "--uri", url])
    assert code == 0 and recorded[0]["info"]["run_id"][:8] in out, err
    code, out, err = call(run_argv(url))
    line = error_line(err)
    assert code == 2 and "lets user 'bob' only read experiment 'bayesx' (HTTP 403)" in line
    assert "bayesx server user add bob --permission edit --experiment bayesx" in line
    experiment_id = experiments(url, admin)["bayesx"]
    status, _ = request(url, "/api/2.0/mlflow/runs/create", ("bob", BOB_PASSWORD),
                        payload={"experiment_id": experiment_id})
    assert status == 403
    assert len(runs(url, admin)) == 1  # neither the wrong password nor bob created a run

    code, out, err = call(["server", "user", "add", "bob", "--uri", url, "--permission", "edit",
                           "--experiment", "bayesx"])  # the admin grants more: bob now logs there
    assert code == 0 and f"existing user 'bob' on {url}: edit on experiment 'bayesx'" in out, err
    status, body = request(url, "/api/2.0/mlflow/runs/create", ("bob", BOB_PASSWORD),
                           payload={"experiment_id": experiment_id})
    assert status == 200, body

    with pytest.raises(BayesxError, match="the admin password given is not the one stored for 'admin'"):
        check_admin(url, "admin", "not-the-admin-password")  # what a restart with another password hears
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", "not-the-admin-password")
    code, _, err = call(["server", "user", "add", "carol", "--uri", url])
    assert code == 2 and "refused the admin 'admin' (HTTP 401)" in error_line(err)


@pytest.mark.slow
def test_other_local_users_cannot_open_the_databases(auth_server):
    """The cluster under the server (databases mlflow and mlflow_auth) wants role bayesx's password: user nobody is
    refused without one and with a wrong one, over TCP and over the socket; root with the password file gets in
    (the control: same port, same databases). The password is in no command line, log or configuration."""
    reason = why_not_other_user()
    if reason:
        pytest.skip(reason)
    _, _, folder, db_port = auth_server
    server_dir = folder / "srv"
    password_file = server_dir / "pgpass"
    assert oct(password_file.stat().st_mode & 0o777) == "0o600"
    assert oct((server_dir / "pgdata").stat().st_mode & 0o777) == "0o700"
    password = password_file.read_text().splitlines()[0].split(":")[-1]
    assert len(password) >= 32
    for database in ("mlflow", "mlflow_auth"):
        allowed = psql(db_port, database, env={**os.environ, "PGPASSFILE": str(password_file)})
        assert allowed.returncode == 0 and allowed.stdout.strip() == "1", allowed.stderr
        without = psql(db_port, database, as_user="nobody")
        assert without.returncode != 0 and "no password supplied" in without.stderr, without
        wrong = psql(db_port, database, as_user="nobody", env={"PGPASSWORD": "guessed-password-0123",
                                                                 "PATH": os.environ["PATH"]})
        assert wrong.returncode != 0 and 'password authentication failed for user "bayesx"' in wrong.stderr, wrong
        socket = psql(db_port, database, host=str(server_dir / "pgdata"), as_user="nobody")
        assert socket.returncode != 0 and ("Permission denied" in socket.stderr
                                           or "no password supplied" in socket.stderr), socket
        unreadable = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(password_file)], capture_output=True,
                                    text=True, cwd="/")
        assert unreadable.returncode != 0 and password not in unreadable.stdout
    command_lines = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert password not in command_lines
    for where in (folder / "server.out", server_dir / "postgres.log", server_dir / "basic_auth.ini"):
        assert password not in where.read_text(), where


@pytest.mark.slow
def test_a_read_user_creates_no_experiment_and_no_run(auth_server, tmp_path, monkeypatch):
    """MLflow alone lets any user create an experiment and MANAGE it; on bayesx's server a READ user (the default
    grant) is refused experiments/create and runs/create (403) and `bayesx run` ends in one line with nothing
    recorded, while an EDIT user and the admin create both (the control for the same requests)."""
    url, admin, _, _ = auth_server
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_AUTH_ADMIN_PASSWORD", ADMIN_PASSWORD)
    for name, password, permission in (("carol", CAROL_PASSWORD, "read"), ("dave", DAVE_PASSWORD, "edit")):
        monkeypatch.setenv("BAYESX_USER_PASSWORD", password)
        code, out, err = call(["server", "user", "add", name, "--uri", url, "--permission", permission])
        assert code == 0 and f"user '{name}' on {url}: {permission} on every experiment" in out, err
    monkeypatch.delenv("BAYESX_USER_PASSWORD")
    carol, dave = ("carol", CAROL_PASSWORD), ("dave", DAVE_PASSWORD)

    status, body = request(url, "/api/2.0/mlflow/experiments/create", admin, payload={"name": "by-admin"})
    assert status == 200, body
    by_admin = body["experiment_id"]
    for api in ("/api/2.0", "/ajax-api/2.0"):  # the REST API and the UI's
        status, body = request(url, f"{api}/mlflow/experiments/create", carol, payload={"name": "by-carol"})
        assert status == 403 and "user 'carol' may only read here" in body.get("message", ""), (api, status, body)
    status, body = request(url, "/api/2.0/mlflow/registered-models/create", carol, payload={"name": "carols-model"})
    assert status == 403, body
    status, body = request(url, "/api/2.0/mlflow/runs/create", carol, payload={"experiment_id": by_admin})
    assert status == 403, body
    mcp = {"name": "carols-server", "description": "x"}  # a route FastAPI serves itself; dave is the control
    status, body = request(url, "/api/3.0/mlflow/mcp-servers", carol, payload=mcp)
    assert status == 403 and "user 'carol' may only read here" in body.get("message", ""), (status, body)
    status, body = request(url, "/api/3.0/mlflow/mcp-servers", dave, payload={**mcp, "name": "daves-server"})
    assert status != 403, body
    status, body = request(url, "/api/2.0/mlflow/experiments/create", dave, payload={"name": "by-dave"})
    assert status == 200, body
    by_dave = body["experiment_id"]
    for who, experiment_id in ((dave, by_admin), (dave, by_dave), (admin, by_dave)):
        status, body = request(url, "/api/2.0/mlflow/runs/create", who, payload={"experiment_id": experiment_id})
        assert status == 200, (who[0], body)
    status, body = request(url, "/api/2.0/mlflow/runs/create", carol, payload={"experiment_id": by_dave})
    assert status == 403, body  # another's experiment: MLflow's own rule, unchanged
    status, body = request(url, "/api/2.0/mlflow/experiments/search", carol, query={"max_results": 1000})
    assert status == 200 and {"by-admin", "by-dave"} <= {e["name"] for e in body["experiments"]}, body  # carol reads
    assert "by-carol" not in experiments(url, admin)
    recorded = len(runs(url, admin))

    as_user(monkeypatch, "carol", CAROL_PASSWORD)  # through bayesx run: a new experiment, then an existing one
    lines = []
    for experiment in ("carols-own", "by-admin"):
        code, out, err = call([*run_argv(url), f"experiment_name={experiment}"])
        lines.append(error_line(err))  # exactly one line, no traceback
        assert code == 2 and "(HTTP 403" in lines[-1] and "log_evidence" not in out, err
        assert "bayesx server user add carol --permission edit" in lines[-1]
    assert "does not let user 'carol' create experiment 'carols-own' (HTTP 403: a read-only user)" in lines[0]
    assert "lets user 'carol' only read experiment 'by-admin' (HTTP 403)" in lines[1]
    assert "carols-own" not in experiments(url, admin) and len(runs(url, admin)) == recorded


@pytest.mark.slow
def test_insecure_server_beyond_localhost_is_announced_with_a_warning(tmp_path):
    """--insecure on 0.0.0.0 starts (here on a SQLite database, to be quick) and its summary warns."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    port = free_port()
    proc, summary = start_server(tmp_path, ["--dir", str(tmp_path / "srv"), "--host", "0.0.0.0", "--port", str(port),
                                            "--insecure", "--backend-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"], env)
    try:
        assert f"WARNING: --insecure: http://0.0.0.0:{port} has no authentication and listens beyond this machine" \
            in summary
    finally:
        stop_server(proc)
