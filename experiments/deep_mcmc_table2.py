"""Reproduce Table 2 of "Deep Markov Chain Monte Carlo" (Deep MCMC sec. 4.2) three ways: pCN and AE-pCN
on the exact posterior, on the coarse-likelihood posterior the paper's timings suggest it ran, and by
delayed acceptance, exact and faster; plus an HMC row with the adjoint gradient (not in the paper).

For each mesh (20 x 20 -> 1681 unknowns, 40 x 40 -> 6561), same number of iterations per row:
  pCN                 exact: num_warmup iterations adapting h to acceptance 0.25, then num_draws
  AE-pCN              exact likelihood, latent proposals: pCN pre-samples (the warm-up both pay, plus
                      1000 draws), a PCA auto-encoder to latent size 441 (the P2 field of a 10 x 10 mesh,
                      as published), a latent warm-up, then num_draws; it samples the posterior
                      restricted to the PCA subspace
  pCN / AE-pCN (coarse likelihood)
                      the same with model.likelihood_mesh=10: APPROXIMATE (another posterior); the
                      variant whose timings match the paper's
  DA-pCN / DA-AE-pCN  method=dapcn: proposals screened on coarse meshes (--da-meshes, subchains of
                      --da-subchain), exact; DA-AE-pCN moves the PCA directions with h=4 and the
                      complement with the adapted h; both with the adaptive error model (the default),
                      and again without it (dapcn_plain, daaepcn_plain)
  DA-pCN (LIS split)  method=dapcn proposal=lis: the same block moves, split along the likelihood-informed
                      subspace (--informed-dim directions of the misfit's Gauss-Newton Hessian at the prior
                      mean, h = --informed-step-size) instead of the PCA one; no pre-sampling; exact
  HMC                 (mesh 20 only) whitened u = L v, adjoint gradient
The paper's speed-up compares sampling times for the same iterations; we add the ratio of
log-likelihood ESS per second and of the field's min ESS per second against exact pCN, which is what a
user buys. Each run also reports how much of its time went into PDE solves (all levels).

    python experiments/deep_mcmc_table2.py                      # -> results/deep_mcmc_table2.md
    python experiments/deep_mcmc_table2.py --meshes 20 --draws 500 --rows pcn,dapcn
    python experiments/deep_mcmc_table2.py --pool a.json,b.json,c.json --out pooled.md   # runs seeded differently
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
from bayesx.methods.mcmc.dapcn import DAPCN
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.pcn import PCN
from bayesx.targets.elliptic import EllipticInverse
from bayesx.targets.elliptic.levels import SMALL_SYSTEM_DOFS

PUBLISHED = {  # Deep MCMC Table 2: seconds and log-likelihood, same number of iterations
    20: {"pCN": (4368.7, -7.47), "AE-pCN": (1008.6, -7.906), "speed_up": 4.3},
    40: {"pCN": (15719.7, -7.46), "AE-pCN": (1038.3, -7.915), "speed_up": 15.1},
}
COARSE_LIKELIHOOD_MESH = 10  # the latent size 441 of the paper is the P2 field of this mesh
ROWS = ("pcn", "aepcn", "pcn_coarse", "aepcn_coarse", "dapcn", "daaepcn", "dalis", "dapcn_plain", "daaepcn_plain",
        "hmc")


class SolveTimer:
    """Counts the seconds a target spends in its PDE solves (log_likelihood / log_prob_and_grad)."""

    def __init__(self, target):
        self.target, self.seconds = target, 0.0
        for name in ("log_likelihood", "log_prob_and_grad", "level_log_likelihood", "level_predictions",
                     "level_predictions_at"):
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


def summarize(name: str, model: EllipticInverse, result, seconds: float, solve_s: float, exact: EllipticInverse) -> dict:
    evaluation = model.evaluate(result.draws, sample_stats=result.sample_stats)
    ev = {**evaluation.metrics, **convergence.quantity_ess(evaluation.quantities)}
    t = result.timings
    if "presample_time_s" in t:  # AE rows: pre-sampling (with its warm-up), training, latent warm-up
        before = t["presample_time_s"] + t["train_time_s"] + t["latent_warmup_time_s"]
    else:
        before = t.get("warmup_time_s", 0.0)
    row = {"method": name, "mesh": model.mesh, "dim": model.dim, "n_draws": int(result.draws.shape[1]),
           "approximate": model.approximate, "sampling_time_s": t["sampling_time_s"],
           "pipeline_time_s": before + t["sampling_time_s"], "wall_s": seconds, "solve_share": solve_s / seconds,
           **{k: result.metrics.get(k) for k in ("time_per_iter_s", "accept_rate", "step_size", "latent_dim",
                                                 "recon_err", "first_stage_accept_rate", "fine_accept_rate",
                                                 "fine_solves_per_iter", "coarse_solves_per_iter", "n_grad_evals")},
           **ev, **dict(t)}
    if model.approximate:  # the draws' log-likelihood on the model's own mesh, for comparison with exact rows
        row["exact_log_likelihood"] = exact.evaluate(result.draws).metrics["log_likelihood"]
    for key in ("ess_log_likelihood", "ess_field_min"):
        row[f"{key}_per_s"] = ev[key] / t["sampling_time_s"]
    return row


def run_row(kind: str, mesh: int, args, exact: EllipticInverse) -> dict:
    """One row of the table: the model and method that ``kind`` names, timed with its solves."""
    coarse = EllipticInverse(mesh=mesh, likelihood_mesh=COARSE_LIKELIHOOD_MESH,
                             restriction=args.restriction) if kind.endswith("_coarse") else None
    model = coarse or (EllipticInverse(mesh=mesh, whiten=True) if kind == "hmc" else exact)
    da = {"coarse_mesh": args.da_meshes, "subchain_length": args.da_subchain}
    ae = {"latent_dim": args.latent_dim, "presample": {"num_warmup": args.warmup, "num_draws": args.presamples}}
    methods = {
        "pcn": ("pCN", lambda: PCN(num_warmup=args.warmup, num_draws=args.draws)),
        "aepcn": ("AE-pCN", lambda: AEPCN(num_warmup=args.latent_warmup, num_draws=args.draws, **ae)),
        "pcn_coarse": ("pCN (coarse likelihood)", lambda: PCN(num_warmup=args.warmup, num_draws=args.draws)),
        "aepcn_coarse": ("AE-pCN (coarse likelihood)",
                         lambda: AEPCN(num_warmup=args.latent_warmup, num_draws=args.draws, **ae)),
        "dapcn": ("DA-pCN", lambda: DAPCN(num_warmup=args.warmup, num_draws=args.draws, **da)),
        "daaepcn": ("DA-AE-pCN", lambda: DAPCN(proposal="ae", num_warmup=args.latent_warmup, num_draws=args.draws,
                                                **da, **ae)),
        "dalis": ("DA-pCN (LIS split)", lambda: DAPCN(proposal="lis", num_warmup=args.warmup, num_draws=args.draws,
                                                    informed_dim=args.informed_dim,
                                                    informed_step_size=args.informed_step_size, **da)),
        "dapcn_plain": ("DA-pCN, no error model",
                        lambda: DAPCN(num_warmup=args.warmup, num_draws=args.draws, error_model=False, **da)),
        "daaepcn_plain": ("DA-AE-pCN, no error model",
                          lambda: DAPCN(proposal="ae", num_warmup=args.latent_warmup, num_draws=args.draws,
                                        error_model=False, **da, **ae)),
        "hmc": (f"HMC (whitened, {args.hmc_steps} steps)",
                lambda: HMC(num_steps=args.hmc_steps, num_warmup=args.hmc_warmup, num_draws=args.hmc_draws,
                            init="prior", mass="diag")),
    }
    name, make = methods[kind]
    method = make()
    gen = torch.Generator().manual_seed(args.seed)
    timed = SolveTimer(model)
    method.check(model, args.chains)
    start = time.perf_counter()
    result = method.run(timed, model.initial_point(args.chains, gen), gen, args.progress)
    row = summarize(name, model, result, time.perf_counter() - start, timed.seconds, exact)
    print(f"  mesh {mesh} {name}: {row['wall_s']:.1f}s, ESS/s log-lik {row['ess_log_likelihood_per_s']:.2f}, "
          f"field {row['ess_field_min_per_s']:.2f}", flush=True)
    return row


def run_mesh(mesh: int, args) -> list[dict]:
    exact = EllipticInverse(mesh=mesh, restriction=args.restriction)
    return [run_row(kind, mesh, args, exact) for kind in args.rows if kind != "hmc" or mesh in args.hmc_meshes]


def fmt(v, spec=".3g"):
    return "" if v is None else format(v, spec)


def write_markdown(rows: list[dict], args, path: Path, seconds: float) -> None:
    lines = ["# Deep MCMC Table 2, three ways: exact, coarse likelihood (approximate), delayed acceptance (exact)", "",
             f"Command: `python experiments/deep_mcmc_table2.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
             f"{args.chains} chains, float64, `model.solver=auto`: SuperLU per chain on the exact level, LAPACK's dense "
             f"LU per chain on levels of at most {SMALL_SYSTEM_DOFS} unknowns. Coarser levels read the field by `model.restriction={args.restriction}`. "
             f"Chains seeded {args.seed}. Total time {seconds / 60:.1f} min.", "",
             f"pCN: {args.warmup} warm-up iterations (h adapted to acceptance 0.25, capped at 4) + {args.draws} per "
             f"chain. AE-pCN: the same pCN warm-up, {args.presamples} pre-samples, PCA auto-encoder to "
             f"{args.latent_dim}, {args.latent_warmup} latent warm-up iterations, {args.draws} iterations per chain. "
             f"Coarse likelihood: `model.likelihood_mesh={COARSE_LIKELIHOOD_MESH}` (**approximate**: another "
             f"posterior). DA: `method=dapcn coarse_mesh={args.da_meshes} subchain_length={args.da_subchain}` "
             "(exact), with the adaptive error model unless the row says otherwise; DA-AE-pCN pre-samples with "
             f"DA-pCN (the same error model setting); DA-pCN (LIS split): `proposal=lis informed_dim={args.informed_dim} "
             f"informed_step_size={args.informed_step_size}`, {args.warmup} warm-up iterations. "
             "Speed-up (as published) = exact pCN sampling time / the "
             "row's, for the same iterations. ESS/s ratios: the row's ESS per second of sampling over exact pCN's. "
             "log-likelihood: mean over retained draws of -1/2 sum((y - O p)/sigma)^2 on the row's likelihood mesh "
             "(in brackets for approximate rows: on the model's mesh). solve share: the fraction of the run's wall "
             "time spent in PDE solves (all levels).", "",
             "| mesh | method | posterior | sampling s (published) | pipeline s | speed-up (published) | "
             "ESS/s log-lik (x pCN) | ESS/s field min (x pCN) | log-likelihood (published) | acceptance | "
             "first-stage acc. | fine acc. | fine solves / iter | field rel. L2 err | solve share |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = {r["mesh"]: r for r in rows if r["method"] == "pCN"}
    for r in rows:
        pcn_row = base.get(r["mesh"])
        published_key = "AE-pCN" if r["method"].startswith("AE-pCN") else r["method"]
        pub = PUBLISHED.get(r["mesh"], {}).get(published_key)
        speed, ratios = "", {}
        if pcn_row is not None and r is not pcn_row:
            speed = f"{pcn_row['sampling_time_s'] / r['sampling_time_s']:.2f}"
            if r["method"].startswith("AE-pCN") and r["mesh"] in PUBLISHED:
                speed += f" ({PUBLISHED[r['mesh']]['speed_up']})"
            for key in ("ess_log_likelihood_per_s", "ess_field_min_per_s"):
                ratios[key] = f" ({r[key] / pcn_row[key]:.2f}x)"
        sampling = f"{r['sampling_time_s']:.1f}" + (f" ({pub[0]:,})" if pub else "")
        loglik = f"{r['log_likelihood']:.2f}"
        if r.get("exact_log_likelihood") is not None:
            loglik += f" [{r['exact_log_likelihood']:.2f}]"
        loglik += f" ({pub[1]})" if pub else ""
        posterior = "approximate" if r["approximate"] else ("restricted (PCA subspace)" if r["method"] == "AE-pCN"
                                                            else "exact")
        lines.append(f"| {r['mesh']} | {r['method']} | {posterior} | {sampling} | {r['pipeline_time_s']:.1f} | {speed} | "
                     f"{r['ess_log_likelihood_per_s']:.2f}{ratios.get('ess_log_likelihood_per_s', '')} | "
                     f"{r['ess_field_min_per_s']:.2f}{ratios.get('ess_field_min_per_s', '')} | {loglik} | "
                     f"{fmt(r['accept_rate'], '.2f')} | {fmt(r.get('first_stage_accept_rate'), '.2f')} | "
                     f"{fmt(r.get('fine_accept_rate'), '.2f')} | "
                     f"{fmt(r.get('fine_solves_per_iter'), '.2f')} | {fmt(r.get('field_rel_err'), '.2f')} | "
                     f"{r['solve_share']:.0%} |")
    lines += paper_setting_summary(rows)
    lines += ["", "Stage times (s) and effective sample sizes:", "",
              "| mesh | method | warm-up / pre-sampling | train | latent warm-up | sampling | ESS log-lik | min ESS field |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mesh']} | {r['method']} | {r.get('presample_time_s', r.get('warmup_time_s', 0)):.1f} | "
                     f"{fmt(r.get('train_time_s'), '.1f')} | {fmt(r.get('latent_warmup_time_s'), '.1f')} | "
                     f"{r['sampling_time_s']:.1f} | {r['ess_log_likelihood']:.0f} | {r['ess_field_min']:.0f} |")
    path.write_text("\n".join(lines) + "\n")


def paper_setting_summary(rows: list[dict]) -> list[str]:
    """Which row is the paper's setting (AE-pCN with the likelihood on the coarse mesh, an approximate posterior)
    and how far its speed-up is from the published one; and the exact rows' best ESS/s ratio, for contrast."""
    lines = []
    for mesh, published in PUBLISHED.items():
        by_method = {r["method"]: r for r in rows if r["mesh"] == mesh}
        pcn_row, paper_row = by_method.get("pCN"), by_method.get("AE-pCN (coarse likelihood)")
        if pcn_row is None:
            continue
        if paper_row is not None:
            speed_up = pcn_row["sampling_time_s"] / paper_row["sampling_time_s"]
            lines.append(f"- Mesh {mesh}: the paper's setting, we believe, is the AE-pCN row with the likelihood on "
                         f"the {COARSE_LIKELIHOOD_MESH} x {COARSE_LIKELIHOOD_MESH} mesh (approximate): speed-up "
                         f"{speed_up:.2f} against the published {published['speed_up']} (published / ours "
                         f"{published['speed_up'] / speed_up:.2f}).")
        exact = [r for r in rows if r["mesh"] == mesh and not r["approximate"] and r["method"] not in ("pCN", "AE-pCN")]
        if exact:
            best = max(exact, key=lambda r: r["ess_log_likelihood_per_s"])
            lines.append(f"- Mesh {mesh}, exact posterior: the most log-likelihood ESS per second is {best['method']}'s, "
                         f"{best['ess_log_likelihood_per_s'] / pcn_row['ess_log_likelihood_per_s']:.2f}x pCN's "
                         f"({best['ess_field_min_per_s'] / pcn_row['ess_field_min_per_s']:.2f}x on the field's min ESS).")
    return ["", *lines] if lines else []


