"""Reproduce the research journal's normalizing-flow experiments (sec. 3.5.2, Figures 32-34) on the
energy U1 of its eq. 235 (``model=density model.name=u1``), with bayesx's ``method=flowvi``.

1. Figure 32: samples of a planar flow at several epochs beside the true density.
2. Figure 33: the gap log Z - ELBO against the number of planar layers K in {2, 4, 8, 16, 32} (log Z
   by quadrature; AIS as a cross-check), with and without the annealing of Algorithm 6, and the CPU
   time per epoch against K. An epoch is 512 iterations of 512 draws, as in the journal.
3. Figure 34: the base N([4, 0], I) against N([4, 0], 10 I): the entropy-regularized Wasserstein
   (Sinkhorn) distance between 1024 flow draws and 1024 grid draws of the true density (POT), beside
   the distance between two independent grid samples (the floor), and the share of draws in each mode.

    python experiments/flows_u1.py           # -> results/flows_u1.md and flows_u1_*.png (about 10 minutes)
    python experiments/flows_u1.py --target u2 --out results/flows_u2.md    # the same on another 2-D energy
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from pathlib import Path

import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bayesx.diagnostics.transport import grid_sample, sinkhorn_distance  # noqa: E402
from bayesx.methods.base import RunInputs  # noqa: E402
from bayesx.methods.vi.ais import AIS  # noqa: E402
from bayesx.methods.vi.flowvi import FlowVI  # noqa: E402
from bayesx.errors import BayesxError  # noqa: E402
from bayesx.targets.toy import plane_density  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS_PER_EPOCH, BATCH = 512, 512
PUBLISHED_SINKHORN = {"I": 0.069, "10 I": 0.0087}


def fit(target, epochs: int, seed: int, **options):
    method = FlowVI(flow="planar", batch_size=BATCH, iterations=epochs * ITERATIONS_PER_EPOCH,
                    check_every=ITERATIONS_PER_EPOCH, num_draws=20000, **options)
    g = torch.Generator().manual_seed(seed)
    return method.infer(target, RunInputs(None, g, progress=False))


def density_grid(target, n: int = 200):
    axis = torch.linspace(-4.0, 4.0, n, dtype=torch.float64)
    gx, gy = torch.meshgrid(axis, axis, indexing="ij")
    log_p = target.log_prob(torch.stack([gx, gy], -1))
    return gx.numpy(), gy.numpy(), torch.exp(log_p - log_p.max()).numpy()


def scatter(ax, draws, title, grid):
    ax.contour(*grid, levels=6, colors="0.6", linewidths=0.6)
    ax.scatter(draws[:2000, 0], draws[:2000, 1], s=1, alpha=0.4)
    ax.set(xlim=(-4, 4), ylim=(-4, 4), aspect="equal", title=title)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="u1", help="a 2-D energy of model=density: u1 (default), u2, u3 or u4")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--layers", default="2,4,8,16,32")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "results" / "flows_u1.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = Path(args.out)
    try:
        target = plane_density(args.target, "experiments/flows_u1.py")
    except BayesxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log_z = target.log_normalizer()
    rate = 5.0 / (args.epochs * ITERATIONS_PER_EPOCH / 2)  # beta = 1 - e^-5 halfway through
    grid = density_grid(target)

    print("AIS cross-check ...", flush=True)
    ais = AIS(n_samples=4000, n_temps=200, n_steps=2, kernel="mh", step_size=0.5).infer(
        target, RunInputs(None, torch.Generator().manual_seed(args.seed), progress=False)).metrics

    rows = []
    for k in [int(v) for v in args.layers.split(",")]:
        for anneal in ("none", "exp"):
            print(f"K={k} anneal={anneal} ...", flush=True)
            result = fit(target, args.epochs, args.seed, n_layers=k, lr=args.lr, base="standard", anneal=anneal,
                         anneal_rate=rate)
            m = result.metrics
            rows.append(dict(k=k, anneal=anneal, elbo=m["elbo_final"], gap=log_z - m["elbo_final"],
                             log_ev=m["log_evidence"], se=m["log_evidence_se"], khat=m["psis_khat"],
                             epoch_s=result.timings["fit_time_s"] / args.epochs,
                             right=float((result.draws[0, :, 0] > 0).double().mean())))
            print(f"  {rows[-1]}", flush=True)

    print("Figure 32 snapshots ...", flush=True)
    k_snap = 16
    snapshots = sorted({1, 2, max(1, args.epochs // 2), args.epochs})
    fig, axes = plt.subplots(1, len(snapshots) + 1, figsize=(3.2 * (len(snapshots) + 1), 3.4))
    axes[0].contourf(*grid, levels=20, cmap="Blues")
    axes[0].set(xlim=(-4, 4), ylim=(-4, 4), aspect="equal", title="U1: exp(-U) (eq. 235)")
    for ax, epochs in zip(axes[1:], snapshots):
        draws = fit(target, epochs, args.seed, n_layers=k_snap, lr=args.lr, base="standard").draws[0].numpy()
        scatter(ax, draws, f"K={k_snap}, epoch {epochs}", grid)
    fig.tight_layout()
    fig.savefig(out.with_name("flows_u1_samples.png"), dpi=110)
    plt.close(fig)

    print("Figure 34 ...", flush=True)
    rng = np.random.default_rng(args.seed)

    def log_u1(points):
        return target.log_prob(torch.as_tensor(points)).numpy()

    truth = grid_sample(log_u1, (-4, 4, -4, 4), 1024, rng)
    floor = sinkhorn_distance(truth, grid_sample(log_u1, (-4, 4, -4, 4), 1024, rng))
    floor_raw = sinkhorn_distance(truth, grid_sample(log_u1, (-4, 4, -4, 4), 1024, rng), normalize_cost=False)
    bases = []
    fig, axes = plt.subplots(2, 2, figsize=(7, 6.8))
    for row, anneal in zip(axes, ("none", "exp")):
        for ax, (label, scale) in zip(row, (("I", 1.0), ("10 I", math.sqrt(10.0)))):
            result = fit(target, args.epochs, args.seed, n_layers=32, lr=args.lr, base="standard",
                         base_mean=[4.0, 0.0], base_scale=scale, anneal=anneal, anneal_rate=rate)
            draws = result.draws[0, :1024].numpy()
            bases.append(dict(label=label, anneal=anneal, d=sinkhorn_distance(draws, truth),
                              d_raw=sinkhorn_distance(draws, truth, normalize_cost=False),
                              right=float((result.draws[0, :, 0] > 0).double().mean()),
                              gap=log_z - result.metrics["elbo_final"]))
            scatter(ax, draws, f"N([4, 0], {label}), anneal={anneal}: d = {bases[-1]['d']:.3f}", grid)
            ax.title.set_fontsize(9)
            print(f"  {bases[-1]}", flush=True)
    fig.tight_layout()
    fig.savefig(out.with_name("flows_u1_base.png"), dpi=110)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for anneal, marker in (("none", "o"), ("exp", "s")):
        sel = [r for r in rows if r["anneal"] == anneal]
        left.plot([r["k"] for r in sel], [r["gap"] for r in sel], marker=marker, label=f"anneal={anneal}")
        right.plot([r["k"] for r in sel], [r["epoch_s"] for r in sel], marker=marker, label=f"CPU, anneal={anneal}")
    left.set(xscale="log", xlabel="K (planar layers)", ylabel="log Z - ELBO (nats)", title="variational gap")
    right.set(xscale="log", xlabel="K (planar layers)", ylabel="seconds per epoch", title="time per epoch (CPU)")
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(out.with_name("flows_u1_gap.png"), dpi=110)
    plt.close(fig)

    lines = ["# Planar flows on U1 (the research journal's sec. 3.5.2, Figures 32-34)", "",
             f"Command: `python experiments/flows_u1.py {' '.join(sys.argv[1:])}` on {platform.machine()}, 2 threads, "
             f"torch {torch.__version__}, Python {sys.version.split()[0]}, CPU only (no GPU here: the journal's "
             f"CPU-against-GPU timing is not reproduced).  ",
             f"Epoch: {ITERATIONS_PER_EPOCH} iterations of {BATCH} draws; {args.epochs} epochs; Adam lr {args.lr:g}; "
             f"base N(0, I) fixed; annealing beta_t = 1 - exp(-{rate:.3g} t) (1 - e^-5 halfway). ELBO: 20,000 draws "
             f"of the trained flow.  ",
             f"log Z: {log_z:.4f} by quadrature on [-4, 4]^2; AIS cross-check (4000 runs, 200 temperatures, 2 MH "
             f"moves): {ais['log_evidence']:.4f} +- {ais['log_evidence_se']:.4f}.", "",
             "## Figure 33: the gap against K, and time per epoch", "",
             "| K | anneal | ELBO | log Z - ELBO | IS log Z +- se | k-hat | share z1 > 0 | s per epoch |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['k']} | {r['anneal']} | {r['elbo']:.4f} | {r['gap']:.4f} | {r['log_ev']:.4f} +- {r['se']:.4f} | "
              f"{r['khat']:.2f} | {r['right']:.2f} | {r['epoch_s']:.2f} |" for r in rows]
    lines += ["", "## Figure 34: the base's spread", "",
              f"Sinkhorn distance (POT, regularization 0.01, uniform weights, Euclidean cost divided by its largest "
              f"entry) between 1024 draws of a 32-layer planar flow and 1024 grid draws of U1; the floor is the "
              f"distance between two independent grid samples: {floor:.4f} (unnormalized cost: {floor_raw:.4f}).", "",
              "| base | anneal | Sinkhorn d (ours) | published (no annealing) | unnormalized cost | share z1 > 0 | "
              "log Z - ELBO |", "|---|---|---|---|---|---|---|"]
    lines += [f"| N([4, 0], {b['label']}) | {b['anneal']} | {b['d']:.4f} | {PUBLISHED_SINKHORN[b['label']]} | "
              f"{b['d_raw']:.4f} | {b['right']:.2f} | {b['gap']:.4f} |" for b in bases]
    lines += ["", "Figures: `flows_u1_samples.png` (Figure 32), `flows_u1_gap.png` (Figure 33, CPU only), "
              "`flows_u1_base.png` (Figure 34)."]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
