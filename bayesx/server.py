"""``bayesx server``: an MLflow tracking server on a PostgreSQL database, for sweeps whose jobs run in
many processes or on many machines (a SQLite file on a shared disk is not safe there).

Without ``--backend-uri`` the command owns a PostgreSQL cluster in ``<dir>/pgdata`` (``initdb`` on
first use, then ``pg_ctl start``; trust authentication, listening on 127.0.0.1 only, its socket in
the data directory) with a database ``mlflow``; artifacts go to ``<dir>/artifacts`` and are served
by the tracking server (``--artifacts-destination``), so jobs need only its URL. PostgreSQL refuses
to run as root: as root, the cluster is run as the ``postgres`` user. Ctrl-C (or SIGTERM) stops the
tracking server and the cluster; the data stay for the next start.

With ``--backend-uri postgresql://...`` (or any SQLAlchemy URI MLflow accepts) the database is the
user's, and only the tracking server is started.

With ``--auth`` the server is MLflow's basic-auth app and its users live in a second database of the
same cluster, ``mlflow_auth`` (with ``--backend-uri``: the file ``<dir>/basic_auth.db``, or
``--auth-db-uri``); see :mod:`bayesx.server_auth`. Without it the server listens on 127.0.0.1 only,
unless ``--insecure`` says otherwise.
"""

from __future__ import annotations

import errno
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bayesx.errors import BayesxError

DB_USER, DB_NAME = "bayesx", "mlflow"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((host, port)) == 0


def check_bindable(host: str, port: int) -> None:
    """Refuse, in one line, a ``--host``/``--port`` that a server could not listen on: a name that does
    not resolve, an address that is not this machine's (EADDRNOTAVAIL), a port another program holds,
    or a privileged port. It binds and closes a socket, as the server would (SO_REUSEADDR, like uvicorn)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror:
        raise BayesxError(f"--host {host}: no such host name; give an address of this machine, 127.0.0.1 (this "
                          f"machine only) or 0.0.0.0 (all its addresses)") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise BayesxError(f"--host {host} is not an address of this machine; use 127.0.0.1 (this machine "
                                  f"only) or 0.0.0.0 (all its addresses)") from None
            if exc.errno == errno.EADDRINUSE:
                raise BayesxError(f"port {port} on {host} is already in use; pass --port to pick another") from None
            if exc.errno == errno.EACCES:
                raise BayesxError(f"port {port} needs administrator rights on this machine; pass --port "
                                  f"with a number above 1023") from None
            raise BayesxError(f"cannot listen on {host}:{port} ({exc.strerror}); pass another --host or --port") from None


def postgres_bin(name: str) -> str:
    """A PostgreSQL program: on PATH, else in Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    if not found:
        raise BayesxError(f"PostgreSQL's {name} was not found; install PostgreSQL (apt-get install postgresql) "
                          f"or give a database with --backend-uri postgresql://USER@HOST/DB")
    return found


def cluster_user() -> str | None:
    """The user that runs PostgreSQL: ourselves, or ``postgres`` when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise BayesxError("PostgreSQL cannot run as root and this machine has no 'postgres' user; run bayesx "
                          "server as an ordinary user, or give a database with --backend-uri") from None
    return "postgres"


@dataclass
class Cluster:
    """A PostgreSQL cluster in ``data`` that this command starts and stops."""

    data: Path
    port: int
    user: str | None

    @property
    def uri(self) -> str:
        return self.database_uri(DB_NAME)

    def database_uri(self, name: str) -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{name}"

    def _run(self, args: list[str], what: str) -> None:
        proc = subprocess.run(args, capture_output=True, text=True, user=self.user, timeout=300, check=False)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise BayesxError(f"{what} failed: {detail[-1] if detail else f'exit status {proc.returncode}'}; "
                              f"see {self.data.parent / 'postgres.log'}")

    def start(self) -> None:
        self.data.parent.mkdir(parents=True, exist_ok=True)
        if self.user:  # the cluster's user must own its folder
            shutil.chown(self.data.parent, self.user)
        if not (self.data / "PG_VERSION").exists():
            self._run([postgres_bin("initdb"), "-D", str(self.data), "-U", DB_USER, "--auth=trust", "-E", "UTF8"],
                      "initdb")
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._run([postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                   str(self.data.parent / "postgres.log"), "-w", "-t", "120", "start"], "pg_ctl start")
        self.ensure_database(DB_NAME)

    def ensure_database(self, name: str) -> str:
        """Create database ``name`` in the running cluster unless it exists; its URI."""
        probe = subprocess.run([postgres_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER,
                                "-d", "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
                               capture_output=True, text=True, timeout=60, check=False)
        if probe.stdout.strip() != "1":
            self._run([postgres_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, name],
                      "createdb")
        return self.database_uri(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run([postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                           capture_output=True, user=self.user, timeout=120, check=False)


def prepare_store(backend_uri: str) -> None:
    """Create MLflow's tables once, here, before the server's workers open the database."""
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri=backend_uri).search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - the driver's and MLflow's errors, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BayesxError(f"cannot open the tracking database {backend_uri}: {first}") from None


def server_command(backend_uri: str, artifacts: Path, host: str, port: int, auth: bool = False) -> list[str]:
    """``mlflow server`` on our database; with ``auth``, MLflow's basic-auth app (configured through the
    environment, see :mod:`bayesx.server_auth`: no secret on this command line)."""
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
            "--artifacts-destination", artifacts.resolve().as_uri(), "--host", host, "--port", str(port)] + (
        ["--app-name", "basic-auth"] if auth else [])


def wait_until_serving(proc: subprocess.Popen, host: str, port: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BayesxError(f"the MLflow server exited with status {proc.returncode} before serving; "
                              "see its messages above")
        if port_open(host, port):
            return
        time.sleep(0.5)
    raise BayesxError(f"the MLflow server did not answer on {host}:{port} within {timeout:.0f} s")
