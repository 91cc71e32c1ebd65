"""Reproduce Figures 2.2-2.5 of Chen (2019), ch. 2 (GAP) with bayesx's methods, exact answers beside.

    python experiments/gap_figures.py     # -> results/gap_figures.md, results/gap_t1.png,
                                          #    results/gap_mixtures.png, results/gap_logreg.png (about 2 min)

- Figures 2.2-2.3: GAP on t(1) from (mu, sigma) = (10, 5), step sizes 0.1 and 5, 1000 iterations
  (published: N(0.0005, 3.7468), minimum distance after about 400 iterations), with 1000 and 10000
  Monte Carlo draws per iteration over several seeds, the exact Hellinger-optimal Gaussian by
  quadrature, and the same iteration with the inner products computed by quadrature (no noise).
- Figure 2.5: the mixtures 0.7 N(0,1) + 0.3 N(5,1) and 0.9 N(0,1) + 0.1 N(15,1): GAP, Laplace,
  VFE (KL(q||p)), reverse KL (KL(p||q)) and Hellinger, fitted (mu, sigma^2) per method with the
  exact optima (quadrature) and the thesis' qualitative claims checked.
- Figure 2.4: logistic regression with an intercept and two coefficients, N = 100, beta = (0.5,
  -1.5, 1), features bivariate normal with correlation 0.7: GAP, Laplace, full-rank VFE and NUTS.
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

from bayesx.data.classification import ClassificationData
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.vi.gap import GAP
from bayesx.methods.vi.gaussian import GaussianVI
from bayesx.methods.vi.laplace import Laplace
from bayesx.targets.logreg import LogisticRegression
from bayesx.targets.toy import Density

ROOT = Path(__file__).resolve().parents[1]
GRID = np.linspace(-3000.0, 3000.0, 3000001)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fit(method, target, seed: int = 0):
    g = gen(seed)
    result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
    scale = result.fitted.get("q_scale", result.fitted.get("q_cov"))
    if "q_cov" in result.fitted:
        cov = result.fitted["q_cov"]
    else:
        cov = scale @ scale.T if scale.dim() == 2 else torch.diag(scale**2)
    return result, result.fitted["q_mean"].double().numpy(), cov.double().numpy()


# --- exact answers by quadrature (1-D) ---------------------------------------------------------------
def density(name: str, x: np.ndarray) -> np.ndarray:
    target = Density(name=name)
    return np.exp(target.log_prob(torch.as_tensor(x)[:, None]).numpy() - target.log_normalizer())


def hellinger_optimum(name: str, start: tuple[float, float]) -> tuple[float, float]:
    """argmax over (mu, s2) of int sqrt(p q) by Nelder-Mead on a fine grid."""
    from scipy.optimize import minimize

    x = GRID if name == "t1" else np.linspace(-60, 60, 600001)
    h = x[1] - x[0]
    p = density(name, x)

    def neg(theta):
        mu, log_s2 = theta
        s2 = math.exp(log_s2)
        return -np.sum(np.sqrt(p * np.exp(-(x - mu) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2))) * h

    res = minimize(neg, [start[0], math.log(start[1])], method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-12})
    return float(res.x[0]), float(math.exp(res.x[1]))


def gap_by_quadrature(mu: float = 10.0, sigma: float = 5.0, eps=(0.1, 5.0), steps: int = 1000):
    """The thesis' t(1) iteration with its inner products integrated on a grid: no Monte Carlo noise."""
    x, h = GRID, GRID[1] - GRID[0]
    sqrt_p = 1.0 / np.sqrt(np.pi * (1 + x**2))
    trace = []
    for _ in range(steps):
        q = (2 * np.pi * sigma**2) ** -0.25 * np.exp(-((x - mu) ** 2) / (4 * sigma**2))
        c0 = np.sum(q * sqrt_p) * h
        c_mu = np.sum(q * (x - mu) / abs(sigma) * sqrt_p) * h
        c_s = np.sum(q * math.sqrt(0.5) * ((x - mu) ** 2 / sigma**2 - 1) * sqrt_p) * h
        scale = 1.0 / math.sqrt(1.0 - c0**2)
        mu, sigma = mu + eps[0] * c_mu * scale, sigma + eps[1] * c_s * scale
        trace.append(math.acos(c0))
    return mu, sigma**2, trace


