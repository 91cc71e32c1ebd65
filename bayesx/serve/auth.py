"""Authentication for ``bayesx server``: MLflow's basic-auth app (``mlflow server --app-name basic-auth``).

Who may do what is kept by MLflow in its user database: users with salted password hashes, and
per-experiment grants READ < EDIT < MANAGE (``experiment`` ``*`` is a grant on every experiment).
An authenticated user without a grant gets the server's default permission, READ here: the team
sees every run, and writes only where it has been granted EDIT. Creating an experiment (which
MLflow then lets its creator MANAGE) needs EDIT on every experiment, or admin: bayesx's app
(:mod:`bayesx.serve.app`) adds that rule to MLflow's, so a READ user records nothing. A request
without valid credentials is answered 401 and changes nothing.

Where the secrets live:

* the admin password comes from ``MLFLOW_AUTH_ADMIN_PASSWORD`` or from a file readable by its owner
  only (``--admin-password-file``), never from the command line (``ps`` shows command lines to
  every user). MLflow uses it when it creates the admin user, on the first start; bayesx also
  checks at every start that it still matches, so that ``bayesx server user add`` will work.
* the auth configuration (``<dir>/basic_auth.ini``, no secret in it) names the user database;
* the Flask secret key for the sign-up form's CSRF token is generated once into
  ``<dir>/flask_secret_key`` (mode 600), the same for every worker and every restart.

The child server gets the password and the key through its environment (readable only by the
same user), not its arguments.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bayesx.errors import BayesxError
from bayesx.store.credentials import request

ADMIN_PASSWORD_ENV, ADMIN_USERNAME_ENV = "MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_AUTH_ADMIN_USERNAME"
USER_PASSWORD_ENV = "BAYESX_USER_PASSWORD"
DEFAULT_ADMIN = "admin"
MIN_PASSWORD_LENGTH = 12  # MLflow's own rule for basic-auth passwords
PERMISSIONS = ("read", "edit", "manage")
SERVER_DEFAULT_PERMISSION = "READ"
AUTH_DB_NAME = "mlflow_auth"
AUTH_CACHE_TTL_S = 60


# --- who may listen where ---------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def check_exposure(host: str, auth: bool, insecure: bool) -> None:
    """Refuse a server that others can reach and that lets anyone in, unless ``--insecure`` says so."""
    if auth and insecure:
        raise BayesxError("--insecure is for a server without --auth; drop one of them")
    if not auth and not insecure and not is_loopback(host):
        raise BayesxError(f"refusing to listen on {host} without authentication: anyone who reaches it could write "
                          f"and delete runs; pass --auth (admin password in ${ADMIN_PASSWORD_ENV} or "
                          "--admin-password-file), or --insecure if the network is yours alone")


# --- secrets ----------------------------------------------------------------------------------------
def read_secret_file(path: str | Path, what: str) -> str:
    """The first line of a file that only its owner may read (mode 600 or stricter)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BayesxError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BayesxError(f"the {what} file {path} is readable by others (mode {stat.S_IMODE(mode):03o}); "
                          f"run: chmod 600 {path}")
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise BayesxError(f"the {what} file {path} is empty; write the password on its first line")
    return lines[0]


