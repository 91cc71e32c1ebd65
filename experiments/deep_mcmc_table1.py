"""Reproduce Table 1 of "Deep Markov Chain Monte Carlo" (Deep MCMC): HMC vs AE-HMC on Bayesian logistic
regression, plus the thesis' chapter 3 figures (Chen (2019): time per iteration and min ESS/s on the
simulated data; predictive accuracy of the running posterior mean against wall time).

For each data set, on the same posterior (prior N(0, 10^2), the product's data configs):
  HMC      the product's HMC: 50 leapfrog steps, diag metric, Laplace start, num_warmup + num_draws
  AE-HMC   the product's AE-HMC (linear auto-encoder, latent size about D/10 as in Deep MCMC): the same
           HMC warm-up, 1000 pre-samples, training, latent step-size adaptation, num_draws iterations
  AE-HMC approx  the same without the volume correction (Deep MCMC sec. 3.3)
and a NUTS reference posterior (cached under $BAYESX_DATA_DIR/reference) for posterior_mean_err
and posterior_sd_err. The paper's speed-up compares the same number of iterations after a warm-up
both methods pay; the whole-pipeline speed-up adds warm-up, pre-sampling and training.

    python experiments/deep_mcmc_table1.py                      # all rows -> results/deep_mcmc_table1.md
    python experiments/deep_mcmc_table1.py --rows digits --draws 500
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bayesx.config import compose  # noqa: E402
from bayesx.data.registry import data_dir  # noqa: E402
from bayesx import reference  # noqa: E402
from bayesx.diagnostics import convergence  # noqa: E402
from bayesx.errors import BayesxError  # noqa: E402
from bayesx.methods.mcmc.aehmc import AEHMC  # noqa: E402
from bayesx.methods.mcmc.hmc import HMC  # noqa: E402
from bayesx.native import logistic as native  # noqa: E402
from bayesx.runner import build, reference_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Deep MCMC Table 1: (D, HMC time s, HMC accuracy, d, AE-HMC time s, AE-HMC accuracy, speed-up)
PUBLISHED = {
    "synthetic": (500, 11077.8, 0.82, 50, 3471.8, 0.82, 3.2),
    "cnae9": (856, 3793.3, 0.983, 85, 1083.0, 0.983, 3.5),
    "digits": (64, 865.7, 1.00, 6, 145.6, 1.00, 5.9),
    "mnist01": (784, 33300.8, 0.996, 78, 4878.5, 0.992, 6.8),
}
THESIS_CH3 = {"hmc": {"time_per_iter": 0.488, "min_ess_per_s": 0.203},
              "aehmc": {"time_per_iter": 0.134, "min_ess_per_s": 0.964}}


def build_target(data_name: str):
    cfg = compose([f"data={data_name}", "model=logreg", "device.dtype=float64"])
    target = build(cfg.model, "model", data=build(cfg.data, "data"), device="cpu", dtype=torch.float64)
    return target, reference_key(cfg)  # the same cache entry as `bayesx run method=aehmc data=...`


def running_accuracy(target, draws: np.ndarray, n_points: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Test accuracy of the posterior mean predictive over the first k iterations (all chains)."""
    x = target.x_test
    probs = torch.sigmoid(torch.as_tensor(draws, dtype=x.dtype) @ x.T).mean(0)  # (draws, n_test), chain-averaged
    cum = torch.cumsum(probs, 0) / torch.arange(1, probs.shape[0] + 1, dtype=x.dtype)[:, None]
    idx = np.unique(np.linspace(0, probs.shape[0] - 1, n_points).astype(int))
    acc = ((cum[idx] > 0.5).to(x.dtype) == target.y_test).to(x.dtype).mean(1).numpy()
    return idx + 1, acc


def summarize_run(name, target, result, ref, pre_sampling_s: float) -> dict:
    draws = result.draws.numpy()
    diag = convergence.summarize(draws)
    sampling = result.timings["sampling_time_s"]
    n_iter = draws.shape[1]
    it, acc = running_accuracy(target, draws)
    out = {
        "method": name,
        "test_accuracy": target.evaluate(result.draws).metrics["test_accuracy"],
        "sampling_time_s": sampling,
        "pipeline_time_s": pre_sampling_s + sampling,
        "time_per_iter_s": sampling / n_iter,
        "ess_bulk_min": diag["ess_bulk_min"],
        "ess_bulk_min_per_s": diag["ess_bulk_min"] / sampling,
        "rhat_max": diag.get("rhat_max", float("nan")),
        "accept_rate": result.metrics.get("accept_rate", float("nan")),
        **reference.posterior_error(draws, ref),
        **{k: v for k, v in result.timings.items()},
        **{k: result.metrics[k] for k in ("latent_dim", "recon_err") if k in result.metrics},
        "curve_time_s": (pre_sampling_s + it * sampling / n_iter).tolist(),
        "curve_accuracy": acc.tolist(),
    }
    return out