# --- the figures ------------------------------------------------------------------------------------
def t1_section(seeds: int):
    target = Density(name="t1")
    runs = {}
    for n_mc in (1000, 10000):
        runs[n_mc] = []
        for seed in range(seeds):
            method = GAP(init_mean=[10.0], init_sd=5.0, eps_mu=0.1, eps_l=5.0, num_steps=1000, n_mc=n_mc)
            result, mean, cov = fit(method, target, seed)
            runs[n_mc].append((mean[0], cov[0, 0], result.traces["distance"]))
    quad = gap_by_quadrature()
    exact = hellinger_optimum("t1", (0.0, 3.7))
    return runs, quad, exact


def mixture_section():
    rows = {}
    for name in ("bimodal", "far_bimodal"):
        target = Density(name=name)
        fits = {
            "GAP": fit(GAP(init_mean=[0.5], init_sd=1.0, eps_mu=0.1, eps_l=1.0, num_steps=1500, n_mc=4000), target),
            "Laplace": fit(Laplace(), target),
            "VFE (KL(q||p))": fit(GaussianVI(family="meanfield", num_mc=64, num_steps=3000, tol=0.0, lr=0.02, init_sd=1.0),
                                  target),
            "reverse KL (KL(p||q))": fit(GaussianVI(family="meanfield", divergence="kl_pq", num_mc=256, num_steps=3000, lr=0.02,
                                                    tol=0.0, init_sd=3.0), target),
            "Hellinger": fit(GaussianVI(family="meanfield", divergence="hellinger", num_mc=256, num_steps=3000, lr=0.02,
                                        tol=0.0, init_sd=3.0), target),
        }
        exact_h = hellinger_optimum(name, (1.0, 4.0))
        moments = (float(target.truth.mean[0]), float(target.truth.sd[0] ** 2))
        rows[name] = ({k: (v[1][0], v[2][0, 0]) for k, v in fits.items()}, exact_h, moments)
    return rows


