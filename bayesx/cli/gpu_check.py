"""The GPU check: every method family and the main models, from the command line, on CUDA and on the CPU.

``make check-gpu`` (``python -m bayesx.cli.gpu_check``) runs each case of :data:`CASES` twice as a
``bayesx run`` subprocess, once with ``device=cuda`` (float32) and once with ``device=cpu``
(float64), each logging to a temporary MLflow SQLite store, and asks whether the two runs describe
the same posterior (or, for a trained VAE, the same model quality) within Monte Carlo error. It
writes ``results/gpu_check.md``: the machine, the torch version, every command, the timings on both
devices and each comparison with its statistic and limit. Without a CUDA device it prints one line
saying so and exits 0. ``--device cpu`` runs the whole check with a CPU run (seed 1) in place of the
CUDA one: the comparison's control, where the two runs differ only in their random numbers.

The comparisons (the two runs' random numbers differ, so they can only agree in distribution):

* draws (MCMC, particles, a fitted q): for every coordinate i, the posterior mean's difference
  over its Monte Carlo standard error, z_i = |m_a - m_b| / sqrt(mcse_a^2 + mcse_b^2 + (c s_i)^2),
  and the same for the posterior sd, with the MCSE of the mean and of the sd from ArviZ's ESS (the
  sd's by the delta method; Vehtari et al. 2021, "Rank-normalization, folding, and localization");
  s_i is the pooled posterior sd and c an allowance for methods whose draws depend on a fit as well as on Monte Carlo
  (a flow, a particle system; c = 0 for MCMC, which is exact). The check passes when every z_i is
  below the Bonferroni critical value for 2 x dim two-sided tests at family-wise level alpha
  (default 0.01): one false alarm in a hundred checks, whatever the dimension.
* a scalar with standard errors (an importance-sampled log evidence +- its delta-method SE; an ELBO
  whose SE is taken as log_evidence_se, which is sd(w) / (sqrt(n) mean w) and bounds sd(log w) /
  sqrt(n) from above for log-normal weights): z = |a - b| / sqrt(se_a^2 + se_b^2 + allowance^2),
  against the same critical value.
* a trained model's score (the VAE's test ELBO and importance-sampled NLL): the relative difference
  |a - b| / |b| against a stated tolerance (training noise of a short fit, not Monte Carlo error).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path("results") / "gpu_check.md"
EXPERIMENT = "gpu_check"
ALPHA = 0.01


# --- the cases -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One short run of a method on a model, compared across devices.

    kind          draws | approximation | trainer: what is compared (see the module docstring)
    overrides     the ``bayesx run`` overrides, without device, tracking, seed and run name
    sd_allowance  c: the part of a posterior sd that two good fits may differ by in a mean or sd
    evidence_allowance  nats that two importance-sampled log evidences may differ by beyond their SEs
    elbo_allowance      nats that two fits' ELBOs may differ by beyond their SEs (the fits' KL(q || p) differ)
    rel_tolerance trainer: the relative difference allowed in test ELBO and NLL
    """

    name: str
    kind: str
    overrides: tuple[str, ...]
    sd_allowance: float = 0.0
    evidence_allowance: float = 0.0
    elbo_allowance: float = 0.0
    rel_tolerance: float = 0.0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # the runs start in their own store's folder