def run_row(data_name: str, args) -> dict:
    target, key = build_target(data_name)
    ref = reference.reference_moments(target, key, data_dir() / "reference", num_warmup=args.ref_warmup,
                                      num_draws=args.ref_draws, n_chains=4, max_tree_depth=args.ref_tree_depth,
                                      progress=args.progress)
    rows = []
    gen = torch.Generator().manual_seed(args.seed)
    hmc = HMC(num_steps=50, num_warmup=args.warmup, num_draws=args.draws, init="laplace")
    start = time.perf_counter()
    res = hmc.run(target, target.initial_point(args.chains, gen), gen, args.progress)
    print(f"  hmc {time.perf_counter() - start:.1f}s", flush=True)
    rows.append(summarize_run("HMC", target, res, ref, res.timings.get("laplace_time_s", 0) + res.timings["warmup_time_s"]))
    variants = [("AE-HMC", {"volume_correction": True}), ("AE-HMC approx", {"volume_correction": False})]
    if data_name == "synthetic":
        variants.append(("AE-HMC tanh", {"volume_correction": True, "ae": "tanh"}))
    for name, kw in variants:
        gen = torch.Generator().manual_seed(args.seed)
        method = AEHMC(num_steps=50, num_draws=args.draws, num_warmup=200,
                       presample={"num_warmup": args.warmup, "num_draws": 1000, "init": "laplace"}, **kw)
        start = time.perf_counter()
        res = method.run(target, target.initial_point(args.chains, gen), gen, args.progress)
        print(f"  {name} {time.perf_counter() - start:.1f}s", flush=True)
        before = res.timings["presample_time_s"] + res.timings["train_time_s"] + res.timings["latent_warmup_time_s"]
        rows.append(summarize_run(name, target, res, ref, before))
    return {"data": data_name, "dim": target.dim, "n_train": int(target.x_train.shape[0]),
            "n_test": int(target.x_test.shape[0]), "reference_ess_bulk_min": ref.ess_bulk_min, "runs": rows}


