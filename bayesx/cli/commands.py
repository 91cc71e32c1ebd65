"""The ``bayesx`` command: run, ui, compare, server, runs, data.

``bayesx run`` hands its arguments to Hydra (overrides, ``-m`` for a multirun sweep,
``--cfg job`` to print the composed config, ``--help`` for Hydra's help) and takes one flag of its own,
``--json`` (bayesx.store.outputs: the runs as JSON on standard output); the other commands are plain
argparse. Every user error ends as ``bayesx: error: <one line>`` on standard error; the exit statuses
(0 done, 1 a run failed, 2 bad input, 130 interrupted) are bayesx.errors'.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from bayesx.errors import (
    EXIT_BAD_INPUT,
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    BayesxError,
    InterruptKept,
    RecordedFailure,
    RunInterrupted,
    fail,
)
from bayesx.store import outputs as run_output

COMMANDS = {
    "run": "run one job, or a sweep with -m (Hydra overrides: method=nuts model=logreg seed=0,1,2); --json for scripts",
    "ui": "start the MLflow UI on the configured store (localhost); once it answers, a link to the run table (--experiment)",
    "compare": "table of recorded runs with their key metrics (--experiment, --sort, --format json|csv|markdown)",
    "server": "start an MLflow tracking server on PostgreSQL (a cluster it owns in --dir, or --backend-uri)",
    "report": "markdown table (and plot) of one sweep's runs from the store, published numbers beside (--parent, --out)",
    "runs": "runs clean: mark RUNNING runs whose process is gone (or heartbeat stale) KILLED; a sweep with a failed job FAILED",
    "data": "list the data sets (data list) or download one (data fetch NAME)",
}


# --- bayesx run -----------------------------------------------------------------------------------
def _task(cfg) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from bayesx.cli import sweep
    from bayesx.run_settings import run_settings

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    parent = os.environ.get(sweep.PARENT_ENV) if multirun else None
    choices = dict(hydra_cfg.runtime.choices)
    if multirun and cfg.device.get("num_threads") is None:  # parallel jobs share the cores
        from omegaconf import open_dict

        from bayesx.cli.launchers import threads_per_job

        threads = threads_per_job(hydra_cfg.launcher)
        if threads:
            with open_dict(cfg):
                cfg.device.num_threads = threads
    objective = cfg.get("sweep", {}).get("objective")
    as_json = run_output.requested()
    opened: list = []  # (tracker, run id) once the store holds the run
    error = None
    try:
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():  # a job elsewhere
            run_settings(cfg)  # top-level, device and tracking options refused in one line before torch and MLflow load
            from bayesx.runner import apply_data_default, run_job

            apply_data_default(cfg, choices, list(hydra_cfg.overrides.task))
            metrics = run_job(cfg, choices, parent, lambda tracker, run_id: opened.append((tracker, run_id)))
            return sweep.objective_value(metrics, objective) if objective else None
    except BayesxError as exc:
        error = str(exc)
        print(f"bayesx: error: {exc}", file=sys.stderr)
        if not multirun:  # a recorded run that failed, or input refused before anything was recorded
            raise SystemExit(EXIT_RUN_FAILED if opened or isinstance(exc, RecordedFailure) else EXIT_BAD_INPUT)
        sweep.outcome["failed"] = "yes"  # the sweep goes on; its parent run ends FAILED
        return float("nan") if objective else None  # a tuner records a failed trial
    except (KeyboardInterrupt, RunInterrupted) as exc:
        error = "interrupted"
        kept = exc if isinstance(exc, InterruptKept) else "the run is marked KILLED in MLflow and keeps what it had"
        print(f"bayesx: interrupted; {kept}", file=sys.stderr)
        if multirun:
            sweep.abort_parent(cfg, "KILLED")
        raise SystemExit(EXIT_INTERRUPTED)
    except Exception as exc:  # a fault of bayesx before a run was recorded (one inside a run is a BayesxError)
        from bayesx.store.tracking import DEBUG_ENV, FAULT_FILE, fault_line, traceback_text

        kept = Path(hydra_cfg.runtime.output_dir) / FAULT_FILE
        try:
            kept.write_text(traceback_text(exc))
            error = fault_line(exc, choices.get("method", "?"), f"its traceback is {kept}")
        except OSError:
            error = fault_line(exc, choices.get("method", "?"), f"rerun with {DEBUG_ENV}=1 to print its traceback")
        print(f"bayesx: error: {error}", file=sys.stderr)
        if not multirun:
            raise SystemExit(EXIT_RUN_FAILED) from None
        sweep.outcome["failed"] = "yes"
        return float("nan") if objective else None
    finally:
        if as_json or multirun:
            _report_run(opened, error, multirun, parent)


def _report_run(opened: list, error: str | None, multirun: bool, parent: str | None) -> None:
    """The job's run, read back from the store once it has ended: printed under ``--json`` (a single run),
    or left in the job's output folder (a job of a sweep, always: the sweeping process reads it for the
    sweep's status and prints it under --json, whatever process ran the job). Input refused before a run
    was recorded prints nothing for a single run (the exit status and the error line say it all); a
    sweep's job leaves a REJECTED object, so that every job has its line and its failure is seen."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    description = None
    if opened:
        tracker, run_id = opened[-1]
        try:
            description = tracker.describe(run_id)
        except Exception as exc:  # noqa: BLE001 - the store went away after the run: its id is still worth having
            description = {"run_id": run_id, "status": "UNKNOWN",
                           "error": f"cannot read the run back from {tracker.uri}: {str(exc).splitlines()[0]}"}
    if description is None and not multirun:
        return
    obj = run_output.run_object(description, list(hydra_cfg.overrides.task),
                                int(hydra_cfg.job.num) if multirun else None, parent, error)
    if multirun:
        run_output.save_job(obj, hydra_cfg.runtime.output_dir)
    else:
        run_output.emit(obj)