LOGREG = ("model=logreg", "data=digits")  # 64 coefficients, 2 classes: seconds per run, converges quickly
# The slowest first, so that cases running side by side (--jobs) finish together.
CASES: tuple[Case, ...] = (
    Case("logreg-nuts-1024", "draws", (*LOGREG, "method=nuts", "n_chains=1024", "method.num_warmup=100",
                                       "method.num_draws=20")),
    # 300 warm-up iterations failed the CPU-vs-CPU control at 1024 chains x 20 draws (max |z| 4.03 > 3.95); 800 pass it
    Case("logreg-chees-1024", "draws", (*LOGREG, "method=chees", "n_chains=1024", "method.init=laplace",
                                        "method.num_warmup=800", "method.num_draws=20")),
    Case("logreg-nuts-4", "draws", (*LOGREG, "method=nuts", "n_chains=4", "method.num_warmup=200",
                                    "method.num_draws=200")),
    Case("logreg-smc", "draws", (*LOGREG, "method=smc", "method.n_particles=1000", "method.n_steps=5"),
         sd_allowance=0.2),
    Case("elliptic-dense-pcn", "draws", ("model=elliptic", "model.mesh=10", "model.solver=dense", "method=pcn",
                                         "n_chains=8", "method.num_warmup=200", "method.num_draws=200")),
    Case("logreg-nuts-64", "draws", (*LOGREG, "method=nuts", "n_chains=64", "method.num_warmup=150",
                                     "method.num_draws=100")),
    Case("logreg-chees-64", "draws", (*LOGREG, "method=chees", "n_chains=64", "method.init=laplace",
                                      "method.num_warmup=300", "method.num_draws=100")),
    Case("logreg-chees-4", "draws", (*LOGREG, "method=chees", "n_chains=4", "method.init=laplace",
                                     "method.num_warmup=500", "method.num_draws=500")),
    Case("gaussian-flowvi", "approximation", ("model=gaussian", "model.dim=10", "model.kind=scaled",
                                              "model.condition=10", "method=flowvi", "method.iterations=3000",
                                              "method.num_draws=2000"),
         sd_allowance=0.1, evidence_allowance=0.02, elbo_allowance=0.1),
    Case("betabinomial-flowvi", "approximation", ("model=betabinomial", "method=flowvi", "method.iterations=3000",
                                                  "method.num_draws=2000"),
         sd_allowance=0.1, evidence_allowance=0.02, elbo_allowance=0.1),
    # the user's own posterior: a posteriordb density and a model=custom file, NUTS with its defaults
    Case("posteriordb-nuts", "draws", ("model=posteriordb", "model.name=eight_schools_noncentered", "method=nuts",
                                       "n_chains=4", "method.num_warmup=500", "method.num_draws=500")),
    Case("custom-nuts", "draws", ("model=custom", f"model.log_density={EXAMPLES / 'poisson_linnerud.py'}:log_density",
                                  "model.dim=4", "method=nuts", "n_chains=4", "method.num_warmup=300", "method.num_draws=300")),
    Case("vae-mnist", "trainer", ("model=vae", "method=vae", "method.epochs=2", "data.n_train=4000",
                                  "data.n_test=1000", "method.eval.k=100", "method.eval.n_test=500"),
         rel_tolerance=0.03),
)
COMMON = ("progress=false", "plots.n_coords=0", "reference.enabled=false", f"experiment_name={EXPERIMENT}")


def case_by_name(name: str) -> Case:
    for case in CASES:
        if case.name == name:
            return case
    raise SystemExit(f"bayesx gpu check: unknown case '{name}'; the cases are {', '.join(c.name for c in CASES)}")


# --- comparisons -----------------------------------------------------------------------------------
@dataclass
class Comparison:
    """The verdict on one pair: passed, the worst statistic against its limit, and a line saying what."""

    passed: bool
    statistic: float
    limit: float
    detail: str


def bonferroni_z(n_tests: int, alpha: float = ALPHA) -> float:
    """The two-sided critical |z| for n_tests tests at family-wise level alpha (Bonferroni)."""
    from scipy.stats import norm

    return float(norm.isf(alpha / (2 * max(1, n_tests))))


def draw_moments(draws: np.ndarray) -> dict[str, np.ndarray]:
    """Per coordinate of draws (chains, draws, dim): mean, sd and their Monte Carlo standard errors.

    mcse_mean = sd / sqrt(ESS(x)); mcse_sd by the delta method on s^2 = mean(y), y = (x - mean)^2:
    sd(s^2) = sqrt(var(y) / ESS(y)) and mcse_sd = sd(s^2) / (2 sd). ESS is ArviZ's (method "mean").
    """
    from bayesx.diagnostics.convergence import ess_per_coordinate

    x = np.asarray(draws, dtype=np.float64)
    x = x.reshape(x.shape[0], x.shape[1], -1)
    flat = x.reshape(-1, x.shape[-1])
    mean, sd = flat.mean(0), flat.std(0, ddof=1)
    squares = (x - mean) ** 2
    sd_of_var = np.sqrt(squares.reshape(-1, x.shape[-1]).var(0, ddof=1) / ess_per_coordinate(squares, "mean"))
    return {"mean": mean, "sd": sd, "mcse_mean": sd / np.sqrt(ess_per_coordinate(x, "mean")),
            "mcse_sd": sd_of_var / (2 * sd)}


