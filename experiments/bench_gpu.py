"""Many-chain samplers on a GPU: bayesx's ChEES, MAMS and NUTS against BlackJAX's on the same device, in one call.

    make bench-gpu                                   # python experiments/bench_gpu.py --device cuda
    python experiments/bench_gpu.py --small --device cpu --out /tmp/bench_gpu.md   # the CPU test's sizes

For each posterior (a 500-d Bayesian logistic regression: ``model=logreg data=synthetic``, the Deep MCMC
synthetic set, 550 rows with an equicorrelated block; and German credit's stand-in, see below) and each chain
count (--chains, default 1,024 and 4,096), three samplers run on --device:

    ChEES   bayesx ``method=chees`` (Hoffman, Radul and Sountsov 2021: jittered HMC, step size and trajectory
            length tuned across the chains) against BlackJAX ``chees_adaptation`` + ``dynamic_hmc``
    MAMS    bayesx ``method=mams`` (Robnik, Cohn-Gordon and Seljak 2025) against BlackJAX
            ``adjusted_mclmc_dynamic`` tuned per chain by ``adjusted_mclmc_find_L_and_step_size`` (vmapped)
    NUTS    bayesx ``method=nuts`` against BlackJAX NUTS with window adaptation (vmapped), at the smallest
            chain count only (NUTS's trees do not run in lock-step: many chains wait for the longest)

bayesx runs as ``bayesx run ... device=<device>`` (the device's dtype: float32 on CUDA, the model's choice,
float32, for logistic regression on the CPU) and logs to an MLflow store; BlackJAX runs in this process
(experiments/peers.py) in float32 (--jax-dtype) on JAX's default device, which must be the same kind: a
GPU row whose JAX has no GPU backend is left empty with that reason. Every sampler warms up for --warmup and
keeps --draws transitions per chain; min-ESS/s is min bulk ESS (ArviZ) per second of total wall time
(compile and JIT included), grads/ESS counts warm-up gradients too.

German credit (Dua and Graff's UCI Statlog set, 1,000 x 24) is not in ``bayesx data``'s offline sets; the
second posterior is the real-data logistic regression it offers, ``data=digits`` (scikit-learn's digits 0
vs 1, 64 pixels, 288 training rows), and the table says so.

Without a CUDA device (``--device cuda``, the default), the file is still written: every row, every column,
the cells empty with the reason, so the table's shape is known before a GPU is lent; exit status 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (experiments/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "results" / "bench_gpu_samplers.md"
EXPERIMENT = "bench_gpu"
POSTERIORS = {  # name -> (bayesx overrides, the --small overrides)
    "logreg 500-d (synthetic)": (["model=logreg", "data=synthetic"],
                                 ["model=logreg", "data=synthetic", "data.n_features=20", "data.n_correlated=5"]),
    "German credit stand-in: digits 0 vs 1 (64-d)": (["model=logreg", "data=digits"], ["model=logreg", "data=digits"]),
}
SAMPLERS = {"ChEES": ("chees", "blackjax-chees"), "MAMS": ("mams", "blackjax-mams"), "NUTS": ("nuts", "blackjax-nuts")}
COLUMNS = ["posterior", "sampler", "chains", "bayesx min-ESS/s", "bayesx R-hat", "bayesx grads/ESS", "bayesx wall s",
           "BlackJAX min-ESS/s", "BlackJAX R-hat", "BlackJAX grads/ESS", "BlackJAX wall s", "bayesx / BlackJAX"]


@dataclass
class Cell:
    """One sampler's numbers, or why there are none."""

    rate: float | None = None
    rhat: float | None = None
    grads_per_ess: float | None = None
    wall: float | None = None
    reason: str = ""


def per_ess(ess: float | None, wall: float | None, grads: float) -> tuple[float | None, float | None]:
    """(min-ESS per second of wall time, gradients per min-ESS)."""
    if not ess:
        return None, None
    return (ess / wall if wall else None), (grads / ess if grads else None)


