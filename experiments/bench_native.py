"""Benchmark: one leapfrog step on logistic regression, native (C) kernel against PyTorch.

For each data set of Deep MCMC Table 1 that is on this machine, times a 50-step trajectory of
four chains, side by side:

    HMC      the posterior in R^D (A = X, diagonal metric)
    latent   AE-HMC's latent chain in R^d, d about D/10 (A = X B with a random decoder B, dense
             kinetic matrix), the form AE-HMC samples on with a linear auto-encoder

each with the PyTorch path (BAYESX_NATIVE=0) and the native kernel, and reports microseconds per
leapfrog step, the native speed-up, and the ratio HMC / latent per step for each backend (the
per-step ceiling of AE-HMC's sampling speed-up). The median of --repeats timings is reported.
A row named ``data:saturated`` starts the chains far out (HMC positions x 400, latent x 2000),
where about three quarters of the logits exceed 708 in magnitude and exp(-|l|) would leave the
normal range: a chain among near-certain predictions. The kernel floors the argument there so
that its vector exp stays on the fast path.

    python experiments/bench_native.py                  # -> results/bench_native.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import torch

from bayesx.cli.config import compose
from bayesx.errors import BayesxError
from bayesx.kernels import latent_hmc as latent
from bayesx.kernels.integrators import PhaseState, leapfrog_trajectory
from bayesx.kernels.metric import make_metric
from bayesx.native import logistic as native
from bayesx.nn.autoencoder import AutoEncoder, initialize
from bayesx.runner import build
from bayesx.diagnostics.timing import median_seconds

ROWS = ("digits", "digits:saturated", "synthetic", "mnist01")
SPREAD = {"": (0.05, 0.05), "saturated": (400.0, 2000.0)}  # scale of the starting positions: HMC, latent
STEPS, CHAINS = 50, 4


def build_target(data_name: str):
    cfg = compose([f"data={data_name}", "model=logreg", "device.dtype=float64"])
    return build(cfg.model, "model", data=build(cfg.data, "data"), device="cpu", dtype=torch.float64)


def with_backend(native_on: bool, fn):
    saved = os.environ.get("BAYESX_NATIVE")
    os.environ["BAYESX_NATIVE"] = "1" if native_on else "0"
    try:
        return fn()
    finally:
        if saved is None:
            os.environ.pop("BAYESX_NATIVE")
        else:
            os.environ["BAYESX_NATIVE"] = saved


def hmc_trajectory(target, gen, spread: float):
    q = spread * torch.randn(CHAINS, target.dim, generator=gen, dtype=torch.float64)
    p = torch.randn(CHAINS, target.dim, generator=gen, dtype=torch.float64)
    lp, grad = target.log_prob_and_grad(q)
    metric = make_metric(0.5 + torch.rand(target.dim, generator=gen, dtype=torch.float64))
    state = PhaseState(q, p, lp, grad)
    return lambda: leapfrog_trajectory(state, 1e-3, STEPS, metric, target)


def latent_trajectory(target, gen, spread: float):
    d = max(1, round(target.dim / 10))
    ae = AutoEncoder(target.dim, d, "linear")
    initialize(ae, gen)
    ae.requires_grad_(False)
    space = latent.LatentSpace(target, ae, torch.zeros(target.dim, dtype=torch.float64),
                               torch.ones(target.dim, dtype=torch.float64))
    z = spread * torch.randn(CHAINS, d, generator=gen, dtype=torch.float64)
    p = torch.randn(CHAINS, d, generator=gen, dtype=torch.float64)
    potential, grad = space.potential_and_grad(z)
    return space.restricted.density_form(), lambda: latent.latent_leapfrog(space, z, p, 1e-3, STEPS, potential,
                                                                            grad)


def bench_row(row_name: str, repeats: int) -> dict:
    data_name, _, variant = row_name.partition(":")
    if variant not in SPREAD:
        raise SystemExit(f"bench_native: unknown row variant '{variant}' in '{row_name}'; use data or data:saturated")
    target = build_target(data_name)
    gen = torch.Generator().manual_seed(0)
    hmc_spread, latent_spread = SPREAD[variant]
    hmc = hmc_trajectory(target, gen, hmc_spread)
    latent_form, lat = latent_trajectory(target, gen, latent_spread)
    per_step = 1e6 / STEPS
    row = {"data": row_name, "D": target.dim, "d": latent_form.design_t.shape[0], "n": int(target.x_train.shape[0]),
           "threads": native.kernel_threads(latent_form.design_t.dtype, CHAINS)}
    for backend, on in (("torch", False), ("native", True)):
        row[f"hmc_{backend}"] = with_backend(on, lambda: median_seconds(hmc, repeats)) * per_step
        row[f"latent_{backend}"] = with_backend(on, lambda: median_seconds(lat, repeats)) * per_step
    return row


def write(rows: list[dict], skipped: dict[str, str], args, path: Path) -> None:
    lines = ["# bench_native: one leapfrog step on logistic regression, native (C) kernel vs PyTorch", "",
             f"Command: `python experiments/bench_native.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} torch threads, float64, "
             f"{CHAINS} chains, {STEPS}-step trajectories, median of {args.repeats}.", "",
             "Microseconds per leapfrog step (all chains). HMC runs on R^D with a diagonal metric; latent is "
             "AE-HMC's chain on R^d with a linear decoder (d about D/10). 'HMC / latent' is the per-step cost "
             "ratio: the ceiling of AE-HMC's sampling speed-up before per-iteration overheads. 'native threads' is how "
             "many OpenMP threads one native call splits the chains over: torch's thread count, at most one per "
             "chain.", "",
             "| data | n | D | d | native threads | HMC torch | HMC native | native speed-up | latent torch | latent native | "
             "native speed-up | HMC / latent, torch | HMC / latent, native |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['data']} | {r['n']} | {r['D']} | {r['d']} | {r['threads']} | {r['hmc_torch']:.1f} | {r['hmc_native']:.1f} | "
            f"{r['hmc_torch'] / r['hmc_native']:.2f} | {r['latent_torch']:.1f} | {r['latent_native']:.1f} | "
            f"{r['latent_torch'] / r['latent_native']:.2f} | {r['hmc_torch'] / r['latent_torch']:.2f} | "
            f"{r['hmc_native'] / r['latent_native']:.2f} |")
    for name, why in skipped.items():
        lines.append(f"| {name} | not run: {why} | | | | | | | | | | | |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; one native call splits its chains over as many")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "results" / "bench_native.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not native.available():
        raise SystemExit("bench_native: the native kernels are not available here (no C compiler, or BAYESX_NATIVE=0)")
    rows, skipped = [], {}
    for name in args.rows.split(","):
        try:
            rows.append(bench_row(name, args.repeats))
        except BayesxError as exc:
            skipped[name] = str(exc)
            continue
        r = rows[-1]
        print(f"{name}: HMC {r['hmc_torch']:.1f} -> {r['hmc_native']:.1f} us/step, "
              f"latent {r['latent_torch']:.1f} -> {r['latent_native']:.1f} us/step", flush=True)
    write(rows, skipped, args, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