def compare_draws(a: np.ndarray, b: np.ndarray, sd_allowance: float = 0.0, alpha: float = ALPHA) -> Comparison:
    """Same posterior? Every coordinate's mean and sd within Monte Carlo error (module docstring)."""
    ma, mb = draw_moments(a), draw_moments(b)
    if ma["mean"].shape != mb["mean"].shape:
        return Comparison(False, float("inf"), 0.0, f"dimensions differ: {ma['mean'].size} and {mb['mean'].size}")
    scale = np.sqrt(0.5 * (ma["sd"] ** 2 + mb["sd"] ** 2))
    extra = (sd_allowance * scale) ** 2
    z_mean = np.abs(ma["mean"] - mb["mean"]) / np.sqrt(ma["mcse_mean"] ** 2 + mb["mcse_mean"] ** 2 + extra)
    z_sd = np.abs(ma["sd"] - mb["sd"]) / np.sqrt(ma["mcse_sd"] ** 2 + mb["mcse_sd"] ** 2 + extra)
    limit = bonferroni_z(2 * z_mean.size, alpha)
    worst_mean, worst_sd = int(np.nanargmax(z_mean)), int(np.nanargmax(z_sd))
    statistic = float(max(z_mean[worst_mean], z_sd[worst_sd]))
    finite = bool(np.all(np.isfinite(z_mean)) and np.all(np.isfinite(z_sd)))
    allowance = f" + {sd_allowance:g} sd" if sd_allowance else ""
    detail = (f"{z_mean.size} coords; max |z| of means {z_mean[worst_mean]:.2f} (coord {worst_mean}), of sds "
              f"{z_sd[worst_sd]:.2f} (coord {worst_sd}); MCSE{allowance}")
    return Comparison(finite and statistic <= limit, statistic, limit, detail)


def compare_scalar(name: str, a: float, se_a: float, b: float, se_b: float, allowance: float = 0.0,
                   n_tests: int = 1, alpha: float = ALPHA) -> Comparison:
    """Same value? |a - b| / sqrt(se_a^2 + se_b^2 + allowance^2) against the Bonferroni limit."""
    denominator = float(np.sqrt(se_a ** 2 + se_b ** 2 + allowance ** 2))
    z = abs(a - b) / denominator if denominator > 0 else (0.0 if a == b else float("inf"))
    limit = bonferroni_z(n_tests, alpha)
    ok = bool(np.isfinite(a) and np.isfinite(b) and z <= limit)
    return Comparison(ok, z, limit, f"{name} {a:.4g} vs {b:.4g} (se {se_a:.2g}, {se_b:.2g}, allowance {allowance:g})")


def compare_relative(name: str, a: float, b: float, tolerance: float) -> Comparison:
    """Same score? |a - b| / |b| within the tolerance (for trained models)."""
    rel = abs(a - b) / abs(b) if b else float("inf")
    ok = bool(np.isfinite(a) and np.isfinite(b) and rel <= tolerance)
    return Comparison(ok, rel, tolerance, f"{name} {a:.2f} vs {b:.2f}")


def combine(comparisons: list[Comparison]) -> Comparison:
    """All must pass; the worst by statistic / limit is reported, every detail kept."""
    worst = max(comparisons, key=lambda c: c.statistic / c.limit if c.limit else float("inf"))
    return Comparison(all(c.passed for c in comparisons), worst.statistic, worst.limit,
                      "; ".join(c.detail for c in comparisons))


def compare_runs(case: Case, a: CaseRun, b: CaseRun, alpha: float = ALPHA) -> Comparison:
    """The comparison the case's kind calls for, of two finished runs."""
    if case.kind == "trainer":
        return combine([compare_relative(k, a.metrics[k], b.metrics[k], case.rel_tolerance)
                        for k in ("test_elbo", "test_nll") if k in a.metrics and k in b.metrics])
    out = [compare_draws(a.draws, b.draws, case.sd_allowance, alpha)]
    if case.kind == "approximation":
        ma, mb = a.metrics, b.metrics
        for key, allowance in (("log_evidence", case.evidence_allowance), ("elbo_final", case.elbo_allowance)):
            out.append(compare_scalar(key, ma[key], ma["log_evidence_se"], mb[key], mb["log_evidence_se"], allowance,
                                      2, alpha))
    return combine(out)