def logreg_section():
    rng = np.random.default_rng(2017)
    n = 100
    x = rng.multivariate_normal([0.0, 0.0], [[1.0, 0.7], [0.7, 1.0]], size=n)
    beta = np.array([0.5, -1.5, 1.0])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(beta[0] + x @ beta[1:])))).astype(float)
    data = ClassificationData(name="gap_fig24", x_train=x, y_train=y, x_test=x, y_test=y,
                              description="Chen (2019) Figure 2.4: N = 100, beta = (0.5, -1.5, 1), corr 0.7",
                              source="generated")
    target = LogisticRegression(data, intercept=True, prior_scale=10.0)
    fits = {"GAP": fit(GAP(eps_mu=0.2, eps_l=0.2, num_steps=1500, n_mc=4000), target),
            "Laplace": fit(Laplace(), target),
            "VFE (full-rank KL(q||p))": fit(GaussianVI(family="fullrank", num_mc=32, num_steps=4000, tol=0.0, lr=0.02), target),
            "VFE (Jaakkola-Jordan bound, the thesis')": fit(GaussianVI(family="jj", tol=1e-8, num_steps=2000), target)}
    g = gen(5)
    nuts = NUTS(num_warmup=1000, num_draws=2000, init="laplace").run(target, target.initial_point(4, g), g, False)
    draws = nuts.draws.reshape(-1, 3).numpy()
    return {k: (v[1], v[2]) for k, v in fits.items()}, draws, target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "results" / "gap_figures.md"))
    args = parser.parse_args()
    start = time.perf_counter()
    t1_runs, quad, exact_t1 = t1_section(args.seeds)
    mixtures = mixture_section()
    logreg, nuts_draws, _ = logreg_section()
    seconds = time.perf_counter() - start

    lines = ["# GAP (Chen (2019), ch. 2): Figures 2.2-2.5", "",
             f"Command: `python experiments/gap_figures.py --seeds {args.seeds}` ({seconds:.0f} s on {platform.machine()}, "
             f"torch {torch.__version__}, Python {sys.version.split()[0]}).", "",
             "## Figures 2.2-2.3: t(1) from (mu, sigma) = (10, 5), steps 0.1 and 5, 1000 iterations", "",
             "| run | mu | sigma^2 | distance at the end | iteration of the minimum distance (quadrature) |",
             "|---|---|---|---|---|",
             "| published (thesis) | 0.0005 | 3.7468 | - | about 400 |",
             f"| exact Hellinger optimum (quadrature) | {exact_t1[0]:.4f} | {exact_t1[1]:.4f} | - | - |",
             f"| GAP's iteration with quadrature inner products | {quad[0]:.4f} | {quad[1]:.4f} | {quad[2][-1]:.4f} | "
             f"{next(i for i, d in enumerate(quad[2]) if d <= min(quad[2]) + 1e-4) + 1} |"]
    for n_mc, runs in t1_runs.items():
        mus, s2s = np.array([r[0] for r in runs]), np.array([r[1] for r in runs])
        lines.append(f"| bayesx GAP, {n_mc} draws/iteration, {len(runs)} seeds (median of the last 500 iterates) | "
                     f"{mus.mean():.4f} +- {mus.std(ddof=1):.4f} | {s2s.mean():.4f} +- {s2s.std(ddof=1):.4f} | "
                     f"{np.mean([r[2][-1][1] for r in runs]):.4f} | - |")
    lines += ["", "The iteration itself converges to the exact optimum (quadrature row). With Monte Carlo inner "
              "products the iterates keep jumping: when the estimated cosine c_0 comes close to 1 the factor "
              "1/sqrt(1 - c_0^2) multiplies the step, so the reported q is the median of the last half of the "
              "iterates; 10,000 draws per iteration bring it within a few percent of the optimum.", ""]
    for name, (fits, exact_h, moments) in mixtures.items():
        title = "0.7 N(0,1) + 0.3 N(5,1)" if name == "bimodal" else "0.9 N(0,1) + 0.1 N(15,1)"
        lines += [f"## Figure 2.5: {title}", "", "| method | mu | sigma^2 |", "|---|---|---|"]
        lines += [f"| {k} | {mu:.3f} | {s2:.3f} |" for k, (mu, s2) in fits.items()]
        lines += [f"| exact Hellinger optimum (quadrature) | {exact_h[0]:.3f} | {exact_h[1]:.3f} |",
                  f"| exact KL(p||q) optimum (the moments) | {moments[0]:.3f} | {moments[1]:.3f} |", ""]
        lines += claims(name, fits)
    lines += ["## Figure 2.4: logistic regression, N = 100, beta = (0.5, -1.5, 1), features correlated 0.7", "",
              "Prior N(0, 10^2 I) (the thesis' prior values are not given). Two VFE rows: full-rank Gaussian VI on the "
              "reparameterized ELBO, and the thesis' own, the Jaakkola-Jordan local bound (method=vi family=jj).", "",
              "| method | mean (b0, b1, b2) | sd (b0, b1, b2) |", "|---|---|---|"]
    lines += [f"| {k} | {fmt(mean)} | {fmt(np.sqrt(np.diag(cov)))} |" for k, (mean, cov) in logreg.items()]
    lines += [f"| NUTS (4 x 2000 draws) | {fmt(nuts_draws.mean(0))} | {fmt(nuts_draws.std(0))} |", ""]
    lines += ["The thesis: VFE is more compact than the posterior; GAP almost equals Laplace here. "
              + logreg_claims(logreg, nuts_draws), ""]
    Path(args.out).write_text("\n".join(lines) + "\n")
    plots(t1_runs, quad, mixtures, logreg, nuts_draws, Path(args.out).parent)
    print("\n".join(lines))
    return 0