TEXT_KEYS = ("resume", "run_name")  # always text: a run id such as 508306e4 must not reach the job as a float


def quote_text_value(override: str) -> str:
    """``resume=508306e4`` becomes ``resume='508306e4'``: Hydra would read the bare value as the number
    5083060000.0 (or an all-digit id as an int without its leading zeros), so a text key's value is quoted
    unless it is quoted already."""
    key, sep, value = override.partition("=")
    if sep and key.lstrip("+") in TEXT_KEYS and value and value[0] not in "'\"" and value != "null" \
            and not any(c in value for c in "'(,"):  # a sweep (a,b or choice(...)) is left to Hydra
        return f"{key}='{value}'"
    return override


HYDRA_INFO_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc", "--cfg", "-c")
"""Hydra's flags that print something about the config and run nothing."""

RUN_HELP = f"""bayesx run [--json] [-m] [OVERRIDE ...]: one run, or a sweep with -m (Hydra's help follows)

  --json   print each run as one line of JSON on standard output, and everything else (the summary,
           progress, warnings, Hydra's own lines) on standard error: run_id, status (FINISHED, FAILED or
           KILLED), run_name, experiment_name, experiment_id, parent_run_id, metrics (null where not finite),
           tags (method, model, data, seed, ...), error, artifact_uri, tracking_uri, job, overrides. A sweep
           (-m, or a preset that sweeps) prints JSON Lines when it ends: one object per job, in job order; a
           job that ended before it recorded a run (a bad value of the sweep) has status REJECTED, run_id null
           and its error. Bad input prints nothing on standard output.
           e.g.  bayesx run experiment=quick --json | python -c "import json,sys; print(json.load(sys.stdin)['run_id'])"
{textwrap.fill(EXIT_CODES_HELP, 104, initial_indent="  ", subsequent_indent="  ")}
"""


