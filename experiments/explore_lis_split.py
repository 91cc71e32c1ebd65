"""Exploratory: delayed-acceptance pCN with a likelihood-informed split instead of AE-pCN's PCA split.

Why: on mesh 40 the PCA directions of posterior pre-samples are the posterior's largest-variance
directions in whitened coordinates, which on this weakly informed problem are the prior-dominated
ones (method=dapcn proposal=ae accepts 78% of its independent latent draws and 31% of its
complement moves at the step cap). The likelihood-informed subspace (Cui, Martin, Marzouk, Solonen
and Spantini 2014) takes the opposite directions: the leading right singular vectors of the
whitened, noise-scaled Jacobian sigma^-1 J L of the sensor values (the Gauss-Newton Hessian of the
misfit is (J L)^T (J L) / sigma^2). Here J is taken once, at the prior mean (u = 0), row by row
with one adjoint solve per sensor; the subspace moves with a small fixed pCN step
(``--latent-step-size``), the complement by pCN with the adapted step (it reaches the cap: independent prior
draws). The kernel is method=dapcn's own (bayesx.kernels.dapcn.SubspaceProposal), so the chain is
exact for any choice of directions.

This is not yet a method option: the Jacobian comes from the likelihood level
(``ForwardLevel.sensor_jacobian``), which is not part of the target contract. The pCN baseline is read from the Table 2 runs of the same seeds
(``--pcn-json``), so run this on the same machine state as those.

    python experiments/explore_lis_split.py --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bayesx.diagnostics import convergence
from bayesx.kernels import dapcn
from bayesx.methods.mcmc.dapcn import DASampler
from bayesx.targets.elliptic import EllipticInverse

PCN_JSON = "results/deep_mcmc_table2_mesh40_coarse5{suffix}.json"


def informed_directions(model: EllipticInverse, rank: int) -> tuple[torch.Tensor, np.ndarray]:
    """L V_r (dim, rank): the leading right singular vectors V_r of sigma^-1 J L at u = 0, in the model's
    coordinates, and all singular values."""
    level = model.likelihood_level
    jacobian = level.sensor_jacobian(np.zeros(model.dim))  # d(O p)/du: one adjoint solve per sensor
    chol = model.prior_factor()
    whitened = torch.as_tensor(jacobian, dtype=chol.dtype) @ chol / level.noise_sd
    _, singular_values, vt = torch.linalg.svd(whitened, full_matrices=False)
    return chol @ vt[:rank].T, singular_values.numpy()


def run_seed(seed: int, args) -> dict:
    model = EllipticInverse(mesh=args.mesh)
    directions, singular_values = informed_directions(model, args.rank)
    proposal = dapcn.SubspaceProposal.from_directions(model.prior_factor(), directions)
    sampler = DASampler((args.coarse_mesh,), (args.subchain,), proposal, args.latent_step_size, True,
                        num_warmup=args.warmup, num_draws=args.draws)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    result = sampler.run(model, model.initial_point(args.chains, gen), gen, False)
    wall = time.perf_counter() - start
    evaluation = model.evaluate(result.draws, sample_stats=result.sample_stats)
    ess = convergence.quantity_ess(evaluation.quantities)
    sampling = result.timings["sampling_time_s"]
    suffix = "" if seed == 0 else f"_seed{seed}"
    pcn_rows = json.loads(Path(args.pcn_json.format(suffix=suffix)).read_text())
    pcn_row = next(r for r in pcn_rows if r["method"] == "pCN" and r["mesh"] == args.mesh)
    return {"seed": seed, "wall_s": wall, "sampling_time_s": sampling, "singular_values": singular_values[:5].tolist(),
            "ess_log_likelihood": ess["ess_log_likelihood"], "ess_field_min": ess["ess_field_min"],
            "ess_log_likelihood_per_s": ess["ess_log_likelihood"] / sampling,
            "ess_field_min_per_s": ess["ess_field_min"] / sampling,
            "pcn_ess_log_likelihood_per_s": pcn_row["ess_log_likelihood_per_s"],
            "pcn_ess_field_min_per_s": pcn_row["ess_field_min_per_s"],
            **{k: result.metrics.get(k) for k in ("first_stage_accept_rate", "fine_accept_rate", "step_size",
                                                  "fine_solves_per_iter")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--mesh", type=int, default=40)
    parser.add_argument("--coarse-mesh", type=int, default=5)
    parser.add_argument("--subchain", type=int, default=5)
    parser.add_argument("--rank", type=int, default=25, help="informed directions (25 sensors: at most 25 matter)")
    parser.add_argument("--latent-step-size", type=float, default=0.5)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--pcn-json", default=PCN_JSON, help="the Table 2 runs whose pCN rows are the baseline")
    parser.add_argument("--out", default="results/explore_lis_split.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [run_seed(int(s), args) for s in args.seeds.split(",")]
    for r in rows:
        print(f"seed {r['seed']}: {r['ess_log_likelihood_per_s']:.2f} log-lik ESS/s "
              f"({r['ess_log_likelihood_per_s'] / r['pcn_ess_log_likelihood_per_s']:.2f}x pCN)", flush=True)
    pooled = {key: sum(r[key] for r in rows) / sum(r[f"pcn_{key}"] for r in rows)
              for key in ("ess_log_likelihood_per_s", "ess_field_min_per_s")}
    lines = [f"# Exploratory: delayed acceptance with a likelihood-informed split (mesh {args.mesh})", "",
             f"Command: `python experiments/explore_lis_split.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, 1 thread, {args.chains} chains, float64. "
             f"Directions: the {args.rank} leading right singular vectors of sigma^-1 J L at u = 0 (singular values "
             f"{', '.join(f'{v:.2f}' for v in rows[0]['singular_values'])}, ...), moved with h = "
             f"{args.latent_step_size}; complement: adapted h. Coarse level {args.coarse_mesh} x {args.coarse_mesh}, "
             f"subchains of {args.subchain}, the adaptive error model, {args.warmup} warm-up + {args.draws} "
             "iterations per chain (no pre-sampling, no auto-encoder). pCN baseline: the pCN rows of "
             f"`{args.pcn_json.format(suffix='*')}` for the same seeds.", "",
             "| seed | sampling s | ESS log-lik | ESS/s log-lik (x pCN) | min ESS field | ESS/s field (x pCN) | "
             "first-stage acc. | fine acc. | h |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['sampling_time_s']:.1f} | {r['ess_log_likelihood']:.0f} | "
                     f"{r['ess_log_likelihood_per_s']:.2f} ({r['ess_log_likelihood_per_s'] / r['pcn_ess_log_likelihood_per_s']:.2f}x) | "
                     f"{r['ess_field_min']:.0f} | "
                     f"{r['ess_field_min_per_s']:.2f} ({r['ess_field_min_per_s'] / r['pcn_ess_field_min_per_s']:.2f}x) | "
                     f"{r['first_stage_accept_rate']:.2f} | {r['fine_accept_rate']:.2f} | {r['step_size']:.2f} |")
    lines += ["", f"Pooled over the seeds (mean ESS/s over pCN's mean): log-likelihood "
              f"**{pooled['ess_log_likelihood_per_s']:.2f}x**, field min **{pooled['ess_field_min_per_s']:.2f}x**."]
    out = Path(args.out)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
