"""Reproduce Table 2 of "Deep Markov Chain Monte Carlo" (Deep MCMC sec. 4.2): pCN vs AE-pCN on the
elliptic-PDE inverse problem, plus an HMC row with the adjoint gradient (not in the paper).

For each mesh (20 x 20 -> 1681 unknowns, 40 x 40 -> 6561), on the same posterior (model=elliptic):
  pCN     the product's pCN: num_warmup iterations adapting h to acceptance 0.25, then num_draws
  AE-pCN  the product's AE-pCN: pCN pre-samples (the warm-up both pay, plus 1000 draws), a PCA
          auto-encoder to latent size 441 (the P2 field of a 10 x 10 mesh, as published), a latent
          warm-up, then the same num_draws iterations as pCN
  HMC     (mesh 20 only) the product's HMC in the whitened parameterization u = L v, adjoint gradient
The paper's speed-up compares the same number of iterations; the whole-pipeline speed-up adds
warm-up, pre-sampling and training. Each run also reports how much of its time went into the PDE
solves (the log-likelihood), which bounds what any proposal can save.

    python experiments/deep_mcmc_table2.py                      # -> results/deep_mcmc_table2.md
    python experiments/deep_mcmc_table2.py --meshes 20 --draws 500
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from bayesx.diagnostics import convergence
from bayesx.methods.mcmc.aepcn import AEPCN
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.pcn import PCN
from bayesx.targets.elliptic import EllipticInverse

PUBLISHED = {  # Deep MCMC Table 2: seconds and log-likelihood, same number of iterations
    20: {"pCN": (4368.7, -7.47), "AE-pCN": (1008.6, -7.906), "speed_up": 4.3},
    40: {"pCN": (15719.7, -7.46), "AE-pCN": (1038.3, -7.915), "speed_up": 15.1},
}


class SolveTimer:
    """Counts the seconds a target spends in its PDE solves (log_likelihood / log_prob_and_grad)."""

    def __init__(self, target):
        self.target, self.seconds = target, 0.0
        for name in ("log_likelihood", "log_prob_and_grad"):
            setattr(self, name, self._timed(getattr(target, name)))

    def _timed(self, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return wrapper

    def __getattr__(self, name):
        return getattr(self.target, name)


def summarize(name: str, model: EllipticInverse, result, seconds: float, solve_s: float, extra: dict) -> dict:
    evaluation = model.evaluate(result.draws, sample_stats=result.sample_stats)
    ev = {**evaluation.metrics, **convergence.quantity_ess(evaluation.quantities)}
    t = result.timings
    if "presample_time_s" in t:  # AE-pCN: pre-sampling (with its warm-up), training, latent warm-up
        before = t["presample_time_s"] + t["train_time_s"] + t["latent_warmup_time_s"]
    else:
        before = t.get("warmup_time_s", 0.0)
    return {"method": name, "mesh": model.mesh, "dim": model.dim, "n_draws": int(result.draws.shape[1]),
            "sampling_time_s": t["sampling_time_s"], "pipeline_time_s": before + t["sampling_time_s"],
            "time_per_iter_s": result.metrics.get("time_per_iter_s"), "accept_rate": result.metrics.get("accept_rate"),
            "step_size": result.metrics.get("step_size"), "wall_s": seconds, "solve_share": solve_s / seconds,
            **ev, **{k: result.metrics[k] for k in ("latent_dim", "recon_err") if k in result.metrics},
            **{k: v for k, v in t.items()}, **extra}


def run_mesh(mesh: int, args) -> list[dict]:
    model = EllipticInverse(mesh=mesh)
    rows = []
    gen = torch.Generator().manual_seed(args.seed)
    timed = SolveTimer(model)
    start = time.perf_counter()
    res = PCN(num_warmup=args.warmup, num_draws=args.draws).run(timed, model.initial_point(args.chains, gen), gen,
                                                                 args.progress)
    rows.append(summarize("pCN", model, res, time.perf_counter() - start, timed.seconds, {}))
    print(f"  mesh {mesh} pCN {rows[-1]['wall_s']:.1f}s", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    timed = SolveTimer(model)
    start = time.perf_counter()
    method = AEPCN(latent_dim=args.latent_dim, num_warmup=args.latent_warmup, num_draws=args.draws,
                   presample={"num_warmup": args.warmup, "num_draws": args.presamples})
    res = method.run(timed, model.initial_point(args.chains, gen), gen, args.progress)
    rows.append(summarize("AE-pCN", model, res, time.perf_counter() - start, timed.seconds, {}))
    print(f"  mesh {mesh} AE-pCN {rows[-1]['wall_s']:.1f}s", flush=True)

    if mesh in args.hmc_meshes:
        whitened = EllipticInverse(mesh=mesh, whiten=True)
        gen = torch.Generator().manual_seed(args.seed)
        timed = SolveTimer(whitened)
        start = time.perf_counter()
        hmc = HMC(num_steps=args.hmc_steps, num_warmup=args.hmc_warmup, num_draws=args.hmc_draws, init="prior",
                  mass="diag")
        res = hmc.run(timed, whitened.initial_point(args.chains, gen), gen, args.progress)
        rows.append(summarize(f"HMC (whitened, {args.hmc_steps} steps)", whitened, res, time.perf_counter() - start,
                              timed.seconds, {"n_grad_evals": res.metrics.get("n_grad_evals")}))
        print(f"  mesh {mesh} HMC {rows[-1]['wall_s']:.1f}s", flush=True)
    return rows


def fmt(v, spec=".3g"):
    return "" if v is None else format(v, spec)


def write_markdown(rows: list[dict], args, path: Path, seconds: float) -> None:
    lines = ["# Deep MCMC Table 2: pCN vs AE-pCN on the elliptic-PDE inverse problem", "",
             f"Command: `python experiments/deep_mcmc_table2.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
             f"{args.chains} chains, float64, SuperLU per chain. Total time {seconds / 60:.1f} min.", "",
             f"pCN: {args.warmup} warm-up iterations (h adapted to acceptance 0.25, capped at 4) + {args.draws} per "
             f"chain. AE-pCN: the same pCN warm-up, {args.presamples} pre-samples, PCA auto-encoder to "
             f"{args.latent_dim}, {args.latent_warmup} latent warm-up iterations, {args.draws} iterations per chain. "
             "Speed-up (as published) = pCN sampling time / AE-pCN sampling time for the same iterations. "
             "log-likelihood: mean over retained draws of -1/2 sum((y - O p)/sigma)^2. solve share: the fraction "
             "of the run's wall time spent in PDE solves.", "",
             "| mesh | parameters | method | latent | sampling s (published) | pipeline s | s / iteration | speed-up "
             "(published) | log-likelihood (published) | acceptance | ESS log-lik | min ESS field | field rel. L2 err "
             "| solve share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by_mesh: dict[int, dict[str, dict]] = {}
    for r in rows:
        by_mesh.setdefault(r["mesh"], {})[r["method"]] = r
    for r in rows:
        pub = PUBLISHED.get(r["mesh"], {}).get(r["method"])
        speed = ""
        if r["method"] == "AE-pCN" and "pCN" in by_mesh[r["mesh"]]:
            ratio = by_mesh[r["mesh"]]["pCN"]["sampling_time_s"] / r["sampling_time_s"]
            published = PUBLISHED.get(r["mesh"], {}).get("speed_up")
            speed = f"{ratio:.2f}" + (f" ({published})" if published else "")
        sampling = f"{r['sampling_time_s']:.1f}" + (f" ({pub[0]:,})" if pub else "")
        loglik = f"{r['log_likelihood']:.2f}" + (f" ({pub[1]})" if pub else "")
        lines.append(f"| {r['mesh']} | {r['dim']} | {r['method']} | {fmt(r.get('latent_dim'), '.0f')} | {sampling} | "
                     f"{r['pipeline_time_s']:.1f} | {fmt(r['time_per_iter_s'], '.4f')} | {speed} | {loglik} | "
                     f"{fmt(r['accept_rate'], '.2f')} | {fmt(r.get('ess_log_likelihood'), '.0f')} | "
                     f"{fmt(r.get('ess_field_min'), '.0f')} | {fmt(r.get('field_rel_err'), '.2f')} | "
                     f"{r['solve_share']:.0%} |")
    lines += ["", "Stage times (s):", "", "| mesh | method | warm-up / pre-sampling | train | latent warm-up | sampling |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mesh']} | {r['method']} | {r.get('presample_time_s', r.get('warmup_time_s', 0)):.1f} | "
                     f"{fmt(r.get('train_time_s'), '.1f')} | {fmt(r.get('latent_warmup_time_s'), '.1f')} | "
                     f"{r['sampling_time_s']:.1f} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--meshes", default="20,40")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--presamples", type=int, default=1000, help="AE-pCN pre-samples, total over chains")
    parser.add_argument("--latent-dim", type=int, default=441)
    parser.add_argument("--latent-warmup", type=int, default=200)
    parser.add_argument("--hmc-meshes", default="20", help="meshes with an HMC row (empty for none)")
    parser.add_argument("--hmc-steps", type=int, default=10)
    parser.add_argument("--hmc-warmup", type=int, default=300)
    parser.add_argument("--hmc-draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--out", default="results/deep_mcmc_table2.md")
    args = parser.parse_args()
    args.hmc_meshes = [int(m) for m in args.hmc_meshes.split(",") if m]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start = time.perf_counter()
    rows = []
    for mesh in [int(m) for m in args.meshes.split(",")]:
        print(f"mesh {mesh}:", flush=True)
        rows += run_mesh(mesh, args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(rows, args, out, time.perf_counter() - start)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