def cmd_run(args: list[str]) -> int:
    import hydra

    from bayesx.cli import sweep
    from bayesx.cli.config import check_overrides, conf_dir

    def is_override(a: str) -> bool:
        return not a.startswith("-") and ("=" in a or a.startswith("~"))

    as_json = "--json" in args
    if not as_json:  # $BAYESX_JSON is a sweeping command's word to its own jobs, not to a command it started
        os.environ.pop(run_output.ENV, None)
    args = [a for a in args if a != "--json"]
    asks_info = any(a in HYDRA_INFO_FLAGS for a in args)
    if as_json and asks_info:
        raise BayesxError("--json prints the runs, and --cfg, --help and --info run none; drop --json")
    if any(a in ("--help", "-h") for a in args):
        print(RUN_HELP)
    overrides = [quote_text_value(a) for a in args if is_override(a)]
    if not asks_info or any(a in ("--cfg", "-c") for a in args):
        check_overrides(overrides)
    # overrides last: Hydra's argparse rejects overrides after a flag (`bayesx run method=nuts -m seed=0,1`)
    sys.argv = ["bayesx run", *[a for a in args if not is_override(a)], *overrides]
    main_fn = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    sweep.outcome.clear()  # an earlier sweep in this process must not decide this command's status
    jobs: list[dict] = []
    with run_output.json_stdout() if as_json else contextlib.nullcontext():
        try:
            main_fn()
        except BaseException as exc:  # an error that escaped the sweep's jobs must not leave its parent RUNNING
            sweep.close_open_parent(interrupted=isinstance(exc, (KeyboardInterrupt, RunInterrupted)))
            raise
        finally:
            jobs = _sweep_jobs(sweep.outcome, as_json)
    failed_jobs = [j for j in jobs if j.get("status") != "FINISHED"]
    status = sweep.outcome.get("status")
    if status in ("FAILED", "KILLED") or sweep.outcome.get("failed") or failed_jobs:
        print(f"bayesx: error: the sweep ended {status if status == 'KILLED' else 'FAILED'}: a job failed "
              "(see the messages above); fix it and run the sweep again", file=sys.stderr)
        return EXIT_RUN_FAILED
    return EXIT_OK


def _sweep_jobs(outcome: dict[str, str], emit: bool) -> list[dict]:
    """After a sweep: its jobs' objects (none for a single run), printed one line each (JSON Lines) if ``emit``."""
    if "parent_run_id" not in outcome or "sweep_dir" not in outcome:
        return []
    jobs = run_output.sweep_objects(outcome["sweep_dir"], outcome["parent_run_id"])
    for job in jobs if emit else ():
        run_output.emit(job)
    return jobs


# --- bayesx ui --------------------------------------------------------------------------------------
def _tracking(overrides: list[str]):
    from bayesx.cli.config import compose

    return compose(overrides).tracking


def cmd_ui(ns: argparse.Namespace) -> int:
    from bayesx.cli.config import compose
    from bayesx.serve.server import check_bindable
    from bayesx.store.tracking import ui_command

    if not 1 <= ns.port <= 65535:
        raise BayesxError(f"--port must be between 1 and 65535, got {ns.port}")
    cfg = compose(ns.overrides)
    tracking = cfg.tracking
    uri = ns.uri or str(tracking.uri)
    check_bindable(ns.host, ns.port)  # a name that does not resolve, an address not on this machine, a port in use
    url = f"http://{ns.host}:{ns.port}"
    print(f"starting the MLflow UI for {uri} at {url}; waiting for it to answer", end="", flush=True)
    return _supervise(_ui_server_command(ui_command(uri, ns.host, ns.port, tracking.get("artifact_root")), ns.verbose),
                      _ui_when_ready(url, ns.experiment, str(cfg.get("experiment_name") or "")), _ui_server_env())


def _ui_server_command(command: list[str], verbose: bool = False) -> list[str]:
    from bayesx.serve import ui

    return [*command, *ui.server_options(verbose)]


def _ui_server_env() -> dict[str, str]:
    from bayesx.serve import ui

    return {**os.environ, **ui.SERVER_ENV}


def _ui_when_ready(url: str, experiment: str | None, configured: str):
    """What `bayesx ui` does once the server runs: wait (with progress) until it answers, then print the
    link to the experiment's run table (bayesx.serve.ui); a server that exits first leaves its status to bayesx."""
    from bayesx.serve import ui

    def ready(proc: subprocess.Popen) -> None:
        if not ui.wait_until_answers(url, lambda: proc.poll() is None):
            print(f"bayesx: the MLflow server exited (status {proc.returncode}) before it answered", file=sys.stderr)
            return
        link, what = ui.landing(url, experiment, configured or None)
        print(f"MLflow UI: {link}\n  opens {what}  (Ctrl-C to stop)", flush=True)

    return ready


