"""`bayesx server` for the tests: whether one can run here, and one running in a temporary folder."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bayesx.serve.server import free_port


def why_not() -> str | None:
    """Why `bayesx server` (its own PostgreSQL cluster) cannot run here, or None."""
    if not (shutil.which("initdb") or glob.glob("/usr/lib/postgresql/*/bin/initdb")):
        return "PostgreSQL's initdb is not installed"
    if importlib.util.find_spec("psycopg") is None:
        return "the PostgreSQL driver psycopg is not installed (pip install 'bayesx[server]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run PostgreSQL"
    return None


@contextlib.contextmanager
def running_server(folder: Path, timeout: float = 180.0) -> Iterator[str]:
    """`bayesx server --dir folder/srv` on a free port of 127.0.0.1, its output in folder/server.out;
    yields its URL once it serves, and stops it (SIGTERM to its process group) at the end."""
    folder.chmod(0o755)  # the postgres user must reach its data directory
    port = free_port()
    out = folder / "server.out"
    with open(out, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "bayesx", "server", "--dir", str(folder / "srv"),
                                   "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while "MLflow tracking server at" not in out.read_text():
                assert server.poll() is None, out.read_text()[-3000:]
                assert time.monotonic() < deadline, f"the server did not start within {timeout:.0f} s"
                time.sleep(0.5)
            yield f"http://127.0.0.1:{port}"
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=120)


def psql(port: int, database: str, host: str = "127.0.0.1", as_user: str | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``psql -w ... -c 'select 1'`` (never prompting for a password) against database ``database``, as OS user
    ``as_user`` (through runuser, as root) or as ourselves, in ``env`` (default: ours without any libpq
    password: no $PGPASSFILE, no $PGPASSWORD)."""
    from bayesx.serve.server import postgres_bin

    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PGPASSFILE", "PGPASSWORD")}
    command = [postgres_bin("psql"), "-w", "-h", host, "-p", str(port), "-U", "bayesx", "-d", database, "-tAc",
               "select 1"]
    if as_user:
        command = ["runuser", "-u", as_user, "--", *command]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd="/", timeout=60, check=False)


def why_not_other_user() -> str | None:
    """Why these tests cannot connect as another local user (nobody, through runuser), or None."""
    if os.geteuid() != 0:
        return "only root can run a command as another user (runuser)"
    if shutil.which("runuser") is None:
        return "runuser is not installed"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "this machine has no user 'nobody'"
    return None
