"""Where the time of one pCN iteration goes on the elliptic problem, side by side with the floor:
one sparse LU factorization and solve of the same saddle-point system.

    python experiments/bench_elliptic.py                     # meshes 20 and 40 -> results/bench_elliptic.md
    python experiments/bench_elliptic.py --meshes 40 --repeats 50

Contenders, per chain and in milliseconds (median of --repeats):
  assemble          k_q = exp(I u) and K.data = S k_q (the one-product assembly)
  factor + solve    SuperLU on the (N+1) x (N+1) system and one solve: the floor of any likelihood
  log-likelihood    assemble + factor + solve + observe (what pCN pays per proposal)
  gradient          log-likelihood plus the adjoint solve and the pull-back (what HMC pays per step)
  prior draw        xi = L z: one dense product per draw, or colored 64 iterations at a time, or by
                    circulant embedding (FFT; what the model's sample_prior does)
  pCN iteration     pcn.step on 4 chains (proposal, likelihood, accept), divided by 4
The goal (issue 4): pCN iteration <= 1.5 x (factor + solve) on the 40 x 40 mesh.

A second table times one pCN iteration of many chains in lock-step (--many-chains, default 4, 64,
256), whole seconds per iteration, with each solver: SuperLU per chain on the CPU (sparse), one
batched dense LU in torch on the CPU (mesh 20 and 4 chains only: O(N^3) per chain), and the same
dense LU on CUDA when a GPU is present (otherwise the column says so and stays empty).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np
import torch

from bayesx.kernels import pcn
from bayesx.targets.elliptic import EllipticInverse
from bayesx.diagnostics.timing import median_seconds


def median_ms(fn, repeats: int) -> float:
    return 1000.0 * median_seconds(fn, repeats)


def bench_mesh(mesh: int, repeats: int, chains: int) -> dict[str, float]:
    model = EllipticInverse(mesh=mesh)
    space = model.space
    gen = torch.Generator().manual_seed(0)
    q = model.sample_prior(chains, gen)
    u = q[0].numpy()
    k_q = space.coefficient_at_quadrature(u)
    out = {"dim": model.dim}
    out["assemble"] = median_ms(lambda: space.stiffness_values(space.coefficient_at_quadrature(u)), repeats)
    out["factor + solve"] = median_ms(lambda: space.factorize(u).solve(model.likelihood_level.rhs), repeats)
    out["matrix build (no factor)"] = median_ms(lambda: space.saddle_matrix(k_q), repeats)
    out["log-likelihood"] = median_ms(lambda: model.log_likelihood(q[:1]), repeats)
    out["gradient"] = median_ms(lambda: model.log_prob_and_grad(q[:1]), repeats)
    z = torch.randn(1, model.dim, generator=gen, dtype=torch.float64)
    out["prior draw (one product)"] = median_ms(lambda: model.prior.color(z), repeats)
    block = torch.randn(64 * chains, model.dim, generator=gen, dtype=torch.float64)
    out["prior draw (64-iteration blocks)"] = median_ms(lambda: model.prior.color(block), max(3, repeats // 10)) / (
        64 * chains)
    out["prior draw (circulant embedding, blocks)"] = median_ms(lambda: model.sample_prior(64 * chains, gen),
                                                                max(3, repeats // 10)) / (64 * chains)
    state = pcn.init(q, model)
    params = pcn.PCNParams(0.5, 64)
    holder = {"state": state}

    def one_iteration():
        holder["state"], _ = pcn.step(holder["state"], model, params, gen)

    out["pCN iteration"] = median_ms(one_iteration, repeats) / chains
    out["ratio"] = out["pCN iteration"] / out["factor + solve"]
    return out


def many_chains_seconds(model: EllipticInverse, chains: int, repeats: int) -> float | str:
    """Seconds of one pCN iteration of ``chains`` chains in lock-step (the median of ``repeats``)."""
    gen = torch.Generator(device=model.device).manual_seed(0)
    try:
        holder = {"state": pcn.init(model.sample_prior(chains, gen), model)}
        params = pcn.PCNParams(0.5, 64)

        def one_iteration():
            holder["state"], _ = pcn.step(holder["state"], model, params, gen)
            if model.device.type == "cuda":
                torch.cuda.synchronize()

        return median_seconds(one_iteration, repeats)
    except torch.OutOfMemoryError:
        return "out of memory"


def many_chains_table(meshes: list[int], counts: list[int], repeats: int) -> list[str]:
    cuda = torch.cuda.is_available()
    columns = [("sparse, CPU", "sparse", "cpu"), ("dense, CPU", "dense", "cpu"), ("dense, CUDA", "dense", "cuda")]
    lines = ["", "## Many chains in lock-step: seconds per pCN iteration (all chains)", "",
             "| mesh | chains | " + " | ".join(c[0] for c in columns) + " | sparse CPU, per chain (ms) |",
             "|---|---|" + "---|" * (len(columns) + 1)]
    for mesh in meshes:
        models = {}  # one model per solver and device, built when first needed
        for chains in counts:
            cells = []
            for _, solver, device in columns:
                if device == "cuda" and not cuda:
                    cells.append("no GPU")
                elif device == "cpu" and solver == "dense" and (mesh > 20 or chains > 4):
                    cells.append("not run (O(N^3) per chain)")
                else:
                    if (solver, device) not in models:
                        models[solver, device] = EllipticInverse(mesh=mesh, solver=solver, device=device)
                    value = many_chains_seconds(models[solver, device], chains, repeats)
                    cells.append(value if isinstance(value, str) else f"{value:.3f}")
            sparse = float(cells[0]) * 1000 / chains
            lines.append(f"| {mesh} | {chains} | " + " | ".join(cells) + f" | {sparse:.2f} |")
            print(lines[-1], flush=True)
    if not cuda:
        lines += ["", "No GPU was available to this run: the CUDA column is empty, not estimated."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--meshes", default="20,40")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--many-chains", default="4,64,256", help="chain counts of the lock-step table (empty: skip)")
    parser.add_argument("--many-repeats", type=int, default=3)
    parser.add_argument("--out", default="results/bench_elliptic.md")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    meshes = [int(m) for m in args.meshes.split(",")]
    results = {m: bench_mesh(m, args.repeats, args.chains) for m in meshes}
    keys = [k for k in results[meshes[0]] if k not in ("dim", "ratio")]
    lines = ["# Elliptic-PDE benchmark: one pCN iteration against one sparse factorization and solve", "",
             f"Command: `python experiments/bench_elliptic.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, numpy "
             f"{np.__version__}; median of {args.repeats} repeats, milliseconds per chain.", "",
             "| | " + " | ".join(f"mesh {m} ({results[m]['dim']} unknowns)" for m in meshes) + " |",
             "|---|" + "---|" * len(meshes)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{results[m][k]:.3f}" for m in meshes) + " |")
    lines.append("| **pCN iteration / (factor + solve)** | " + " | ".join(f"**{results[m]['ratio']:.2f}**"
                                                                       for m in meshes) + " |")
    lines += ["", "Goal: at most 1.5 on the 40 x 40 mesh."]
    counts = [int(c) for c in args.many_chains.split(",") if c]
    if counts:
        lines += many_chains_table(meshes, counts, args.many_repeats)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