def _supervise(command: list[str], when_ready=None, env: dict[str, str] | None = None) -> int:
    """Run a server command (in ``env``, default ours) in its own process group, which is stopped as a
    whole when bayesx ends: on Ctrl-C, on SIGTERM or SIGHUP, when the server exits, or when
    ``when_ready(proc)`` fails."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    proc = None
    try:
        for sig in signals[1:]:
            signal.signal(sig, stop)
        proc = subprocess.Popen(command, start_new_session=True, env=env)
        if when_ready is not None:
            when_ready(proc)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        for sig in signals:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        if proc is not None:
            _stop_group(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- bayesx server ----------------------------------------------------------------------------------
def cmd_server(ns: argparse.Namespace) -> int:

    from bayesx.serve import server
    from bayesx.serve import auth as server_auth

    if ns.action == "user":
        return cmd_server_user_add(ns)
    for name in ("port", "db_port"):
        value = getattr(ns, name)
        if value is not None and not 1 <= value <= 65535:
            raise BayesxError(f"--{name.replace('_', '-')} must be between 1 and 65535, got {value}")
    server_auth.check_exposure(ns.host, ns.auth, ns.insecure)
    password = None
    if ns.auth:
        server_auth.require_auth_app()
        password = server_auth.admin_password(ns.admin_password_file)
    server.check_bindable(ns.host, ns.port)
    if server.port_open(ns.host, ns.port):
        raise BayesxError(f"port {ns.port} on {ns.host} is already in use; pass --port to pick another")
    folder = Path(ns.dir).resolve()
    cluster = None
    try:
        if ns.backend_uri:
            backend = ns.backend_uri
        else:
            cluster = server.Cluster(folder / "pgdata", ns.db_port or server.free_port(), server.cluster_user())
            cluster.start()
            backend = cluster.uri
        server.prepare_store(backend)
        artifacts = folder / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        url = f"http://{ns.host}:{ns.port}"
        if ns.auth:  # the user database: beside the runs' (PostgreSQL), or a file in --dir with --backend-uri
            users = ns.auth_db_uri or (cluster.ensure_database(server_auth.AUTH_DB_NAME) if cluster
                                       else f"sqlite:///{folder / 'basic_auth.db'}")
            os.environ.update(server_auth.server_environment(folder, users, password))

        def announce(proc):
            server.wait_until_serving(proc, ns.host, ns.port)
            if ns.auth:
                server_auth.check_admin(url, server_auth.admin_username(), password)
            print(f"MLflow tracking server at {url}  (database {server_auth.without_password(backend)}, "
                  f"artifacts in {artifacts}; Ctrl-C to stop)\n"
                  f"log runs to it:  bayesx run tracking=server tracking.uri={url} ...  "
                  f"(or export MLFLOW_TRACKING_URI={url})", flush=True)
            if ns.auth:
                print(f"authentication on (users in {server_auth.without_password(users)}): clients set "
                      f"MLFLOW_TRACKING_USERNAME and "
                      f"MLFLOW_TRACKING_PASSWORD; add users with  bayesx server user add NAME --uri {url}", flush=True)
            elif ns.insecure:
                print(f"WARNING: --insecure: {url} has no authentication and listens beyond this machine; anyone "
                      "who reaches it can read, write and delete every run", flush=True)

        return _supervise(server.server_command(backend, artifacts, ns.host, ns.port, ns.auth), announce)
    finally:
        if cluster is not None:
            cluster.stop()


def cmd_server_user_add(ns: argparse.Namespace) -> int:
    """``bayesx server user add NAME``: create a user of an authenticated server and grant it a permission."""
    from bayesx.serve import auth as server_auth

    admin = (server_auth.admin_username(), server_auth.admin_password(ns.admin_password_file))
    uri = ns.uri or os.environ.get("MLFLOW_TRACKING_URI") or "http://127.0.0.1:5000"
    print(server_auth.add_user(uri, ns.name, ns.permission, ns.experiment, admin,
                               lambda: server_auth.new_user_password(ns.name, ns.password_file)))
    return 0


def _stop_group(proc: subprocess.Popen) -> None:
    """Terminate the process group led by ``proc``: SIGTERM, then SIGKILL after 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        deadline = time.monotonic() + grace
        try:
            os.killpg(proc.pid, sig)
            while time.monotonic() < deadline:
                proc.poll()  # reap the leader, so that only live members keep the group alive
                os.killpg(proc.pid, 0)
                time.sleep(0.1)
        except (ProcessLookupError, PermissionError):
            return