def bayesx_cell(overrides: list[str], method: str, chains: int, args, uri: str) -> Cell:
    """One ``bayesx run`` in a subprocess on ``args.device``; its numbers from the store."""
    from bayesx.store.tracking import experiment_runs

    lengths = [f"method.num_warmup={args.warmup}", f"method.num_draws={args.draws}"]
    name = f"bench_gpu-{method}-{chains}-{uuid.uuid4().hex[:8]}"  # finds this run in the store
    command = [sys.executable, "-m", "bayesx", "run", *overrides, f"method={method}", f"n_chains={chains}",
               f"run_name={name}",
               f"device={args.device}", *lengths, f"experiment_name={EXPERIMENT}", f"tracking.uri={uri}",
               "save_draws=false", "progress=false", "plots.n_coords=0", f"seed={args.seed}"]
    if method in ("nuts", "mams"):  # their run-length rules could draw on; the bench compares fixed lengths
        command.append("method.max_draws=null")
    print("$ " + shlex.join(command[3:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        print(done.stderr[-3000:], file=sys.stderr)
        return Cell(reason=f"bayesx failed: {last[:100]}")
    run = experiment_runs(uri, EXPERIMENT, f"tags.mlflow.runName = '{name}'")[0]
    metrics = run.data.metrics
    grads = metrics.get("n_grad_evals", 0.0) + metrics.get("n_grad_evals_warmup", 0.0)
    rate, cost = per_ess(metrics.get("ess_bulk_min"), metrics.get("wall_time_s"), grads)
    return Cell(rate, metrics.get("rhat_max"), cost, metrics.get("wall_time_s"))


def jax_platform() -> str:
    import jax

    return jax.devices()[0].platform  # cpu | gpu | tpu


def blackjax_cell(overrides: list[str], peer: str, chains: int, args) -> Cell:
    """The BlackJAX sampler on the same posterior, ``chains`` chains, on JAX's default device."""
    wanted = "cpu" if args.device == "cpu" else "gpu"
    try:
        found = jax_platform()
    except ImportError as exc:
        return Cell(reason=f"not installed ({exc.name}; pip install -e '.[bench]')")
    if found != wanted:
        return Cell(reason=f"JAX's device is {found}, not {wanted} (install jax[cuda] on the GPU machine)")
    post = peers.posterior_from(overrides)
    run_args = argparse.Namespace(chains=chains, warmup=args.warmup, draws=args.draws, seed=args.seed,
                                  jax_dtype=args.jax_dtype)
    try:
        out = peers.PEERS[peer](post, run_args)
    except ImportError as exc:
        return Cell(reason=f"not installed ({exc.name}; pip install -e '.[bench]')")
    from bayesx.diagnostics.convergence import summarize

    summary = summarize(out.draws)
    rate, cost = per_ess(summary.get("ess_bulk_min"), out.wall, peers.total_grads(out.grads, out.grads_warmup))
    return Cell(rate, summary.get("rhat_max"), cost, out.wall)


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def cells_text(cell: Cell) -> list[str]:
    if cell.reason:
        return [f"not run: {cell.reason}", "", "", ""]
    return [fmt(cell.rate), fmt(cell.rhat), fmt(cell.grads_per_ess), fmt(cell.wall)]


def table(rows: list[tuple[str, str, int, Cell, Cell]]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for posterior, sampler, chains, ours, theirs in rows:
        ratio = ours.rate / theirs.rate if ours.rate and theirs.rate else None
        lines.append("| " + " | ".join([posterior, sampler, str(chains), *cells_text(ours), *cells_text(theirs),
                                        fmt(ratio)]) + " |")
    return lines


def device_available(device: str) -> bool:
    import torch

    return device == "cpu" or (device.startswith("cuda") and torch.cuda.is_available())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (the bench) or cpu (its small test)")
    parser.add_argument("--small", action="store_true",
                        help="CPU-test sizes: 16 chains, the 20-d synthetic regression, 100 + 100 transitions")
    parser.add_argument("--chains", type=int, nargs="+", help="chain counts (default 1024 4096; --small: 16)")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--posteriors", nargs="+", default=list(POSTERIORS), choices=list(POSTERIORS))
    parser.add_argument("--warmup", type=int, help="warm-up transitions (default 500; --small: 100)")
    parser.add_argument("--draws", type=int, help="kept transitions per chain (default 200; --small: 100)")
    parser.add_argument("--jax-dtype", choices=["float32", "float64"], default="float32",
                        help="BlackJAX's precision (bayesx: the device's dtype, float32 for these models)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracking-uri", help="bayesx's store (default: a temporary SQLite file)")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    args.chains = args.chains or ([16] if args.small else [1024, 4096])
    args.warmup = args.warmup or (100 if args.small else 500)
    args.draws = args.draws or (100 if args.small else 200)
    uri = args.tracking_uri or f"sqlite:///{tempfile.mkdtemp(prefix='bench_gpu_')}/mlflow.db"
    available = device_available(args.device)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = []
    for posterior in args.posteriors:
        overrides = POSTERIORS[posterior][1 if args.small else 0]
        for sampler in args.samplers:
            method, peer = SAMPLERS[sampler]
            for chains in (args.chains[:1] if sampler == "NUTS" else args.chains):
                if not available:
                    empty = Cell(reason=f"no {args.device} device in this session")
                    rows.append((posterior, sampler, chains, empty, empty))
                    continue
                ours = bayesx_cell(overrides, method, chains, args, uri)
                theirs = blackjax_cell(overrides, peer, chains, args)
                rows.append((posterior, sampler, chains, ours, theirs))
                print(table(rows)[-1], flush=True)
    command = "python experiments/bench_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Many-chain samplers: bayesx against BlackJAX on one device",
        "",
        f"Command: `{command.strip()}` (`make bench-gpu`: `--device cuda`)",
        "",
        f"Run {started} on {platform.machine()}, {os.cpu_count()} cores, device `{args.device}`"
        + ("" if available else f" (**not available in this session: no GPU was lent, so every cell is empty**)")
        + f"; {args.warmup} warm-up + {args.draws} kept transitions per chain, seed {args.seed}; bayesx's store "
        f"`{uri}`, BlackJAX in {args.jax_dtype}.",
        "",
        "min-ESS/s: min bulk ESS over the coordinates per second of total wall time (bayesx's wall_time_s, its "
        "density compiled on first use; BlackJAX's jit included). grads/ESS: all gradients, warm-up included, "
        "per unit of min-ESS. German credit is not among `bayesx data`'s offline sets: its row is the real-data "
        "logistic regression bayesx offers, digits 0 vs 1 (64-d).",
        "",
        *table(rows),
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
