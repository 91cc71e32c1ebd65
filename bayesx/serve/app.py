"""The MLflow app that ``bayesx server --auth`` runs (``mlflow server --app-name bayesx-auth``): MLflow's
basic-auth app, plus one rule that makes READ mean read.

Why: MLflow's basic-auth app lets every authenticated user create an experiment (and a registered
model, prompt, scorer, gateway secret, endpoint or model definition, MCP server) and then makes the
creator MANAGE what it created. A user granted only READ could thus make an experiment of its own
and record runs in it, although the README promises that a read user compares but does not run.

The rule: creating one of those resources needs EDIT or MANAGE on every experiment (the grant that
``bayesx server user add NAME --permission edit`` makes, on ``*``), or being an admin; anyone else is
answered 403 with a one-line reason. Everything else is MLflow's own checks, unchanged: a run is created,
logged to and deleted only where the user has EDIT (or MANAGE) on its experiment, which a READ user has
nowhere, and a grant on one experiment (``--experiment NAME``) confines that user's writing to it.

Which routes make their creator an owner is read from MLflow's own tables when the app is made: the
Flask routes whose after-request handler grants MANAGE (``set_can_manage_*``) and the FastAPI routes
with an after-create handler (MCP servers). Should MLflow's auth module no longer have what this needs,
making the app fails, so the server does not start rather than start open.

Registered as the ``mlflow.app`` entry point ``bayesx-auth`` in pyproject.toml, beside MLflow's
``basic-auth``; an install (``pip install -e .``) registers it.
"""

from __future__ import annotations

import json

APP_NAME = "bayesx-auth"
CREATE_NEEDS = "EDIT on every experiment"


def creation_routes() -> set[tuple[str, str]]:
    """The Flask routes ``(path, method)`` after which MLflow grants the creator MANAGE on what it created."""
    from mlflow.server import auth

    routes = {key for key, handler in auth.AFTER_REQUEST_HANDLERS.items()
              if getattr(handler, "__name__", "").startswith("set_can_manage_")}
    for needed in ("/api/2.0/mlflow/experiments/create", "/ajax-api/2.0/mlflow/experiments/create"):
        if (needed, "POST") not in routes:
            raise RuntimeError(f"bayesx-auth: this MLflow's basic-auth app has no creator grant on {needed}; "
                               "bayesx cannot tell who may create experiments, so the server does not start")
    return routes


def fastapi_creation_prefixes() -> tuple[str, ...]:
    """The FastAPI route prefixes where a POST makes its creator MANAGE the result (MCP servers)."""
    from mlflow.server import auth

    handlers = getattr(auth, "FASTAPI_AFTER_REQUEST_HANDLERS", {})
    return tuple(sorted({prefix for (prefix, method), handler in handlers.items()
                         if method == "POST" and "create" in getattr(handler, "__name__", "")}))


def may_create(username: str) -> bool:
    """Whether ``username`` may create experiments and other owned resources: an admin, or a user whose permission
    on every experiment (the ``*`` grant, else the server's default permission) allows updating. Asked through
    MLflow's own ``authorize``, so a DENY or a role grant counts as MLflow counts it."""
    from mlflow.server import auth
    from mlflow.server.auth.permissions import RESOURCE_TYPE_EXPERIMENT
    from mlflow.server.auth.requirements import Requirement

    user = auth.store.get_user(username)
    if user.is_admin:
        return True
    return auth.authorize(username, (RESOURCE_TYPE_EXPERIMENT, "*"),
                          [Requirement(RESOURCE_TYPE_EXPERIMENT, "*", "update")])


def refusal(username: str) -> dict[str, str]:
    """The 403 body (MLflow's error format, so its clients show the message)."""
    return {"error_code": "PERMISSION_DENIED",
            "message": f"user '{username}' may only read here: creating experiments (and other resources) needs "
                       f"{CREATE_NEEDS}; an admin grants it with  bayesx server user add {username} --permission edit"}


def create_app(app=None):
    """MLflow's basic-auth app (``mlflow.server.auth.create_app``) with the creation rule added: a Flask
    before-request hook, run after MLflow's (which has authenticated the user by then), and under uvicorn a
    FastAPI middleware for the MLflow routes that FastAPI serves itself."""
    from flask import Response, request

    from mlflow.server import app as flask_app
    from mlflow.server import auth

    flask_app = app if app is not None else flask_app
    routes = creation_routes()
    prefixes = fastapi_creation_prefixes()
    authenticate_fastapi = getattr(auth, "_authenticate_fastapi_request", None)
    if prefixes and authenticate_fastapi is None:
        raise RuntimeError("bayesx-auth: this MLflow serves creation routes through FastAPI but has no "
                           "_authenticate_fastapi_request; the server does not start")
    served = auth.create_app(flask_app)

    def refuse_creation_by_readers():
        if (request.path, request.method) not in routes:
            return None
        authorization = auth.authenticate_request()
        if isinstance(authorization, Response):
            return authorization
        if may_create(authorization.username):
            return None
        return Response(json.dumps(refusal(authorization.username)), status=403, mimetype="application/json")

    flask_app.before_request(refuse_creation_by_readers)

    if served is not flask_app and prefixes:  # uvicorn: a FastAPI app in front of the Flask one
        from starlette.responses import JSONResponse

        from mlflow.server.asgi_utils import get_routed_asgi_path

        @served.middleware("http")
        async def refuse_fastapi_creation_by_readers(scope_request, call_next):
            path = get_routed_asgi_path(scope_request)
            if scope_request.method == "POST" and path.startswith(prefixes):
                user = authenticate_fastapi(scope_request)
                if user is not None and not may_create(user.username):  # no user: MLflow's middleware says 401
                    return JSONResponse(refusal(user.username), status_code=403)
            return await call_next(scope_request)

    return served