# --- bayesx compare ---------------------------------------------------------------------------------
def clean_dead_runs(uri: str, runs, stale_after_s: float, dry_run: bool = False) -> int:
    """Among ``runs`` (the store's, as a DataFrame), find the RUNNING ones whose process is gone, say which
    and why, and (unless dry_run) end them KILLED, in the store and in ``runs``."""
    from bayesx.store.tracking import dead_runs, mark_killed

    dead = dead_runs(runs, stale_after_s)
    verb = "would mark" if dry_run else "marked"
    for run in dead:
        print(f"{verb} run {run.run_id[:8]} ({run.run_name}) {run.status}: {run.reason}")
    if not dry_run and dead:
        mark_killed(uri, dead)
        for run in dead:
            runs.loc[runs["run_id"] == run.run_id, "status"] = run.status
    return len(dead)


def cmd_runs(ns: argparse.Namespace) -> int:
    tracking = _tracking(ns.overrides)
    uri = ns.uri or str(tracking.uri)
    stale = ns.stale_after if ns.stale_after is not None else float(tracking.stale_after_s)
    if stale <= 0:
        raise BayesxError(f"--stale-after must be a positive number of seconds, got {stale:g}")
    from bayesx.store.tracking import search_runs

    if clean_dead_runs(uri, search_runs(uri, ns.experiment), stale, ns.dry_run) == 0:
        print(f"no dead runs in {uri}: every RUNNING run's process is alive or has beaten within {stale:g} s")
    return 0


def cmd_compare(ns: argparse.Namespace) -> int:
    """The runs as a table on standard output: aligned for a terminal (the default, with its notes), or as
    json, csv or markdown (whole run ids in json and csv), the notes then on standard error."""
    from bayesx.reports.compare import ID_CHARS, check_note, compare_table, render
    from bayesx.store.tracking import search_runs, store_writable

    notes = sys.stdout if ns.format == "table" else sys.stderr  # stdout holds nothing but the table
    if ns.limit is not None and ns.limit < 1:
        raise BayesxError(f"--limit must be at least 1, got {ns.limit}; leave it out to show every run")
    if ns.csv and not Path(ns.csv).expanduser().resolve().parent.is_dir():
        raise BayesxError(f"--csv {ns.csv}: the folder {Path(ns.csv).expanduser().resolve().parent} does not exist; "
                          f"create it or write the file elsewhere")
    tracking = _tracking(ns.overrides)
    uri = ns.uri or str(tracking.uri)
    runs = search_runs(uri, ns.experiment)  # read once: cleaned, then tabulated
    with contextlib.redirect_stdout(notes):
        clean_dead_runs(uri, runs, float(tracking.stale_after_s), dry_run=not store_writable(uri))  # read-only: say
    table = compare_table(runs, ns.sort, ns.ascending, None if ns.format in ("json", "csv") else ID_CHARS)
    if table.empty:
        print(f"no runs recorded in {uri}" + (f" under experiment '{ns.experiment}'" if ns.experiment else ""),
              file=notes)
        if ns.format != "table":
            print(render(table, ns.format))
        return EXIT_OK
    if ns.limit:
        table = table.head(ns.limit)
    print(render(table, ns.format, ns.wide, ns.sort))
    if check_note(table, ns.sort):
        print(check_note(table, ns.sort), file=notes)
    if ns.csv:
        table.to_csv(ns.csv, index=False)
        print(f"wrote {len(table)} runs to {ns.csv}", file=notes)
    return EXIT_OK


# --- bayesx report --------------------------------------------------------------------------------
def cmd_report(ns: argparse.Namespace) -> int:

    from bayesx.reports.report import report

    uri = ns.uri or str(_tracking(ns.overrides).uri)
    out = Path(ns.out) if ns.out else None
    text = report(uri, ns.experiment, ns.parent, Path(ns.published) if ns.published else None, out, not ns.no_plot,
                  ns.note)
    if out is None:
        print(text)
    else:
        print(f"wrote {out}" + (f" and {out.with_suffix('.png')}" if out.with_suffix(".png").exists() and not ns.no_plot else ""))
    return 0


# --- bayesx data ------------------------------------------------------------------------------------
def cmd_data(ns: argparse.Namespace) -> int:
    from bayesx.data import registry

    if ns.action == "list":
        print(f"data cache: {registry.data_dir()}")
        print(f"{'name':<14} {'status':<9} {'location':<52} description")
        for info in registry.list_datasets():
            print(f"{info.name:<14} {info.status():<9} {str(info.location):<52} {info.description}")
        return 0
    if not ns.name:
        raise BayesxError("data fetch needs a data set name, e.g. `bayesx data fetch mnist`; see `bayesx data list`")
    result = registry.fetch(ns.name, force=ns.force)
    print(result.message)
    return 0


