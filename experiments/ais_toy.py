"""Reproduce the AIS experiment of the advanced-VI lecture notes (sec. 2.7.3, Figure 21).

Prior N(0, 1), unnormalized target exp(-(x + 5)^2 / 4) (N(-5, 2) up to Z = sqrt(4 pi) = 3.545),
100 linear temperatures, 10-step Metropolis-Hastings per temperature (bayesx's AIS, method=ais).

1. The posterior-mean and normalizer estimates as the number of AIS samples grows, over repeated
   runs: mean, spread, and the bias in units of its standard error.
2. The same with the printed Algorithm 2, which omits the first weight factor f_1(x_0)/f_0(x_0):
   does that explain the bias the notes report?
3. The weights' effective sample size out of 1000 as the prior (base) variance changes.

    python experiments/ais_toy.py            # -> results/ais_toy.md, results/ais_toy.png  (about a minute)
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bayesx.methods.vi import ais as ais_module
from bayesx.methods.vi.ais import AIS
from bayesx.result import Result
from bayesx.targets.toy import Density

ROOT = Path(__file__).resolve().parents[1]
TRUE_MEAN, TRUE_Z = -5.0, math.sqrt(4.0 * math.pi)


def run_ais(target, n_samples: int, seed: int, base_scale: float = 1.0, printed: bool = False):
    """(posterior-mean estimate, Z estimate, weights' ESS) of one AIS run of n_samples."""
    method = AIS(n_samples=n_samples, n_temps=100, n_steps=10, kernel="mh", step_size=1.0, base_scale=base_scale)
    original = ais_module.log_ratio
    first = {"done": False}

    def without_first_factor(t, base, z):
        out = original(t, base, z)
        if not first["done"]:
            first["done"] = True
            return torch.zeros_like(out)
        return out

    if printed:
        ais_module.log_ratio = without_first_factor
    try:
        particles = method.fit(target, None, torch.Generator().manual_seed(seed), Result(), progress=False)
    finally:
        ais_module.log_ratio = original
    lw = particles.log_weights.double()
    w = torch.exp(lw - lw.max())
    mean = float((w * particles.draws[:, 0]).sum() / w.sum())
    z_hat = math.exp(float(torch.logsumexp(lw, 0)) - math.log(n_samples))
    return mean, z_hat, float(w.sum() ** 2 / (w * w).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 30, 100, 300, 1000, 3000])
    parser.add_argument("--out", default=str(ROOT / "results" / "ais_toy.md"))
    args = parser.parse_args()
    target = Density(name="ais_toy")
    start = time.perf_counter()
    rows = {}
    for printed in (False, True):
        for n in args.sizes:
            est = np.array([run_ais(target, n, seed, printed=printed)[:2] for seed in range(args.repeats)])
            rows[(printed, n)] = est
            print(f"printed={printed} n={n}: mean {est[:, 0].mean():.3f} Z {est[:, 1].mean():.3f}", flush=True)
    variances = [0.1, 0.5, 1.0, 2.0, 4.0, 10.0, 25.0, 100.0]
    ess = {v: np.mean([run_ais(target, 1000, seed, base_scale=math.sqrt(v))[2] for seed in range(5)])
           for v in variances}
    seconds = time.perf_counter() - start

    def line(printed, n):
        est = rows[(printed, n)]
        m, z = est[:, 0], est[:, 1]
        se_m, se_z = m.std(ddof=1) / math.sqrt(len(m)), z.std(ddof=1) / math.sqrt(len(z))
        return (f"| {n} | {m.mean():.3f} +- {m.std(ddof=1):.3f} | {(m.mean() - TRUE_MEAN) / se_m:+.1f} | "
                f"{z.mean():.3f} +- {z.std(ddof=1):.3f} | {(z.mean() - TRUE_Z) / se_z:+.1f} |")

    header = ("| AIS samples | posterior mean (mean +- sd over runs) | bias / se | Z estimate (mean +- sd) "
              "| bias / se |\n|---|---|---|---|---|")
    lines = [
        "# AIS on the lecture notes' example (sec. 2.7.3, Figure 21)",
        "",
        f"Command: `python experiments/ais_toy.py` ({seconds:.0f} s on {platform.machine()}, torch {torch.__version__},"
        f" Python {sys.version.split()[0]}).  ",
        "Prior N(0, 1); target exp(-(x + 5)^2 / 4): true posterior mean -5, true Z = sqrt(4 pi) = 3.545. "
        "100 linear temperatures, 10 MH steps per temperature (proposal sd 1.0, nudged towards 0.3 acceptance "
        f"between temperatures). {args.repeats} independent repetitions per row; 'bias / se' is (mean of the runs "
        "- truth) / (sd over runs / sqrt(runs)): beyond about +-3 the bias is real.",
        "",
        "## With the full weight (eq. 124, what bayesx computes)",
        "",
        header,
        *[line(False, n) for n in args.sizes],
        "",
        "## With the printed Algorithm 2 (the first factor f_1(x_0) / f_0(x_0) omitted)",
        "",
        header,
        *[line(True, n) for n in args.sizes],
        "",
        "## Weights' effective sample size out of 1000 against the prior variance (mean of 5 runs)",
        "",
        "| prior variance | " + " | ".join(f"{v:g}" for v in variances) + " |",
        "|---|" + "---|" * len(variances),
        "| ESS | " + " | ".join(f"{ess[v]:.0f}" for v in variances) + " |",
        "",
    ]
    full_bias = [abs(rows[(False, n)][:, 1].mean() - TRUE_Z) / (rows[(False, n)][:, 1].std(ddof=1)
                 / math.sqrt(args.repeats)) for n in args.sizes]
    printed_z = rows[(True, args.sizes[-1])][:, 1].mean()
    lines += [
        "## Reading",
        "",
        f"- With the full weight the Z estimate shows no bias beyond Monte Carlo error at any size (largest |bias/se| "
        f"{max(full_bias):.1f}); the notes' Figure 21 shows a bias and attributes it to correlated MH samples. AIS "
        "weights are unbiased whatever the correlation of the moves (Neal 2001), so correlation alone cannot bias Z.",
        f"- Omitting the first factor, as the printed Algorithm 2 does, multiplies every weight by "
        f"exp(-(1/100) [log p(x_0) - log q0(x_0)]) and gives Z about {printed_z:.3f} at "
        f"{args.sizes[-1]} samples instead of 3.545: a bias of the kind Figure 21 shows, growing in units of "
        "its standard error as the samples grow. The posterior mean is a self-normalized estimate, where the omitted "
        "factor largely cancels between numerator and denominator, so it is nearly the same in both versions and, at "
        "these sizes, unbiased within its "
        "Monte Carlo error (self-normalized estimates carry an O(1/n) bias too small to see here).",
        "- The ESS peaks where the prior's spread covers the target (variance a few times the target's 2); a "
        "narrow prior (0.1) or a very wide one (100) wastes samples. This is what the notes' right panel measures; "
        "their bar heights are not given in the text, so only the shape can be compared.",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    plot(rows, args.sizes, ess, Path(args.out).with_suffix(".png"))
    print("\n".join(lines))
    return 0


def plot(rows, sizes, ess, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for printed, style, label in ((False, "o-", "full weight"), (True, "s--", "printed Alg. 2")):
        for k, (ax, truth) in enumerate(zip(axes[:2], (TRUE_MEAN, TRUE_Z))):
            est = np.array([rows[(printed, n)][:, k] for n in sizes])
            ax.errorbar(sizes, est.mean(1), yerr=est.std(1, ddof=1), fmt=style, capsize=3, label=label)
            ax.axhline(truth, color="k", lw=0.8)
    axes[0].set(xscale="log", xlabel="AIS samples", ylabel="posterior mean estimate")
    axes[1].set(xscale="log", xlabel="AIS samples", ylabel="Z estimate")
    axes[0].legend()
    axes[2].bar([f"{v:g}" for v in ess], list(ess.values()))
    axes[2].set(xlabel="prior variance", ylabel="ESS of 1000")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