# --- running the CLI -------------------------------------------------------------------------------
@dataclass
class CaseRun:
    """One ``bayesx run`` subprocess: its command, exit status, wall time, and what its run recorded."""

    case: str
    device: str
    command: list[str]
    returncode: int | None = None
    wall_s: float = float("nan")
    run_id: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    draws: np.ndarray | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.run_id is not None


def command_for(case: Case, device: str, seed: int, store: Path, threads: int | None) -> list[str]:
    argv = [sys.executable, "-m", "bayesx.cli.commands", "run", *case.overrides, f"device={device}", f"seed={seed}",
            f"tracking.uri=sqlite:///{store / 'mlflow.db'}", f"run_name={case.name}-{device}-seed{seed}", *COMMON]
    if threads:
        argv.append(f"device.num_threads={threads}")
    return argv


def run_cli(case: Case, device: str, seed: int, store: Path, timeout_s: float, threads: int | None) -> CaseRun:
    """Run the case as a subprocess in ``store`` (its working directory, data cache and SQLite store)."""
    store.mkdir(parents=True, exist_ok=True)
    argv = command_for(case, device, seed, store, threads)
    record = CaseRun(case.name, device, argv)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}",
           "BAYESX_DATA_DIR": str(store / "data")}
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=store, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        record.wall_s = time.perf_counter() - start
        record.error = f"timed out after {timeout_s:.0f} s"
        return record
    record.wall_s = time.perf_counter() - start
    record.returncode = proc.returncode
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()][-3:]
        record.error = " / ".join(tail)[-600:] or f"exit status {proc.returncode}"
        return record
    load_run(record, f"sqlite:///{store / 'mlflow.db'}", store / "artifacts" / f"{case.name}-{device}-{seed}")
    return record


def load_run(record: CaseRun, uri: str, scratch: Path, run_name: str | None = None) -> CaseRun:
    """Fill the record from the store: the run (by its name), its metrics and its draws (draws.nc)."""
    from bayesx.store.tracking import experiment_runs, run_artifact

    name = run_name or f"{record.case}-{record.device}-seed{seed_of(record.command)}"
    runs = experiment_runs(uri, EXPERIMENT, f"tags.mlflow.runName = '{name}'")
    if not runs:
        record.error = f"no run named {name} in the store"
        return record
    run = runs[0]
    if run.info.status != "FINISHED":
        record.error = f"run {name} ended {run.info.status}"
        return record
    record.run_id = run.info.run_id
    record.metrics = dict(run.data.metrics)
    draws = run_artifact(uri, run.info.run_id, "draws.nc", _mkdir(scratch))
    if draws is not None:
        record.draws = read_draws(str(draws))
    return record


def seed_of(argv: list[str]) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith("seed="))


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def read_draws(path: str) -> np.ndarray:
    """The posterior draws of a draws.nc, (chains, draws, dim)."""
    import arviz as az

    posterior = az.from_netcdf(path).posterior
    parts = [posterior[var].values for var in posterior.data_vars]  # one vector, or one variable per parameter
    return np.concatenate([x.reshape(x.shape[0], x.shape[1], -1) for x in parts], -1)


# --- the check -------------------------------------------------------------------------------------
@dataclass
class PairResult:
    case: Case
    a: CaseRun   # the device under test
    b: CaseRun   # the CPU reference
    comparison: Comparison | None