def write_pooled(paths: list[Path], out: Path) -> None:
    """One table over runs that differ only in the chains' seed (their .json files): per row, each seed's
    ESS per second and its ratio to that seed's exact pCN, and the pooled ratio, mean ESS/s over the seeds
    divided by pCN's mean. A single run's log-likelihood ESS from 4 x 1000 draws is too noisy to compare."""
    runs = [json.loads(p.read_text()) for p in paths]
    keys = ("ess_log_likelihood_per_s", "ess_field_min_per_s")
    lines = ["# Deep MCMC Table 2 rows pooled over seeds", "",
             f"Command: `python experiments/deep_mcmc_table2.py {' '.join(sys.argv[1:])}`", "",
             f"Runs: {', '.join(f'`{p}`' for p in paths)} (the same settings, chains seeded differently). Per seed: "
             "ESS/s (ratio to that seed's exact pCN). Pooled: mean ESS/s over the seeds / pCN's mean.", "",
             "| mesh | method | sampling s (mean) | fine acc. (mean) | ESS/s log-lik per seed | pooled log-lik | "
             "ESS/s field min per seed | pooled field |", "|---|---|---|---|---|---|---|---|"]
    for row in runs[0]:
        mesh, method = row["mesh"], row["method"]
        same = [next(r for r in run if r["mesh"] == mesh and r["method"] == method) for run in runs]
        base = [next(r for r in run if r["mesh"] == mesh and r["method"] == "pCN") for run in runs]
        cells = []
        for key in keys:
            per_seed = ", ".join(f"{r[key]:.2f} ({r[key] / b[key]:.2f}x)" for r, b in zip(same, base))
            pooled = sum(r[key] for r in same) / sum(b[key] for b in base)
            cells += [per_seed, f"{pooled:.2f}x"]
        fine = [r.get("fine_accept_rate") for r in same]
        fine_mean = fmt(sum(fine) / len(fine), ".2f") if None not in fine else ""
        lines.append(f"| {mesh} | {method} | {sum(r['sampling_time_s'] for r in same) / len(same):.1f} | {fine_mean} | "
                     + " | ".join(cells) + " |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--meshes", default="20,40")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--presamples", type=int, default=1000, help="AE-pCN pre-samples, total over chains")
    parser.add_argument("--latent-dim", type=int, default=441)
    parser.add_argument("--latent-warmup", type=int, default=200)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"which rows, of {', '.join(ROWS)}")
    parser.add_argument("--da-meshes", default="10", help="method=dapcn coarse_mesh: one mesh or a list, e.g. 5,10")
    parser.add_argument("--da-subchain", default="5", help="method=dapcn subchain_length: one or one per level")
    parser.add_argument("--informed-dim", type=int, default=25, help="DA-pCN (LIS split): method.informed_dim")
    parser.add_argument("--informed-step-size", type=float, default=0.5,
                        help="DA-pCN (LIS split): method.informed_step_size")
    parser.add_argument("--hmc-meshes", default="20", help="meshes with an HMC row (empty for none)")
    parser.add_argument("--hmc-steps", type=int, default=10)
    parser.add_argument("--hmc-warmup", type=int, default=300)
    parser.add_argument("--hmc-draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--restriction", default="projection", choices=("projection", "injection"),
                        help="model.restriction: how coarse levels and the coarse likelihood read the field")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--out", default="results/deep_mcmc_table2.md")
    parser.add_argument("--pool", default="", help="instead of running: pool these runs' .json files (one per seed, "
                        "comma-separated) into one table at --out")
    args = parser.parse_args()
    if args.pool:
        write_pooled([Path(p) for p in args.pool.split(",")], Path(args.out))
        print(f"wrote {args.out}")
        return
    args.hmc_meshes = [int(m) for m in args.hmc_meshes.split(",") if m]
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    as_levels = lambda text: [int(m) for m in text.split(",")] if "," in text else int(text)  # noqa: E731
    args.da_meshes, args.da_subchain = as_levels(args.da_meshes), as_levels(args.da_subchain)
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
