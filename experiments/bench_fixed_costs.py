"""Benchmark: what a ``bayesx run`` costs beyond warm-up and sampling (issue 56, parts 3 and 6).

Measured in one run of this script, each command in a fresh process:

  imports   ``import torch, mlflow`` (the floor every run pays), ``import bayesx.runner`` (what the command line
            loads before a job), the libraries the runner loaded up front before issue 56 (``bayesx.runner`` with
            torch._dynamo, ArviZ and MLflow's SQLite store: the old start), and each deliberately late library of
            bayesx/diagnostics/lazy.py on top of torch and MLflow; the median of ``--repeats`` for the first two
  a small   examples/poisson_groups.py (4 parameters, NUTS at its defaults), its density already compiled (a first
  density   run fills the compile cache, then the timed run)
  1,000-d   a hierarchical linear regression written as a user would (1,000 group intercepts, their mean and scale,
            the noise scale and 4 slopes: 1,007 parameters; 30,000 rows in an npz through model.data_file), NUTS at
            its defaults, density already compiled

For each run: the command's wall time (process start to exit, as a user waits for it), the stages the run records
(``setup_time_s``, ``compile_time_s``, ``warmup_time_s`` with the Laplace start in it, ``sampling_time_s``, the record's
``diagnostics_time_s``, ``summary_time_s``, ``plots_time_s``, ``files_time_s``, ``record_time_s``), the process's own
start (command wall time less the run's ``wall_time_s``: interpreter, imports, Hydra) and its peak memory (the run's
``peak_memory_gb`` and the child's ru_maxrss from wait4). The goals, as ratios (at most 1 meets the goal):

  small     (command - warm-up - sampling) / (import torch, mlflow + 2 s)
  1,000-d   (command - warm-up - sampling - import torch, mlflow) / (0.10 x command)
  memory    peak / (2 x draws + data + interpreter), the interpreter being the peak of a process that has loaded
            what a run loads (bayesx.runner, dynamo, ArviZ, matplotlib, h5netcdf, the SQLite store)

``--code DIR`` runs every command against another checkout (PYTHONPATH=DIR), e.g. a worktree of the commit before
issue 56, for a before-and-after; that code records neither stages nor its peak (ru_maxrss is still read).
Timings on a machine with other work on it say so: the load averages before and after are in the header.

    python experiments/bench_fixed_costs.py --out results/bench_fixed_costs.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HIERARCHICAL = textwrap.dedent('''
    """Hierarchical linear regression: y_i ~ N(a[g_i] + x_i . beta, sigma^2), a_j ~ N(mu, tau^2), mu ~ N(0, 5^2),
    beta ~ N(0, 1), log tau ~ N(0, 1), log sigma ~ N(0, 1); theta = (a_1..a_G, mu, log tau, log sigma, beta_1..beta_K)."""
    import torch

    GROUPS = 1000


    def log_density(theta, data):
        y, g, x = data["y"], data["group"], data["x"]
        a = theta[..., :GROUPS]
        mu, log_tau, log_sigma = theta[..., GROUPS], theta[..., GROUPS + 1], theta[..., GROUPS + 2]
        beta = theta[..., GROUPS + 3:]
        residual = (y - a[..., g] - beta @ x.T) / torch.exp(log_sigma)[..., None]
        log_likelihood = (-0.5 * residual**2).sum(-1) - y.shape[-1] * log_sigma
        z = (a - mu[..., None]) / torch.exp(log_tau)[..., None]
        log_prior = ((-0.5 * z**2).sum(-1) - GROUPS * log_tau - 0.5 * (mu / 5) ** 2 - 0.5 * (beta**2).sum(-1)
                     - 0.5 * log_tau**2 - 0.5 * log_sigma**2)
        return log_likelihood + log_prior
''')
GROUPS, ROWS, SLOPES = 1000, 30_000, 4
DIM = GROUPS + 3 + SLOPES

RUN_LOADS = ("import bayesx.runner, torch._dynamo, mlflow.store.tracking.sqlalchemy_store, arviz, h5netcdf, matplotlib\n"
             "matplotlib.use('Agg')\nimport matplotlib.pyplot")
OLD_START = "import bayesx.runner, torch._dynamo, arviz, mlflow.store.tracking.sqlalchemy_store"
LATE = ("arviz", "matplotlib.pyplot", "h5netcdf", "torch._dynamo", "mlflow.store.tracking.sqlalchemy_store")
STAGES = ("setup_time_s", "compile_time_s", "laplace_time_s", "warmup_time_s", "sampling_time_s", "method_time_s",
          "diagnostics_time_s", "summary_time_s", "plots_time_s", "files_time_s", "record_time_s", "wall_time_s")


def environment(code: Path | None) -> tuple[dict, Path]:
    """The environment and working folder of ``python -c`` commands: with ``code``, its checkout first on the path
    (``python -c`` puts its working folder first, so it runs there)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    return env, code or ROOT


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, float, str, str, int]:
    """(wall seconds, the child's peak resident GB from wait4, stdout, stderr, exit status) of one command."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, usage.ru_maxrss / 1024**2, out.read(), err.read(), proc.returncode


def python_seconds(code: str, env: dict, cwd: Path, repeats: int) -> tuple[float, list[float]]:
    """Median wall time of ``python -c code`` over ``repeats`` fresh processes."""
    times = []
    for _ in range(repeats):
        wall, _, _, err, rc = timed([sys.executable, "-c", code], env, cwd)
        if rc != 0:
            raise SystemExit(f"python -c {code!r} failed:\n{err[-2000:]}")
        times.append(wall)
    return statistics.median(times), times


def late_import_seconds(name: str, env: dict, cwd: Path) -> float:
    """Seconds to import ``name`` in a process that has torch and MLflow already (as a run has)."""
    code = (f"import time, torch, mlflow\nt = time.perf_counter()\nimport {name}\n"
            "print(time.perf_counter() - t)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"import {name} failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def interpreter_gb(env: dict, cwd: Path) -> float:
    """The peak resident memory of a process that has loaded what a run loads, and nothing else."""
    code = RUN_LOADS + "\nprint([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])"
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the interpreter's peak failed:\n{proc.stderr[-2000:]}")
    return int(proc.stdout.strip().splitlines()[-1]) / 1024**2


def write_hierarchical(folder: Path) -> tuple[Path, Path, float]:
    """The 1,007-d model's file and its data (seed 0); returns their paths and the data's bytes as the run holds
    them (int64 groups, float64 values)."""
    import numpy as np

    rng = np.random.default_rng(0)
    group = rng.integers(0, GROUPS, ROWS)
    x = rng.normal(size=(ROWS, SLOPES))
    y = rng.normal(1.0, 0.5, GROUPS)[group] + x @ rng.normal(size=SLOPES) + rng.normal(0.0, 1.0, ROWS)
    model, data = folder / "hierarchical_regression.py", folder / "hierarchical_regression.npz"
    model.write_text(HIERARCHICAL)
    np.savez(data, y=y, group=group, x=x)
    return model, data, float(y.nbytes + group.astype(np.int64).nbytes + x.nbytes)


def bayesx_run(overrides: list[str], store: Path, env: dict) -> dict:
    """One ``bayesx run --json`` in a fresh process: its wall time, its child peak and its run object."""
    argv = [sys.executable, "-m", "bayesx", "run", "--json", *overrides, f"tracking.uri=sqlite:///{store}/mlflow.db",
            f"tracking.artifact_root={store}/artifacts", f"hydra.run.dir={store}/outputs", "progress=false"]
    print("$ bayesx " + shlex.join(argv[3:]), flush=True)
    load = os.getloadavg()
    wall, peak, out, err, rc = timed(argv, env, store)
    runs = [json.loads(line) for line in out.splitlines() if line.strip()]
    if rc != 0 or len(runs) != 1 or runs[0].get("status") != "FINISHED":
        raise SystemExit(f"bayesx run failed ({rc}):\n{err[-3000:]}")
    return {"command_s": wall, "child_peak_gb": peak, "load": (load, os.getloadavg()), **runs[0]}


def ratios(small: dict, large: dict, imports: dict, memory: dict) -> list[tuple[str, float, str]]:
    floor = imports["import torch, mlflow"]
    post_small = small["command_s"] - small["metrics"]["warmup_time_s"] - small["metrics"]["sampling_time_s"]
    post_large = large["command_s"] - large["metrics"]["warmup_time_s"] - large["metrics"]["sampling_time_s"]
    rest_large = post_large - floor
    peak = large["metrics"].get("peak_memory_gb", large["child_peak_gb"])
    return [
        ("small density: (command - warm-up - sampling) / (import torch, mlflow + 2 s)", post_small / (floor + 2.0),
         f"{post_small:.2f} s / ({floor:.2f} + 2) s"),
        ("1,000-d: (command - warm-up - sampling - import torch, mlflow) / (10% of the command)",
         rest_large / (0.10 * large["command_s"]), f"{rest_large:.2f} s / {0.10 * large['command_s']:.2f} s"),
        ("1,000-d: peak memory / (2 x draws + data + interpreter)", peak / memory["bound_gb"],
         f"{peak:.3f} GB / (2 x {memory['draws_gb']:.3f} + {memory['data_gb']:.4f} + {memory['interpreter_gb']:.3f}) GB"),
    ]


def stage_rows(runs: dict[str, dict]) -> list[str]:
    names = list(runs)
    lines = ["| stage | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    lines.append("| the command (process start to exit) | " +
                 " | ".join(f"{r['command_s']:.2f}" for r in runs.values()) + " |")
    lines.append("| process start: interpreter, imports, Hydra (command - wall_time_s) | " +
                 " | ".join(f"{r['command_s'] - r['metrics']['wall_time_s']:.2f}" for r in runs.values()) + " |")
    for key in STAGES:
        cells = [f"{r['metrics'][key]:.2f}" if key in r["metrics"] else "-" for r in runs.values()]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    after = [r["command_s"] - r["metrics"]["warmup_time_s"] - r["metrics"]["sampling_time_s"] for r in runs.values()]
    lines.append("| everything but warm-up and sampling | " + " | ".join(f"{a:.2f}" for a in after) + " |")
    lines.append("| `peak_memory_gb` (child's ru_maxrss) | " + " | ".join(
        f"{r['metrics'].get('peak_memory_gb', float('nan')):.3f} ({r['child_peak_gb']:.3f})" for r in runs.values()) + " |")
    return lines


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here (default: print it)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per timed import (the median is shown)")
    ap.add_argument("--code", type=Path, default=None, help="run against this checkout (PYTHONPATH), for a 'before'")
    args = ap.parse_args(argv)
    env, cwd = environment(args.code)
    where = subprocess.run([sys.executable, "-c", "import bayesx; print(bayesx.__file__)"], cwd=cwd, env=env,
                           capture_output=True, text=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(cwd.resolve()):
        raise SystemExit(f"bayesx imports from {where}, not from {cwd}")
    load_before = os.getloadavg()
    started = datetime.datetime.now().astimezone()

    imports: dict[str, float] = {}
    spread: dict[str, list[float]] = {}
    for label, code in (("import torch, mlflow", "import torch, mlflow"), ("import bayesx.runner", "import bayesx.runner"),
                        ("the old start: bayesx.runner + dynamo, ArviZ, SQLite store", OLD_START)):
        imports[label], spread[label] = python_seconds(code, env, cwd, args.repeats)
        print(f"{label}: {imports[label]:.2f} s {['%.2f' % t for t in spread[label]]}", flush=True)
    late = {name: late_import_seconds(name, env, cwd) for name in LATE}

    with tempfile.TemporaryDirectory(prefix="bench-fixed-costs-") as tmp:
        folder = Path(tmp)
        model, data, data_bytes = write_hierarchical(folder)
        small = ["model=custom", f"model.log_density={ROOT}/examples/poisson_groups.py:log_density", "model.dim=4",
                 f"model.data_file={ROOT}/examples/poisson_groups.npz"]
        large = ["model=custom", f"model.log_density={model}:log_density", f"model.dim={DIM}",
                 f"model.data_file={data}"]
        runs = {}
        for name, slug, overrides in (("small density (4-d)", "small", small),
                                      ("1,007-d hierarchical regression", "large", large)):
            store = folder / slug
            store.mkdir()
            bayesx_run(overrides, store, env)  # fills the compile cache: the timed run finds its density compiled
            runs[name] = bayesx_run(overrides, store, env)
        interpreter = interpreter_gb(env, cwd)

    large_run = runs["1,007-d hierarchical regression"]
    m = large_run["metrics"]
    n_chains = int(large_run["tags"].get("n_chains", 4))
    draws_gb = n_chains * m.get("draws_per_chain", 1000) * DIM * 8 / 1024**3
    memory = {"draws_gb": draws_gb, "data_gb": data_bytes / 1024**3, "interpreter_gb": interpreter,
              "bound_gb": 2 * draws_gb + data_bytes / 1024**3 + interpreter}
    goals = ratios(runs["small density (4-d)"], large_run, imports, memory)

    command = "python experiments/bench_fixed_costs.py" + "".join(
        f" {flag}" for flag in ([f"--repeats {args.repeats}"] if args.repeats != 3 else []) +
        ([f"--code {args.code}"] if args.code else []) + ([f"--out {args.out}"] if args.out else []))
    load_after = os.getloadavg()
    lines = [
        "# Fixed costs of a run: imports, stages, the time after sampling, peak memory",
        "",
        f"Made by: `{command}`",
        f"Date: {started:%Y-%m-%d %H:%M %Z}. Machine: {cpu_name()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
        + (f"; code from {args.code}" if args.code else f"; code at {git_commit()}") + ".",
        f"Load averages (1, 5, 15 min): {fmt_load(load_before)} before, {fmt_load(load_after)} after"
        " (other work was running on the machine where these exceed the idle machine's ~0: every wall time here is"
        " inflated by it, and the ratios less so).",
        "",
        "## The goals, as ratios (at most 1 meets the goal)",
        "",
        "| goal | ratio | measured |",
        "|---|---|---|",
        *[f"| {what} | {value:.2f} | {detail} |" for what, value, detail in goals],
        "",
        "## Imports (fresh processes, seconds)",
        "",
        "| what | seconds |",
        "|---|---|",
        *[f"| `{label}` | {imports[label]:.2f} (median of {', '.join('%.2f' % t for t in spread[label])}) |"
          for label in imports],
        *[f"| `import {name}` after torch and MLflow (late: bayesx/diagnostics/lazy.py) | {late[name]:.2f} |"
          for name in LATE],
        "",
        "## Each run's stages (seconds; both densities already compiled)",
        "",
        "NUTS at its defaults (300 warm-up iterations with a Laplace start, 1000 draws, 4 chains), one run each after",
        "a first run that filled the compile cache. The record's stages (`diagnostics`, `summary`, `plots`, `files`)",
        "are parts of `record_time_s`; `method_time_s` holds `compile_time_s`, warm-up and sampling.",
        "",
        *stage_rows(runs),
        "",
        f"Memory: draws {n_chains} x {m.get('draws_per_chain', 1000):.0f} x {DIM} float64 = {draws_gb:.3f} GB, data"
        f" {data_bytes / 1024**2:.1f} MB, the interpreter with what a run loads {interpreter:.3f} GB.",
        "",
    ]
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    print(text)
    return 0


def fmt_load(load: tuple[float, float, float]) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
