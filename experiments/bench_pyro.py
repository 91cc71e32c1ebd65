"""Pyro models run by bayesx NUTS against Pyro's own NUTS on the same model, both at their defaults.

Each model is a Pyro model in ``examples/`` (eight schools, the three-component mixture, stochastic volatility with
150 latent states). Each contender is timed as a user runs it, as a whole command in a fresh process:

- bayesx: ``bayesx run --json model=pyro model.fn=... method=nuts`` (4 chains, 300 warm-up + 1000 draws and its
  run-length rules; the density compiled from the Pyro trace), its wall time from the process's start;
- Pyro: ``python -c '<MCMC(NUTS(model)).run()>'`` (``pyro.infer.NUTS`` defaults: diagonal mass matrix, step size
  adapted, tree depth 10, no JIT) with ``--pyro-chains`` chains of ``--pyro-draws`` warm-up and draws each, run one
  after another in the one process (``num_chains=1`` per call: Pyro's multiprocess chains re-import torch per
  chain), its wall time from the process's start.

min ESS (bulk, ArviZ) over every latent number of both contenders' draws, per second of each command; the draws are
checked against each other per coordinate within Monte Carlo error (bayesx.cli.gpu_check.compare_draws: means and
sds, Bonferroni over coordinates). The goal (issue 57) is 10x Pyro's min-ESS/s.

    python experiments/bench_pyro.py --out results/bench_pyro.md
    python experiments/bench_pyro.py --models eight_schools mixture --pyro-draws 500
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from _header import header, publish  # noqa: E402
from _runs import bayesx_run  # noqa: E402

MODELS = {  # name -> (model.fn, data file or None)
    "eight_schools": ("examples/eight_schools_pyro.py:model", None),
    "mixture": ("examples/mixture_pyro.py:model", "examples/mixture_data.npz"),
    "sv": ("examples/sv_pyro.py:model", "examples/sv_returns.npz"),
}

PYRO_SCRIPT = r"""
import importlib.util, json, sys, time
import numpy as np, torch, pyro
from pyro.infer import MCMC, NUTS
torch.set_default_dtype(torch.float64)
path, name = sys.argv[1].split(":")
spec = importlib.util.spec_from_file_location("user_model", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kwargs = {k: torch.as_tensor(v) for k, v in np.load(sys.argv[2]).items()} if sys.argv[2] != "-" else {}
chains, draws, seed = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
samples = []
for chain in range(chains):
    pyro.set_rng_seed(seed + chain)
    mcmc = MCMC(NUTS(getattr(module, name)), num_samples=draws, warmup_steps=draws, disable_progbar=True)
    mcmc.run(**kwargs)
    samples.append({k: v.reshape(draws, -1).numpy() for k, v in mcmc.get_samples().items()})
np.savez(sys.argv[6], **{k: np.stack([s[k] for s in samples]) for k in samples[0]})  # by site: (chains, draws, n)
"""


def run_pyro(fn: str, data: str | None, chains: int, draws: int, seed: int, out: Path,
             sites: list[str]) -> tuple[float, np.ndarray]:
    """Pyro's NUTS as a whole command; its draws (chains, draws, numbers) with the sites in ``sites``' order (Pyro
    returns them sorted by name)."""
    path, name = fn.split(":")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", PYRO_SCRIPT, f"{ROOT / path}:{name}", str(ROOT / data) if data else "-",
                    str(chains), str(draws), str(seed), str(out)], check=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    with np.load(out) as by_site:
        return seconds, np.concatenate([by_site[site] for site in sites], -1)


def run_bayesx(fn: str, data: str | None, seed: int, store: Path) -> tuple[float, np.ndarray, dict, list[str]]:
    import arviz as az
    from bayesx.store.tracking import run_artifact, search_runs

    uri = f"sqlite:///{store}/mlflow.db"
    overrides = ["model=pyro", f"model.fn={fn}", *([f"model.data_file={data}"] if data else []), "method=nuts",
                 f"seed={seed}", f"tracking.uri={uri}", f"tracking.artifact_root={store}/artifacts", "progress=false"]
    started = time.perf_counter()
    launched = bayesx_run(overrides)
    seconds = time.perf_counter() - started
    if not launched.ok:
        raise RuntimeError(f"bayesx run failed: {launched.failure()}")
    run = launched.run
    path = run_artifact(uri, run["run_id"], "draws.nc", str(store))
    posterior = az.from_netcdf(path).posterior
    table = search_runs(uri)  # the run's kernels tag (bayesx run --json gives its identity tags only)
    mine = table[table["run_id"] == run["run_id"]]
    run["kernels"] = str(mine["tags.kernels"].iloc[0]) if "tags.kernels" in mine and len(mine) else "?"
    sites = list(posterior.data_vars)
    arrays = [posterior[name].values.reshape(*posterior[name].shape[:2], -1) for name in sites]
    return seconds, np.concatenate(arrays, -1), run, sites


def min_ess(draws: np.ndarray) -> float:
    from bayesx.diagnostics.convergence import ess_per_coordinate

    return float(np.min(ess_per_coordinate(draws, "bulk")))


def main(argv=None) -> int:
    from bayesx.cli.gpu_check import compare_draws

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--pyro-chains", type=int, default=4)
    parser.add_argument("--pyro-draws", type=int, default=1000, help="Pyro's warm-up and draws per chain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            fn, data = MODELS[name]
            ours_s, ours, run, sites = run_bayesx(fn, data, args.seed, Path(tmp))
            theirs_s, theirs = run_pyro(fn, data, args.pyro_chains, args.pyro_draws, args.seed,
                                        Path(tmp) / f"{name}.npz", sites)
            ours_ess, theirs_ess = min_ess(ours), min_ess(theirs)
            verdict = compare_draws(ours, theirs)
            rows.append((name, ours.shape[-1], ours_ess / ours_s, ours_s, run["kernels"],
                         theirs_ess / theirs_s, theirs_s, (ours_ess / ours_s) / (theirs_ess / theirs_s),
                         "agree" if verdict.passed else "DIFFER", verdict.detail))
            print(rows[-1], flush=True)
    command = f"python experiments/bench_pyro.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    lines = [
        *header("Pyro models: bayesx NUTS against Pyro's NUTS, both at their defaults", command, load_before),
        f"bayesx: `bayesx run model=pyro model.fn=... method=nuts` (4 chains, its defaults). Pyro: `MCMC(NUTS(model), "
        f"num_samples={args.pyro_draws}, warmup_steps={args.pyro_draws})`, {args.pyro_chains} chains one after another. "
        "Both timed as whole commands (imports, compile or tracing included); min bulk ESS over every latent number. "
        "The draws check compares both contenders' means and sds within Monte Carlo error.",
        "",
        "| model | latent numbers | bayesx min-ESS/s | bayesx command (s) | bayesx kernels | Pyro min-ESS/s | "
        "Pyro command (s) | ratio | draws | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]} | {r[5]:.2f} | {r[6]:.1f} | {r[7]:.1f}x | {r[8]} | "
          f"{r[9]} |" for r in rows),
        "",
    ]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
