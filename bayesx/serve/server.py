"""``bayesx server``: an MLflow tracking server on a PostgreSQL database, for sweeps whose jobs run in
many processes or on many machines (a SQLite file on a shared disk is not safe there).

Without ``--backend-uri`` the command owns a PostgreSQL cluster in ``<dir>/pgdata`` (``initdb`` on
first use, then ``pg_ctl start``; listening on 127.0.0.1 only, its socket in the data directory, mode
700) with a database ``mlflow``. Every connection to it needs the password of its role ``bayesx``
(scram-sha-256, for TCP and the socket alike): a random one generated on first use and kept in
``<dir>/pgpass`` (mode 600, libpq's password-file format), which this process and the MLflow server
read through ``$PGPASSFILE``. The password is on no command line, in no URI and in no log, so another
local user can neither read the runs nor the user database's password hashes, nor make itself admin.
A cluster made by an older bayesx with trust authentication is converted on its next start (see
:meth:`Cluster.secure`). Artifacts go to ``<dir>/artifacts`` and are served by the tracking server
(``--artifacts-destination``), so jobs need only its URL. PostgreSQL refuses
to run as root: as root, the cluster is run as the ``postgres`` user. Ctrl-C (or SIGTERM) stops the
tracking server and the cluster; the data stay for the next start.

With ``--backend-uri postgresql://...`` (or any SQLAlchemy URI MLflow accepts) the database is the
user's, and only the tracking server is started.

With ``--auth`` the server is MLflow's basic-auth app (wrapped by :mod:`bayesx.serve.app` so that a
READ user only reads) and its users live in a second database of the
same cluster, ``mlflow_auth`` (with ``--backend-uri``: the file ``<dir>/basic_auth.db``, or
``--auth-db-uri``); see :mod:`bayesx.serve.auth`. Without it the server listens on 127.0.0.1 only,
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


PASSWORD_FILE = "pgpass"  # in --dir: the cluster's password, in libpq's password-file format (mode 600)
AUTH_METHOD = "scram-sha-256"
HBA = ("# written by bayesx server: every connection, over TCP or the socket, needs the password of role\n"
       "# bayesx (kept in the pgpass file beside pgdata, mode 600); bayesx rewrites any line using another method\n"
       f"local   all   all                  {AUTH_METHOD}\n"
       f"host    all   all   127.0.0.1/32   {AUTH_METHOD}\n"
       f"host    all   all   ::1/128        {AUTH_METHOD}\n")


def scram_verifier(password: str, iterations: int = 4096) -> str:
    """PostgreSQL's stored form of a scram-sha-256 password (RFC 5802/7677, as ``ALTER ROLE ... PASSWORD``
    keeps it): what we send the server instead of the password, so that no statement, log line or
    error message of PostgreSQL can ever contain the password itself."""
    import base64
    import hashlib
    import hmac
    import secrets

    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(hashlib.sha256(client_key).digest())}:{b64(server_key)}"


def hba_methods(text: str) -> list[str]:
    """The authentication method of each active line of a pg_hba.conf: ``local DATABASE USER METHOD``,
    ``host DATABASE USER ADDRESS METHOD`` or ``host DATABASE USER IP-ADDRESS IP-MASK METHOD``."""
    import ipaddress

    methods = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0].startswith("include"):  # another file's lines, unread: counted as not converted
            methods.append(words[0])
            continue
        rest = words[3:] if words[0] == "local" else words[4:]
        if words[0] != "local" and len(rest) >= 2:
            try:
                ipaddress.ip_address(rest[0])  # a mask after the address: the method comes next
                rest = rest[1:]
            except ValueError:
                pass
        methods.append(rest[0] if rest else "")
    return methods


@dataclass
class Cluster:
    """A PostgreSQL cluster in ``data`` that this command starts and stops; every connection to it needs the
    password kept in ``password_file`` (``<dir>/pgpass``)."""

    data: Path
    port: int
    user: str | None

    @property
    def uri(self) -> str:
        return self.database_uri(DB_NAME)

    @property
    def password_file(self) -> Path:
        return self.data.parent / PASSWORD_FILE

    def database_uri(self, name: str) -> str:
        """The URI of database ``name``: no password in it (libpq finds it through ``$PGPASSFILE``), so it can be
        printed, passed on a command line and written in MLflow's configuration."""
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{name}"

    def client_env(self) -> dict[str, str]:
        """Our environment with libpq pointed at the password file: for psql, createdb and the MLflow server."""
        return {**os.environ, "PGPASSFILE": str(self.password_file)}

    def _run(self, args: list[str], what: str, **options) -> subprocess.CompletedProcess:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False,
                              **{"user": self.user, **options})
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise BayesxError(f"{what} failed: {detail[-1] if detail else f'exit status {proc.returncode}'}; "
                              f"see {self.data.parent / 'postgres.log'}")
        return proc

    def password(self) -> tuple[str, bool]:
        """The cluster's password from ``password_file`` (mode 600, refused if others may read it), or a new random
        one written there now: (password, whether it is new)."""
        from bayesx.serve.auth import read_secret_file

        path = self.password_file
        if path.is_symlink():
            raise BayesxError(f"{path} is a symbolic link; bayesx keeps the database password in a plain file there "
                              f"(remove the link and start again to set a new password)")
        if path.exists():
            line = read_secret_file(path, "database password")
            fields = line.split(":")
            if len(fields) != 5 or not fields[4]:
                raise BayesxError(f"{path} is not a password file of bayesx server (HOST:PORT:DATABASE:USER:PASSWORD); "
                                  f"remove it and start again to set a new password")
            return fields[4], False
        import secrets

        password = secrets.token_urlsafe(32)  # letters, digits, - and _: nothing libpq's format must escape
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write("".join(f"{host}:*:*:{DB_USER}:{password}\n" for host in ("127.0.0.1", "localhost", "::1")))
        return password, True

    def secure(self, fresh: bool = False) -> str | None:
        """Make password authentication the only way in, before the cluster starts: unless the password file exists
        and every line of pg_hba.conf asks for scram-sha-256, set role bayesx's password (from the file, or a new
        one) in PostgreSQL's single-user mode (no connection is possible meanwhile, and only the scram verifier
        is sent) and rewrite pg_hba.conf. This converts a cluster made by an older bayesx, which let every local
        user in (trust), and sets a new password where the file was removed. Returns a note saying what was
        done to an existing (not ``fresh``) cluster, or None."""
        password, new = self.password()
        hba = self.data / "pg_hba.conf"
        methods = hba_methods(hba.read_text(encoding="utf-8")) if hba.exists() else []
        if not new and methods and all(method == AUTH_METHOD for method in methods):
            return None
        result = self._run([postgres_bin("postgres"), "--single", "-D", str(self.data), "postgres"],
                           "setting the database password (postgres --single)",
                           input=f"ALTER ROLE {DB_USER} PASSWORD '{scram_verifier(password)}';\n")
        errors = [line for line in result.stderr.splitlines() if "ERROR" in line or "FATAL" in line]
        if errors:
            raise BayesxError(f"setting the database password (postgres --single) failed: {errors[0].strip()}")
        hba.write_text(HBA, encoding="utf-8")  # in place: the file keeps its owner, the cluster's user
        if "trust" in methods:
            return (f"the database cluster in {self.data} let every local user in (trust authentication, made by an "
                    f"older bayesx); it now needs the password in {self.password_file}")
        return None if fresh else f"the database cluster in {self.data} has a new password, in {self.password_file}"

    def start(self) -> str | None:
        """initdb on first use (no way in until :meth:`secure` sets the password), secure (printing what it changed
        in an existing cluster), start, create database ``mlflow``. Points ``$PGPASSFILE`` of this process (and
        so of the MLflow server it starts) at the password file. Returns :meth:`secure`'s note."""
        self.data.parent.mkdir(parents=True, exist_ok=True)
        if self.user:  # the cluster's user must own its folder
            shutil.chown(self.data.parent, self.user)
        fresh = not (self.data / "PG_VERSION").exists()
        if fresh:
            self._run([postgres_bin("initdb"), "-D", str(self.data), "-U", DB_USER, "--auth=reject", "-E", "UTF8"],
                      "initdb")
        note = self.secure(fresh)
        if note:
            print(f"bayesx: {note}", file=sys.stderr, flush=True)
        self.data.chmod(0o700)  # its socket is in it: the folder is the cluster user's alone
        os.environ["PGPASSFILE"] = str(self.password_file)
        options = (f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c unix_socket_permissions=0700 "
                   f"-c password_encryption={AUTH_METHOD}")
        self._run([postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                   str(self.data.parent / "postgres.log"), "-w", "-t", "120", "start"], "pg_ctl start")
        self.ensure_database(DB_NAME)
        return note

    def ensure_database(self, name: str) -> str:
        """Create database ``name`` in the running cluster unless it exists; its URI."""
        probe = subprocess.run([postgres_bin("psql"), "-w", "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER,
                                "-d", "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
                               capture_output=True, text=True, timeout=60, check=False, env=self.client_env())
        if "password authentication failed" in probe.stderr:
            raise BayesxError(f"the database cluster in {self.data} refused the password in {self.password_file}; "
                              f"remove that file and start again to set a new one")
        if probe.stdout.strip() != "1":
            self._run([postgres_bin("createdb"), "-w", "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, name],
                      "createdb", user=None, env=self.client_env())
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
    """``mlflow server`` on our database; with ``auth``, MLflow's basic-auth app as bayesx wraps it
    (:mod:`bayesx.serve.app`, configured through the environment, see :mod:`bayesx.serve.auth`: no secret
    on this command line)."""
    from bayesx.serve.app import APP_NAME

    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
            "--artifacts-destination", artifacts.resolve().as_uri(), "--host", host, "--port", str(port)] + (
        ["--app-name", APP_NAME] if auth else [])


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
