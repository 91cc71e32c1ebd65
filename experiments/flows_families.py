"""Every flow family on the four 2-D energies of Rezende and Mohamed (U1-U4, ``model=density``), with
and without the annealing of the research journal's Algorithm 6: a grid of draws beside the true
densities, and a table of the ELBO, the gap to log Z (quadrature) and the time.

Sizes are comparable, not equal: planar and radial layers have 5 and 4 parameters each, so they get
32 layers (about 160 parameters); the coupling and autoregressive families get 4 layers with
8-unit networks (about 500). The table states each flow's parameter count. U2-U4 are zero off
[-4, 4]^2, so their flows end with the squashing layer 4 tanh(z).

    python experiments/flows_families.py     # -> results/flows_families.md, flows_families.png (about 6 minutes)
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
from bayesx.nn.flows import FAMILIES  # noqa: E402
from bayesx.targets.toy import Density  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENERGIES = ("u1", "u2", "u3", "u4")


def size(family: str) -> dict:
    return dict(n_layers=32) if family in ("planar", "radial") else dict(n_layers=4, hidden=8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "results" / "flows_families.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = Path(args.out)
    rate = 5.0 / (args.iterations / 2)
    rows, draws = [], {}
    for energy in ENERGIES:
        target = Density(name=energy)
        for family in FAMILIES:
            for anneal in ("none", "exp"):
                method = FlowVI(flow=family, batch_size=256, iterations=args.iterations, lr=3e-3, anneal=anneal,
                                anneal_rate=rate, num_draws=4000, **size(family))
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

    fig, axes = plt.subplots(len(ENERGIES), len(FAMILIES) + 1, figsize=(2.2 * (len(FAMILIES) + 1), 2.2 * len(ENERGIES)))
    axis = torch.linspace(-4.0, 4.0, 200, dtype=torch.float64)
    gx, gy = torch.meshgrid(axis, axis, indexing="ij")
    for row, energy in zip(axes, ENERGIES):
        log_p = Density(name=energy).log_prob(torch.stack([gx, gy], -1))
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
             f"planar and radial 32 layers, the others 4 layers with 8-unit networks; annealing beta_t = 1 - "
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