def run_pair(case: Case, device: str, root: Path, timeout_s: float, threads: tuple[int, int],
             concurrent: bool) -> PairResult:
    """The case on ``device`` (seed 0; seed 1 when the device is the CPU too) and on the CPU (seed 0)."""
    seed_a = 1 if device == "cpu" else 0
    jobs = {"a": (device, seed_a, root / f"{device}-seed{seed_a}", threads[0]),
            "b": ("cpu", 0, root / "cpu-seed0", threads[1])}
    records: dict[str, CaseRun] = {}

    def work(key):
        dev, seed, store, n = jobs[key]
        records[key] = run_cli(case, dev, seed, store, timeout_s, n)

    if concurrent:
        workers = [threading.Thread(target=work, args=(k,)) for k in jobs]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    else:
        for key in jobs:
            work(key)
    a, b = records["a"], records["b"]
    comparison = None
    if a.ok and b.ok:
        try:
            comparison = compare_runs(case, a, b)
        except Exception as exc:  # a missing metric or draws: reported in the table, not a traceback
            comparison = Comparison(False, float("nan"), float("nan"), f"comparison failed: {exc!r}"[:300])
    return PairResult(case, a, b, comparison)


def machine_lines(device: str) -> list[str]:
    import torch

    lines = [f"- host: {platform.node()} ({platform.machine()}, {os.cpu_count()} CPU cores), "
             f"{platform.system()} {platform.release()}",
             f"- Python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda})"]
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        lines.append(f"- GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs")
    return lines


INFERENCE_TIME = ("sampling_time_s", "fit_time_s", "train_time_s")


def inference_time(record: CaseRun) -> str:
    for key in INFERENCE_TIME:
        if key in record.metrics:
            return f"{record.metrics[key]:.1f}"
    return "-"


def fmt_s(value: float) -> str:
    return f"{value:.1f}" if np.isfinite(value) else "-"