def check_password(password: str, who: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise BayesxError(f"the password of {who} has {len(password)} characters; MLflow needs at least "
                          f"{MIN_PASSWORD_LENGTH}")
    return password


def require_auth_app() -> None:
    """One line, before anything starts, where the app ``mlflow server --app-name bayesx-auth`` needs is missing:
    Flask-WTF (MLflow's basic-auth app), or bayesx's own entry point (an install older than the entry point)."""
    import importlib.util
    from importlib.metadata import entry_points

    from bayesx.serve.app import APP_NAME

    if importlib.util.find_spec("flask_wtf") is None:
        raise BayesxError("MLflow's basic-auth app needs Flask-WTF, which is not installed: "
                          "pip install 'bayesx[server]' (or pip install Flask-WTF)")
    points = [point for point in entry_points(group="mlflow.app") if point.name == APP_NAME]
    if not any(importlib.util.find_spec(point.module) is not None for point in points):
        raise BayesxError(f"MLflow does not know bayesx's app '{APP_NAME}' (an install of bayesx older than it, or "
                          "made before its modules moved): install bayesx again, e.g. pip install -e . in its folder "
                          "(make install does it)")


def admin_password(file: str | None) -> str:
    """The admin password: from ``file`` (mode 600) if given, else ``$MLFLOW_AUTH_ADMIN_PASSWORD``."""
    if file:
        return check_password(read_secret_file(file, "admin password"), "the admin")
    if os.environ.get(ADMIN_PASSWORD_ENV):
        return check_password(os.environ[ADMIN_PASSWORD_ENV], "the admin")
    raise BayesxError(f"the admin password is missing: set ${ADMIN_PASSWORD_ENV} or pass --admin-password-file FILE "
                      "(a file only you can read); it is never taken from the command line")


def admin_username() -> str:
    return os.environ.get(ADMIN_USERNAME_ENV) or DEFAULT_ADMIN


def flask_secret_key(folder: Path) -> str:
    """A random key kept in ``folder/flask_secret_key`` (mode 600), made on first use."""
    path = folder / "flask_secret_key"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
    return read_secret_file(path, "Flask secret key")


def write_auth_config(folder: Path, database_uri: str) -> Path:
    """MLflow's basic-auth configuration for this server: no password of bayesx's, but the user database's URI,
    which may carry one (``--auth-db-uri``), so the file is the owner's alone (mode 600)."""
    path = folder / "basic_auth.ini"
    path.unlink(missing_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    path.write_text("# written by bayesx server --auth; the admin password is not kept here\n"
                    "[mlflow]\n"
                    f"default_permission = {SERVER_DEFAULT_PERMISSION}\n"
                    f"database_uri = {database_uri}\n"
                    f"admin_username = {admin_username()}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                    "# a checked password is remembered this long by each worker: without it every request\n"
                    "# (a run makes hundreds) hashes the password again; a changed password or a deleted user\n"
                    "# may thus still be let in by another worker for up to this long\n"
                    f"auth_cache_ttl_seconds = {AUTH_CACHE_TTL_S}\n",
                    encoding="utf-8")
    return path


def without_password(uri: str) -> str:
    """A database URI fit to print: its password, if any, replaced by ***."""

    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def server_environment(folder: Path, database_uri: str, password: str) -> dict[str, str]:
    """The environment variables that turn ``mlflow server --app-name basic-auth`` on for this server."""
    return {"MLFLOW_AUTH_CONFIG_PATH": str(write_auth_config(folder, database_uri)),
            ADMIN_PASSWORD_ENV: password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY")
            or flask_secret_key(folder)}


def check_admin(url: str, username: str, password: str) -> None:
    """The admin password given must be the stored one: MLflow uses it only when it creates the admin."""
    status, _ = request(url, "/api/2.0/mlflow/users/get", (username, password), query={"username": username})
    if status == 401:
        raise BayesxError(f"the admin password given is not the one stored for '{username}' in the user database "
                          "(MLflow sets it on the first start only); give that one, or change it with MLflow's "
                          "update-password API")
    if status != 200:
        raise BayesxError(f"the server at {url} did not answer as an authenticated MLflow server "
                          f"(HTTP {status} for the admin user)")


# --- bayesx server user add --------------------------------------------------------------------------
USERS_API, PERMISSIONS_API = "/api/2.0/mlflow/users", "/api/3.0/mlflow/users/permissions"


def _message(body: dict) -> str:
    return str(body.get("message") or body.get("error_code") or body).strip().splitlines()[0][:300]


def new_user_password(name: str, file: str | None, prompt=None) -> str:
    """The new user's password: from ``file`` (mode 600), ``$BAYESX_USER_PASSWORD``, or typed twice."""
    import getpass
    import sys

    if file:
        return check_password(read_secret_file(file, "user password"), f"user '{name}'")
    if os.environ.get(USER_PASSWORD_ENV):
        return check_password(os.environ[USER_PASSWORD_ENV], f"user '{name}'")
    if prompt is None and not sys.stdin.isatty():
        raise BayesxError(f"no password for the new user '{name}': set ${USER_PASSWORD_ENV}, pass --password-file FILE "
                          "(a file only you can read), or run this in a terminal to type it")
    prompt = prompt or getpass.getpass
    password = check_password(prompt(f"password for {name}: "), f"user '{name}'")
    if prompt(f"password for {name} again: ") != password:
        raise BayesxError(f"the two passwords typed for '{name}' differ; run the command again")
    return password


def _admin_session(url: str, admin: tuple[str, str]) -> None:
    status, body = request(url, f"{USERS_API}/get", admin, query={"username": admin[0]})
    if status == 404 and "error_code" not in body:
        raise BayesxError(f"the server at {url} has no authentication; start it with `bayesx server --auth`")
    if status == 401:
        raise BayesxError(f"the server at {url} refused the admin '{admin[0]}' (HTTP 401): give the admin password "
                          f"stored there (${ADMIN_PASSWORD_ENV} or --admin-password-file)")
    if status != 200 or not body.get("user", {}).get("is_admin"):
        raise BayesxError(f"'{admin[0]}' is not an admin of the server at {url} (HTTP {status}); "
                          f"set ${ADMIN_USERNAME_ENV} to the admin's name")


def _experiment_id(url: str, admin: tuple[str, str], experiment: str | None) -> str:
    """The id of the experiment named ``experiment``; ``*`` (every experiment) for None."""
    if experiment is None:
        return "*"
    status, body = request(url, "/api/2.0/mlflow/experiments/get-by-name", admin,
                           query={"experiment_name": experiment})
    if status != 200:
        raise BayesxError(f"no experiment '{experiment}' on {url} ({_message(body)}); create it first (a run of "
                          "experiment_name=... creates it) or leave out --experiment to grant on every experiment")
    return body["experiment"]["experiment_id"]


def add_user(url: str, name: str, permission: str, experiment: str | None, admin: tuple[str, str],
             password=lambda: None) -> str:
    """Create user ``name`` (unless it exists; ``password()`` gives its password) and grant it ``permission``
    on ``experiment`` (every experiment when None), through MLflow's auth REST API as the admin.
    Returns what was done, in one line."""
    if permission not in PERMISSIONS:
        raise BayesxError(f"--permission must be one of {', '.join(PERMISSIONS)}, got '{permission}'")
    _admin_session(url, admin)
    resource = _experiment_id(url, admin, experiment)
    status, body = request(url, f"{USERS_API}/get", admin, query={"username": name})
    created = status != 200
    if created:
        status, body = request(url, f"{USERS_API}/create", admin, payload={"username": name, "password": password()})
        if status != 200:
            raise BayesxError(f"cannot create user '{name}' on {url}: {_message(body)}")
    grant = {"username": name, "resource_type": "experiment", "resource_id": resource,
             "permission": permission.upper()}
    status, body = request(url, f"{PERMISSIONS_API}/grant", admin, payload=grant)
    if status != 200 and body.get("error_code") == "RESOURCE_ALREADY_EXISTS":  # a new level replaces the old
        request(url, f"{PERMISSIONS_API}/revoke", admin, payload={k: grant[k] for k in grant if k != "permission"})
        status, body = request(url, f"{PERMISSIONS_API}/grant", admin, payload=grant)
    if status != 200:
        raise BayesxError(f"cannot grant {permission} to '{name}' on {url}: {_message(body)}")
    where = f"experiment '{experiment}'" if experiment else "every experiment"
    return (f"{'created' if created else 'existing'} user '{name}' on {url}: {permission} on {where} "
            f"({permission_meaning(permission, experiment)})")


def permission_meaning(permission: str, experiment: str | None) -> str:
    """What a grant lets its user do on a ``bayesx server --auth`` (MLflow's rules plus :mod:`bayesx.serve.app`'s)."""
    where = f"experiment '{experiment}'" if experiment else "any experiment"
    if permission == "read":
        return ("reads: sees every experiment, run, metric and artifact (bayesx compare, report, ui) and records "
                "nothing: it creates no experiment and no run")
    also = "creates experiments, " if experiment is None else ""
    if permission == "edit":
        return f"reads everything, {also}records and changes runs in {where}"
    them = "them" if experiment is None else "it"
    return f"reads everything, {also}records, changes and deletes runs in {where}, deletes {them} and grants others on {them}"