# --- entry point ------------------------------------------------------------------------------------
def help_text() -> str:
    from bayesx.cli.config import all_group_choices, default_choices

    lines = ["usage: bayesx <command> [options]", "", "commands:"]
    lines += [f"  {name:<9} {text}" for name, text in COMMANDS.items()]
    lines += ["", "config groups (bayesx run GROUP=CHOICE; defaults marked *):"]
    defaults = default_choices()  # read from conf/config.yaml, so the marks follow it
    for group, choices in all_group_choices().items():
        shown = ", ".join(c + ("*" if defaults.get(group) == c else "") for c in choices)
        lines.append(f"  {group:<11} {shown}")
    lines += ["", "examples:",
              "  bayesx run method=nuts model=logreg data=digits",
              "  bayesx run -m method=hmc,nuts seed=0,1,2",
              "  bayesx run --cfg job method=nuts method.mass=dense",
              "  bayesx run experiment=quick --json | python -c \"import json,sys; print(json.load(sys.stdin)['run_id'])\"",
              "  bayesx compare --sort ess_bulk_min_per_s",
              "  bayesx compare --format csv > runs.csv",
              "  bayesx report --out results/digits.md   # the newest sweep as a markdown table and plot",
              "  bayesx runs clean",
              "  bayesx server --dir mlflow-server   # then: bayesx run tracking=server ...",
              "  bayesx ui",
              "", "output for scripts:",
              "  bayesx run --json prints each run as one JSON object on standard output (run_id, status, metrics,",
              "  artifact_uri, tracking_uri, ...) and everything else on standard error; a sweep (-m) prints JSON",
              "  Lines, one object per job. bayesx compare --format json|csv|markdown prints only the table.",
              "", textwrap.fill(EXIT_CODES_HELP, 104),
              "", "`bayesx run --help` shows --json and Hydra's help with the composed config."]
    return "\n".join(lines)


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"bayesx {command}", description=COMMANDS[command], epilog=EXIT_CODES_HELP)
    if command in ("ui", "compare", "runs", "report"):
        parser.add_argument("--uri", help="tracking URI (default: the tracking config / MLFLOW_TRACKING_URI)")
        parser.add_argument("overrides", nargs="*", help="config overrides, e.g. tracking=server")
    if command == "ui":
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
        parser.add_argument("--port", type=int, default=5000)
        parser.add_argument("--experiment", metavar="NAME",
                            help="the experiment whose run table the printed link opens (default: the one with the "
                                 "newest run, else experiment_name)")
        parser.add_argument("--verbose", action="store_true", help="show the server's access log (off by default)")
    if command == "compare":
        from bayesx.reports.compare import FORMATS

        parser.add_argument("--experiment", help="only runs of this MLflow experiment")
        parser.add_argument("--sort", metavar="METRIC", help="sort by this metric (descending)")
        parser.add_argument("--ascending", action="store_true", help="sort ascending instead")
        parser.add_argument("--limit", type=int, help="show at most this many runs")
        parser.add_argument("--wide", action="store_true", help="every column (default: the table fits 120 characters)")
        parser.add_argument("--csv", metavar="FILE", help="also write the table to a CSV file")
        parser.add_argument("--format", choices=FORMATS, default="table",
                            help="table (default: aligned, for a terminal), json (an array of one object per run), "
                                 "csv or markdown; json and csv give whole run ids, and in every format but table "
                                 "standard output holds only the table (notes go to standard error)")
    if command == "report":
        parser.add_argument("--experiment", "--experiment-name", dest="experiment",
                            help="only sweeps of this MLflow experiment (a preset's experiment_name)")
        parser.add_argument("--parent", metavar="RUN_ID", action="append",
                            help="the sweep's parent run id, 8 characters or more (default: the newest sweep); "
                                 "given more than once, the sweeps are one table (a preset run in parts)")
        parser.add_argument("--published", metavar="FILE",
                            help="published numbers to show beside ours (default: results/published/<preset>.yaml "
                                 "for a sweep of `bayesx run experiment=<preset>`)")
        parser.add_argument("--out", metavar="FILE.md",
                            help="write the markdown here and its plot beside it as FILE.png (default: print the markdown)")
        parser.add_argument("--no-plot", action="store_true", help="with --out: no plot")
        parser.add_argument("--note", help="a line under the header, e.g. 'measured with other work on the machine'")
    if command == "server":
        _server_options(parser)
    if command == "runs":
        parser.add_argument("action", choices=["clean"])
        parser.add_argument("--experiment", help="only runs of this MLflow experiment")
        parser.add_argument("--stale-after", type=float, metavar="SECONDS",
                            help="a run on another host with no heartbeat for this long is dead "
                                 "(default: tracking.stale_after_s, 600)")
        parser.add_argument("--dry-run", action="store_true", help="list the dead runs, change nothing")
    if command == "data":
        parser.add_argument("action", choices=["list", "fetch"])
        parser.add_argument("name", nargs="?", help="data set to fetch (see `bayesx data list`)")
        parser.add_argument("--force", action="store_true", help="download again even if present")
    return parser