def fmt(values) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def claims(name: str, fits) -> list[str]:
    s2 = {k: v[1] for k, v in fits.items()}
    if name == "bimodal":
        checks = [("Laplace and VFE capture the first mode only (sigma^2 near 1)",
                   abs(s2["Laplace"] - 1) < 0.3 and abs(s2["VFE (KL(q||p))"] - 1) < 0.5),
                  ("GAP widens to cover both modes (sigma^2 well above 1)", s2["GAP"] > 2.0),
                  ("GAP and Hellinger almost indistinguishable", abs(s2["GAP"] - s2["Hellinger"]) < 0.2 * s2["GAP"])]
    else:
        checks = [("Hellinger (and GAP) miss the far mode (sigma^2 well below the moment-matched 21.25)",
                   s2["Hellinger"] < 8 and s2["GAP"] < 8),
                  ("reverse KL averages across both modes (sigma^2 large)", s2["reverse KL (KL(p||q))"] > 8)]
        note = ("- Why reverse KL fails here: bayesx estimates KL(p||q) by self-normalized importance sampling "
                "from q, and a q near N(0, 1) puts about 1e-50 of its mass at 15, so no draw ever sees the far "
                "mode and its weight never pulls q there. The optimum the thesis shows is the moment-matched "
                "N(1.5, 21.25) (last row), which needs p's mass at 15 to be found: quadrature, or draws from p.")
        if not checks[-1][1]:
            return [f"- {text}: {'holds' if ok else 'does NOT hold'}" for text, ok in checks] + [note, ""]
    return [f"- {text}: {'holds' if ok else 'does NOT hold'}" for text, ok in checks] + [""]


def logreg_claims(logreg, nuts_draws) -> str:
    sd_nuts = nuts_draws.std(0)
    sd = {k: np.sqrt(np.diag(v[1])) for k, v in logreg.items()}
    ratio = sd["VFE (full-rank KL(q||p))"] / sd_nuts
    jj = sd["VFE (Jaakkola-Jordan bound, the thesis')"] / sd_nuts
    gap_laplace = float(np.max(np.abs(sd["GAP"] - sd["Laplace"]) / sd["Laplace"]))
    return (f"Here the full-rank ELBO's sds are {100 * ratio.min():.0f}-{100 * ratio.max():.0f}% of NUTS's (with "
            f"N = 100 the posterior is close to Gaussian), the Jaakkola-Jordan bound's {100 * jj.min():.0f}-"
            f"{100 * jj.max():.0f}%: the thesis' VFE is the compact one. GAP's sds differ from Laplace's by at most "
            f"{100 * gap_laplace:.0f}%, and GAP, the ELBO fit and NUTS agree on the means where Laplace (the mode) "
            f"sits slightly off.")


def plots(t1_runs, quad, mixtures, logreg, nuts_draws, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    for n_mc, style in ((1000, ":"), (10000, "-")):
        trace = t1_runs[n_mc][0][2]
        ax[0].plot([s for s, _ in trace], [d for _, d in trace], style, lw=0.8, label=f"MC, {n_mc} draws")
    ax[0].plot(np.arange(1, len(quad[2]) + 1), quad[2], "k", lw=1.2, label="quadrature")
    ax[0].set(xlabel="iteration", ylabel="spherical Fisher distance", yscale="log")
    ax[0].legend()
    x = np.linspace(-10, 10, 2001)
    ax[1].plot(x, density("t1", x), "k", label="t(1)")
    mu, s2 = np.mean([r[0] for r in t1_runs[10000]]), np.mean([r[1] for r in t1_runs[10000]])
    ax[1].plot(x, np.exp(-(x - mu) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2), label=f"GAP N({mu:.3f}, {s2:.3f})")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(folder / "gap_t1.png", dpi=110)

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, (name, (fits, _, _)) in zip(axes, mixtures.items()):
        x = np.linspace(-5, 20 if name == "far_bimodal" else 10, 2001)
        ax.plot(x, density(name, x), "k", lw=2, label="target")
        for label, (mu, s2) in fits.items():
            ax.plot(x, np.exp(-(x - mu) ** 2 / (2 * s2)) / math.sqrt(2 * math.pi * s2), lw=1, label=label)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "gap_mixtures.png", dpi=110)

    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot(nuts_draws[:, 1], nuts_draws[:, 2], ".", ms=1, alpha=0.3, color="gray", label="NUTS draws")
    t = np.linspace(0, 2 * math.pi, 200)
    for label, (mean, cov) in logreg.items():
        vals, vecs = np.linalg.eigh(cov[1:, 1:])
        ellipse = mean[1:, None] + vecs @ (2 * np.sqrt(vals)[:, None] * np.stack([np.cos(t), np.sin(t)]))
        ax.plot(ellipse[0], ellipse[1], label=f"{label} (2 sd)")
    ax.set(xlabel="beta_1", ylabel="beta_2")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "gap_logreg.png", dpi=110)


if __name__ == "__main__":
    sys.exit(main())
