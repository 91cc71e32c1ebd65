"""Every flow family on the four 2-D energies of Rezende and Mohamed (U1-U4, ``model=density``), with
and without the annealing of the research journal's Algorithm 6: a grid of draws beside the true
densities, and a table of the ELBO, the gap to log Z (quadrature) and the time.

Every family gets the same parameter budget (--budget, 270 by default; the base's 4 included): planar
and radial flows as many layers as the budget buys (5 and 4 parameters a layer in 2-D), the coupling
and autoregressive families 4 layers with the network width that comes closest. The table states each
flow's count. U2-U4 are zero off [-4, 4]^2, so their flows end with the squashing layer 4 tanh(z).

    python experiments/flows_families.py     # -> results/flows_families.md, flows_families.png (about 10 minutes)
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bayesx.methods.base import RunInputs  # noqa: E402
from bayesx.methods.vi.flowvi import FlowVI  # noqa: E402
from bayesx.nn.flows import FAMILIES, build_flow  # noqa: E402
from bayesx.errors import BayesxError  # noqa: E402
from bayesx.targets.toy import PLANE, plane_density  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def parameter_count(family: str, n_layers: int, hidden: int) -> int:
    one = torch.ones(2, dtype=torch.float64)
    flow = build_flow(family, 2, n_layers, hidden, 0 * one, one, True, torch.Generator().manual_seed(0))
    return sum(p.numel() for p in flow.parameters())


def size(family: str, budget: int) -> dict:
    """n_layers (and hidden) giving ``family`` the parameter count closest to ``budget``."""
    if family in ("planar", "radial"):
        per_layer = parameter_count(family, 2, 1) - parameter_count(family, 1, 1)
        base = parameter_count(family, 1, 1) - per_layer
        return dict(n_layers=max(1, round((budget - base) / per_layer)))
    hidden = min(range(2, 65), key=lambda h: abs(parameter_count(family, 4, h) - budget))
    return dict(n_layers=4, hidden=hidden)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=270, help="parameters of every flow (base included)")
    parser.add_argument("--energies", default=",".join(PLANE), help=f"2-D energies, from {', '.join(PLANE)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "results" / "flows_families.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = Path(args.out)
    rate = 5.0 / (args.iterations / 2)
    try:
        targets = {name: plane_density(name, "experiments/flows_families.py") for name in args.energies.split(",")}
    except BayesxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sizes = {family: size(family, args.budget) for family in FAMILIES}
    rows, draws = [], {}
    for energy, target in targets.items():
        for family in FAMILIES:
            for anneal in ("none", "exp"):
                method = FlowVI(flow=family, batch_size=256, iterations=args.iterations, lr=3e-3, anneal=anneal,
                                anneal_rate=rate, num_draws=4000, **sizes[family])
                g = torch.Generator().manual_seed(args.seed)
                result = method.infer(target, RunInputs(None, g, progress=False))
                m = result.metrics
                if result.error is not None:
                    rows.append((energy, family, anneal, None, result.error))
                    continue
                gap = target.log_normalizer() - m["elbo_final"]
                rows.append((energy, family, anneal, dict(elbo=m["elbo_final"], gap=gap, khat=m["psis_khat"],
                                                          params=m["n_flow_parameters"],
                                                          s=result.timings["fit_time_s"]), None))
                if anneal == "none":
                    draws[energy, family] = result.draws[0, :2000].numpy()
                print(energy, family, anneal, f"gap {gap:.3f}", flush=True)

    fig, axes = plt.subplots(len(targets), len(FAMILIES) + 1, figsize=(2.2 * (len(FAMILIES) + 1), 2.2 * len(targets)),
                             squeeze=False)
    axis = torch.linspace(-4.0, 4.0, 200, dtype=torch.float64)
    gx, gy = torch.meshgrid(axis, axis, indexing="ij")
    for row, (energy, target) in zip(axes, targets.items()):
        log_p = target.log_prob(torch.stack([gx, gy], -1))
        row[0].contourf(gx.numpy(), gy.numpy(), torch.exp(log_p - log_p.max()).numpy(), levels=20, cmap="Blues")
        row[0].set_title(f"{energy}: exp(-U)", fontsize=9)
        for ax, family in zip(row[1:], FAMILIES):
            if (energy, family) in draws:
                d = draws[energy, family]
                ax.scatter(d[:, 0], d[:, 1], s=0.5, alpha=0.3)
            ax.set_title(family, fontsize=9)
        for ax in row:
            ax.set(xlim=(-4, 4), ylim=(-4, 4), aspect="equal", xticks=[], yticks=[])
    fig.tight_layout()
    fig.savefig(out.with_name("flows_families.png"), dpi=100)
    plt.close(fig)

    lines = ["# Every flow family on U1-U4, with and without annealing", "",
             f"Command: `python experiments/flows_families.py {' '.join(sys.argv[1:])}` on {platform.machine()}, 2 "
             f"threads, torch {torch.__version__}, Python {sys.version.split()[0]}.  ",
             f"Each fit: {args.iterations} Adam iterations (lr 0.003) of 256 draws from a learned diagonal base; "
             f"every flow about {args.budget} parameters: "
             + ", ".join(f"{f} K={v['n_layers']}" + (f" width {v['hidden']}" if "hidden" in v else "")
                         for f, v in sizes.items())
             + "; annealing beta_t = 1 - "
             f"exp(-{rate:.3g} t). log Z - ELBO against the quadrature log Z (4000 draws). Draws in "
             f"`flows_families.png` (no annealing).", "",
             "| energy | flow | anneal | parameters | ELBO | log Z - ELBO | k-hat | s |", "|---|---|---|---|---|---|---|---|"]
    for energy, family, anneal, r, error in rows:
        if r is None:
            lines.append(f"| {energy} | {family} | {anneal} | - | - | - | - | failed: {error} |")
        else:
            lines.append(f"| {energy} | {family} | {anneal} | {r['params']:.0f} | {r['elbo']:.3f} | {r['gap']:.3f} | "
                         f"{r['khat']:.2f} | {r['s']:.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