def _server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="mlflow-server",
                        help="folder of the PostgreSQL cluster (pgdata) and the artifacts (default: mlflow-server)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the tracking server binds (default: localhost; any other needs --auth or --insecure)")
    parser.add_argument("--port", type=int, default=5000, help="tracking server port (default 5000)")
    parser.add_argument("--db-port", type=int, help="PostgreSQL port (default: a free one)")
    parser.add_argument("--backend-uri", help="use this database instead of a cluster of our own, "
                                              "e.g. postgresql://user:pass@host:5432/mlflow")
    parser.add_argument("--auth", action="store_true",
                        help="MLflow's basic-auth app: every request needs a user's password (the admin's from "
                             "$MLFLOW_AUTH_ADMIN_PASSWORD or --admin-password-file)")
    parser.add_argument("--admin-password-file", metavar="FILE",
                        help="file (mode 600) whose first line is the admin password (else $MLFLOW_AUTH_ADMIN_PASSWORD)")
    parser.add_argument("--auth-db-uri", help="the user database (default: database mlflow_auth in our PostgreSQL "
                                              "cluster; with --backend-uri, the file basic_auth.db in --dir)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a --host beyond this machine without --auth (anyone who reaches it may write)")
    actions = parser.add_subparsers(dest="action", metavar="user add NAME")
    user = actions.add_parser("user", help="manage the users of a server started with --auth")
    add = user.add_subparsers(dest="user_action", required=True, metavar="add").add_parser(
        "add", help="create a user (or keep an existing one) and grant it a permission")
    add.add_argument("name", help="the user's name (what clients put in $MLFLOW_TRACKING_USERNAME)")
    add.add_argument("--uri", help="the server's URL (default: $MLFLOW_TRACKING_URI, else http://127.0.0.1:5000)")
    add.add_argument("--permission", default="read", choices=["read", "edit", "manage"],
                     help="read: see runs; edit: also log runs; manage: also grant others (default read)")
    add.add_argument("--experiment", help="grant on this experiment only (default: on every experiment)")
    add.add_argument("--password-file", metavar="FILE",
                     help="file (mode 600) with the new user's password (else $BAYESX_USER_PASSWORD, else typed)")
    add.add_argument("--admin-password-file", metavar="FILE", default=argparse.SUPPRESS,
                     help="file (mode 600) with the admin password (else $MLFLOW_AUTH_ADMIN_PASSWORD)")


def main(argv: list[str] | None = None) -> int:
    """``bayesx ARGV``; without ``argv`` (the console script, ``python -m bayesx``) the process's own command, which
    ends by freezing the garbage collector's objects: the interpreter's final collections then skip the millions
    of objects torch, MLflow, ArviZ and their libraries made: a process that had loaded a run's libraries took 27-37 s
    to exit at load 8 on the 2-core machine, 2-3 s frozen (results/bench_fixed_costs.md). A caller that goes on (the
    tests) passes argv, and nothing is frozen."""
    if argv is not None:
        return _main(argv)
    try:
        return _main(sys.argv[1:])
    finally:
        gc.freeze()


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(help_text())
        return EXIT_OK
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        fail(f"unknown command '{command}'; use one of: {', '.join(COMMANDS)} (bayesx --help)")
    try:
        if command == "run":
            return cmd_run(rest)
        ns = _parser(command).parse_args(rest)
        return {"ui": cmd_ui, "compare": cmd_compare, "runs": cmd_runs, "report": cmd_report, "server": cmd_server,
                "data": cmd_data}[command](ns)
    except BayesxError as exc:
        fail(str(exc))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
