"""A client's credentials for an authenticated MLflow tracking server, and one call of its REST API: what the store
needs before a run starts (:func:`check_credentials`) and ``bayesx server`` uses to manage users
(bayesx.serve.auth). MLflow's own clients send ``$MLFLOW_TRACKING_USERNAME`` / ``$MLFLOW_TRACKING_PASSWORD`` as
HTTP basic authentication; bayesx reads the same variables."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request

from bayesx.errors import BayesxError

USERNAME_ENV, PASSWORD_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def request(url: str, path: str, credentials: tuple[str, str] | None, payload: dict | None = None,
            query: dict | None = None, timeout: float = 30.0) -> tuple[int, dict]:
    """One call of the server's REST API: (HTTP status, decoded JSON body or {})."""
    address = url.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = json.dumps(payload).encode() if payload is not None else None
    call = urllib.request.Request(address, data=data, method="POST" if data is not None else "GET")
    call.add_header("Content-Type", "application/json")
    if credentials is not None:
        token = base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        call.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(call, timeout=timeout) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BayesxError(f"cannot reach the MLflow tracking server at {url} ({reason}); is it running?") from None
    try:
        return status, json.loads(body) if body else {}
    except ValueError:
        return status, {"message": body.decode(errors="replace").strip()}


def client_credentials() -> tuple[str, str] | None:
    """The credentials MLflow's clients send: ``$MLFLOW_TRACKING_USERNAME`` / ``$MLFLOW_TRACKING_PASSWORD``."""
    user, password = os.environ.get(USERNAME_ENV), os.environ.get(PASSWORD_ENV)
    return (user, password) if user and password else None


def check_credentials(uri: str) -> None:
    """Fail in one line, before anything runs, when the server refuses our credentials (HTTP 401).

    One cheap authenticated call (search one experiment). A server without authentication answers
    200 whatever we send, so this costs nothing there. A bearer token (``$MLFLOW_TRACKING_TOKEN``) or a
    failed probe (a proxy, TLS that MLflow is told to trust) leaves the judgement to MLflow's client."""
    if os.environ.get("MLFLOW_TRACKING_TOKEN") and client_credentials() is None:
        return
    try:
        status, _ = request(uri, "/api/2.0/mlflow/experiments/search", client_credentials(),
                            query={"max_results": 1}, timeout=30.0)
    except BayesxError:
        return
    if status != 401:
        return
    credentials = client_credentials()
    if credentials is None:
        raise BayesxError(f"the MLflow tracking server at {uri} requires a login: set ${USERNAME_ENV} and "
                          f"${PASSWORD_ENV} (a user from `bayesx server user add NAME`)")
    raise BayesxError(f"the MLflow tracking server at {uri} refused user '{credentials[0]}' (HTTP 401): wrong "
                      f"password or no such user; check ${USERNAME_ENV} and ${PASSWORD_ENV}")