def write_markdown(rows: list[dict], skipped: dict[str, str], args, path: Path, seconds: float) -> None:
    lines = ["# Deep MCMC Table 1: HMC vs AE-HMC on Bayesian logistic regression", "",
             f"Command: `python experiments/deep_mcmc_table1.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, {args.chains} chains, float64, "
             f"{'native (C) leapfrog kernels for both methods' if native.available() else 'PyTorch kernels (native off)'}. "
             f"Total time {seconds / 60:.1f} min.", "",
             f"HMC: 50 leapfrog steps, diag metric, Laplace start, {args.warmup} warm-up + {args.draws} iterations per chain. "
             f"AE-HMC: the same HMC warm-up, 1000 pre-samples (after warm-up), linear auto-encoder with latent size "
             f"about D/10, 200 latent step-size adaptation iterations, {args.draws} iterations per chain, 50 leapfrog steps. "
             "Speed-up (paper) = HMC sampling time / AE-HMC sampling time for the same iterations; whole-pipeline speed-up "
             "adds warm-up, pre-sampling and training to both. Posterior errors are mean |difference| / reference sd over "
             f"coordinates, against NUTS ({args.ref_warmup}+{args.ref_draws} iterations x 4 chains, cached).", "",
             "| data | D | d | method | accuracy (published) | sampling s | pipeline s | speed-up (published) | "
             "pipeline speed-up | min ESS/s | R-hat | mean err | sd err | recon err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        pub = PUBLISHED[row["data"]]
        hmc = row["runs"][0]
        for run in row["runs"]:
            is_hmc = run["method"] == "HMC"
            published_acc = pub[2] if is_hmc else pub[5]
            speed = hmc["sampling_time_s"] / run["sampling_time_s"]
            pipe = hmc["pipeline_time_s"] / run["pipeline_time_s"]
            lines.append(
                f"| {row['data']} | {row['dim']} | {'' if is_hmc else int(run.get('latent_dim', 0))} | {run['method']} | "
                f"{run['test_accuracy']:.3f} ({published_acc:.3f}) | {run['sampling_time_s']:.1f} | "
                f"{run['pipeline_time_s']:.1f} | {'' if is_hmc else f'{speed:.2f} ({pub[6]})'} | "
                f"{'' if is_hmc else f'{pipe:.2f}'} | {run['ess_bulk_min_per_s']:.2f} | {run['rhat_max']:.3f} | "
                f"{run['posterior_mean_err']:.3f} | {run['posterior_sd_err']:.3f} | "
                f"{'' if is_hmc else format(run.get('recon_err', float('nan')), '.3f')} |")
    for name, why in skipped.items():
        lines.append(f"| {name} | {PUBLISHED[name][0]} | | not run: {why} | | | | | | | | | | |")
    lines += ["", "Published times (Deep MCMC, Stan + Keras, their machine): " + "; ".join(
        f"{k} HMC {v[1]:,.1f} s, AE-HMC {v[4]:,.1f} s" for k, v in PUBLISHED.items()) + ".", "",
        "Stage times (s) per AE-HMC run:", "",
        "| data | method | presample (incl. warm-up) | train | latent warm-up | sampling |", "|---|---|---|---|---|---|"]
    for row in rows:
        for run in row["runs"][1:]:
            lines.append(f"| {row['data']} | {run['method']} | {run['presample_time_s']:.1f} | {run['train_time_s']:.1f} | "
                         f"{run['latent_warmup_time_s']:.1f} | {run['sampling_time_s']:.1f} |")
    synth = next((r for r in rows if r["data"] == "synthetic"), None)
    if synth is not None:
        hmc, ae = synth["runs"][0], next(r for r in synth["runs"] if r["method"] == "AE-HMC tanh")
        lines += ["", "Thesis ch. 3 (Chen (2019)), simulated logistic regression, tanh auto-encoder 500-100-50-100-500 "
                  "(published in brackets; their data variant differs and is not public):", "",
                  "| method | time per iteration s | min ESS/s |", "|---|---|---|",
                  f"| HMC | {hmc['time_per_iter_s']:.4f} ({THESIS_CH3['hmc']['time_per_iter']}) | "
                  f"{hmc['ess_bulk_min_per_s']:.2f} ({THESIS_CH3['hmc']['min_ess_per_s']}) |",
                  f"| AE-HMC tanh | {ae['time_per_iter_s']:.4f} ({THESIS_CH3['aehmc']['time_per_iter']}) | "
                  f"{ae['ess_bulk_min_per_s']:.2f} ({THESIS_CH3['aehmc']['min_ess_per_s']}) |", "",
                  "Figures: `deep_mcmc_ch3.png` (time per iteration, min ESS/s), `deep_mcmc_accuracy_vs_time.png`."]
    path.write_text("\n".join(lines) + "\n")


def figures(rows: list[dict], out_dir: Path) -> None:
    synth = next((r for r in rows if r["data"] == "synthetic"), None)
    if synth is None:
        return
    runs = {r["method"]: r for r in synth["runs"]}
    pair = [("HMC", runs["HMC"]), ("AE-HMC tanh", runs["AE-HMC tanh"])]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    axes[0].bar([n for n, _ in pair], [r["time_per_iter_s"] for _, r in pair], color=["C0", "C1"])
    axes[0].set_ylabel("seconds per iteration (4 chains)")
    axes[1].bar([n for n, _ in pair], [r["ess_bulk_min_per_s"] for _, r in pair], color=["C0", "C1"])
    axes[1].set_ylabel("min bulk ESS per second")
    fig.suptitle("simulated logistic regression (D=500)")
    fig.tight_layout()
    fig.savefig(out_dir / "deep_mcmc_ch3.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name in ("HMC", "AE-HMC", "AE-HMC tanh"):
        if name in runs:
            ax.plot(runs[name]["curve_time_s"], runs[name]["curve_accuracy"], "-o", ms=2, label=name)
    ax.set_xlabel("wall time s (sampling starts after warm-up / pre-sampling / training)")
    ax.set_ylabel("test accuracy of running posterior mean")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "deep_mcmc_accuracy_vs_time.png", dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="synthetic,digits,mnist01,cnae9")
    parser.add_argument("--ref-tree-depth", type=int, default=10,
                        help="NUTS reference max tree depth (lower it where trees saturate, e.g. mnist01)")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--ref-warmup", type=int, default=500)
    parser.add_argument("--ref-draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "deep_mcmc_table1.md")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows, skipped = [], {}
    for name in args.rows.split(","):
        print(f"{name}:", flush=True)
        try:
            row_start = time.perf_counter()
            rows.append(run_row(name, args))
            rows[-1]["row_seconds"] = time.perf_counter() - row_start
        except BayesxError as exc:
            skipped[name] = str(exc)
            print(f"  skipped: {exc}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_markdown(rows, skipped, args, args.out, time.perf_counter() - start)
    figures(rows, args.out.parent)
    args.out.with_suffix(".json").write_text(json.dumps({"rows": rows, "skipped": skipped}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