def report(results: list[PairResult], device: str, args, elapsed_s: float, skipped: list[str]) -> str:
    """results/gpu_check.md: verdicts and timings, the machine, and every command."""
    n_pass = sum(1 for r in results if r.comparison and r.comparison.passed)
    label = "CUDA" if device.startswith("cuda") else f"{device} (seed 1)"
    mode = ("side by side" if args.concurrent else "one after the other") + (
        f", {args.jobs} cases at a time (timings measured with that load on the machine)" if args.jobs > 1 else "")
    lines = [
        "# GPU check: each method family from the command line on CUDA and on the CPU",
        "",
        f"Command: `{shlex.join(['python', '-m', 'bayesx.cli.gpu_check', *args.argv])}`",
        f"Result: {n_pass} of {len(results)} cases agree across devices"
        + (f"; not run (time budget): {', '.join(skipped)}" if skipped else "") + f"; {elapsed_s / 60:.1f} min in all.",
        "",
        *machine_lines(device),
        f"- device under test `device={device}` (its default dtype: float32 on CUDA), reference `device=cpu` "
        f"(float64); both seed 0 (a CPU-vs-CPU control uses seed 1), each run a `bayesx run` subprocess "
        f"logging to its own temporary SQLite MLflow store; the runs of a case ran {mode}"
        + (f", the CPU run with device.num_threads={args.threads[1]}, the other with {args.threads[0]}"
           if args.threads[0] else "") + ".",
        "- Comparison (bayesx/cli/gpu_check.py): posterior means and sds per coordinate within Monte Carlo error "
        f"(MCSE from ArviZ ESS; plus c x sd for fitted approximations), max |z| against the Bonferroni limit at "
        f"family-wise alpha {ALPHA}; evidences and ELBOs within their SEs (+ allowance); the VAE's test ELBO "
        "and NLL within a relative tolerance. Wall s: the whole subprocess (imports, CUDA start, data, "
        "inference, diagnostics, MLflow); inference s: sampling / fit / training time as the run recorded it.",
        "",
        f"| case | kind | {label} wall s | CPU wall s | {label} inference s | CPU inference s | CPU / {label} "
        f"(inference) | statistic | limit | agree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ta, tb = inference_time(r.a), inference_time(r.b)
        speed = f"{float(tb) / float(ta):.2f}" if ta != "-" and tb != "-" and float(ta) > 0 else "-"
        c = r.comparison
        verdict = ("yes" if c.passed else "**no**") if c else "**not compared**"
        stat = f"{c.statistic:.3g}" if c else "-"
        limit = f"{c.limit:.3g}" if c else "-"
        lines.append(f"| {r.case.name} | {r.case.kind} | {fmt_s(r.a.wall_s)} | {fmt_s(r.b.wall_s)} | {ta} | {tb} | "
                     f"{speed} | {stat} | {limit} | {verdict} |")
    lines += ["", "## Details", ""]
    for r in results:
        c = r.comparison
        lines.append(f"- **{r.case.name}**: " + (c.detail if c else "not compared")
                     + "".join(f"; {rec.device} run failed: {rec.error}" for rec in (r.a, r.b) if not rec.ok))
    lines += ["", "## Commands", "",
              "Each as run (the interpreter, then `bayesx run`'s overrides; `tracking.uri` points at the pair's "
              "temporary store):", ""]
    for r in results:
        for rec in (r.a, r.b):
            shown = ["bayesx", *rec.command[3:]]
            lines.append(f"    {shlex.join(shown)}")
    return "\n".join(lines) + "\n"


def write_report(results: list[PairResult], args, elapsed_s: float, skipped: list[str]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(results, args.device, args, elapsed_s, skipped))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bayesx.cli.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda",
                        help="the device under test (cuda, cuda:1; cpu: a CPU-vs-CPU control)")
    parser.add_argument("--only", nargs="+", metavar="CASE",
                        help=f"run these cases: {', '.join(c.name for c in CASES)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the report (default results/gpu_check.md)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take (default 300)")
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds for the whole check: a case that would start later is listed as not run")
    parser.add_argument("--sequential", dest="concurrent", action="store_false",
                        help="run a case's two runs one after the other (default: side by side)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="cases run at the same time (default 2: the whole check in about 5 min on an H100 host)")
    parser.add_argument("--threads", type=int, nargs=2, default=None, metavar=("DEVICE", "CPU"),
                        help="device.num_threads of the device-under-test run and of the CPU run")
    parser.add_argument("--note", default="", help="a provenance note (e.g. the commit), shown in the report's command")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.threads is None:  # side by side: the CUDA run needs few host threads, the CPU run gets the rest
        cores = (os.cpu_count() or 2) // max(1, args.jobs)
        args.threads = (2, max(1, cores - 2)) if args.concurrent and cores > 3 else (0, 0)
    return args


def cuda_missing(device: str) -> str | None:
    """Why the check cannot run on this machine, or None."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return (f"bayesx gpu check: skipped, torch {torch.__version__} sees no CUDA device on this machine; "
                f"run `make check-gpu` where a GPU is")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    reason = cuda_missing(args.device)
    if reason:
        print(reason)
        return 0
    cases = [case_by_name(n) for n in args.only] if args.only else list(CASES)
    start = time.perf_counter()
    results, skipped, pending, lock = [], [], list(cases), threading.Lock()

    def worker(tmp: Path):
        while True:
            with lock:
                if not pending:
                    return
                case = pending.pop(0)
                if time.perf_counter() - start > args.budget:
                    skipped.append(case.name)
                    continue
            print(f"[gpu check] {case.name} ...", flush=True)
            pair = run_pair(case, args.device, tmp / case.name, args.timeout, tuple(args.threads), args.concurrent)
            c = pair.comparison
            print(f"[gpu check] {case.name}: wall {fmt_s(pair.a.wall_s)} s on {args.device}, {fmt_s(pair.b.wall_s)} s "
                  f"on cpu; " + (f"{'agree' if c.passed else 'DIFFER'} ({c.detail})" if c else
                                 f"not compared: {pair.a.error or pair.b.error}"), flush=True)
            with lock:
                results.append(pair)
                results.sort(key=lambda r: cases.index(r.case))
                write_report(results, args, time.perf_counter() - start, skipped)  # a check cut short keeps what ran

    with tempfile.TemporaryDirectory(prefix="bayesx-gpu-check-") as tmp:
        workers = [threading.Thread(target=worker, args=(Path(tmp),)) for _ in range(max(1, args.jobs))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    write_report(results, args, time.perf_counter() - start, skipped)
    print(f"[gpu check] wrote {args.out}")
    failed = [r.case.name for r in results if not (r.comparison and r.comparison.passed)]
    if failed:
        print(f"[gpu check] {len(failed)} case(s) failed: {', '.join(failed)}")
    return 1 if failed or skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
