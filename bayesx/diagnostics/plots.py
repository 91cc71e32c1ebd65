"""A run's plots by method family, written as PNG files (matplotlib Agg; ArviZ draws the sampler plots).

    sampler        trace.png    trace and density of the k lowest-ESS coordinates, one colour per chain, divergent
                                transitions marked under the trace (ArviZ ``plot_trace``)
                   rank.png     rank histograms of the same coordinates (Vehtari, Gelman, Simpson, Carpenter and
                                Buerkner 2021, "Rank-normalization, folding, and localization"): flat bars when the
                                chains mix, skewed ones when a chain sits apart
                   energy.png   Hamiltonian samplers (``energy`` among the sample statistics): the marginal energy
                                against the energy transitions, with the Bayesian fraction of missing information
                                per chain, BFMI = E[(E_t - E_{t-1})^2] / Var(E) (Betancourt 2016, "Diagnosing
                                suboptimal cotangent disintegrations in Hamiltonian Monte Carlo"); below 0.3 the
                                momentum resampling explores the energy levels slowly
    approximation  marginals.png  the marginals of the k coordinates whose means sit furthest from the reference
                                posterior's, |mean_j - mean_ref_j| / sd_ref_j, over the reference's normal density
                                N(mean_ref_j, sd_ref_j^2) (bayesx.methods.reference keeps the reference's moments); the
                                Pareto k-hat of the importance weights in the title. Independent draws get no trace
    trainer        elbo.png     the ELBO per epoch (train, and test where evaluated)

Figures are small and few (``plots.n_coords`` coordinates) so a run spends well under a second or two on them.
matplotlib (with the Agg backend) and ArviZ load when the first plot is drawn (bayesx.diagnostics.lazy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bayesx.diagnostics.lazy import arviz, pyplot

BFMI_LIMIT = 0.3  # Betancourt (2016): below this the energy is explored poorly
DPI = 80


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def _label(coordinate_names: list[str] | None, name: str, j: int) -> str:
    return coordinate_names[j] if coordinate_names else f"{name}[{j}]"


# --- samplers ---------------------------------------------------------------------------------------
def _selected(draws: np.ndarray, sample_stats: dict, coords: list[int], name: str,
              coordinate_names: list[str] | None):
    """An InferenceData with only the chosen coordinates (as their own named variables, so ArviZ titles them)."""
    az = arviz()
    posterior = {_label(coordinate_names, name, j): np.asarray(draws[:, :, j]) for j in coords}
    stats = {k: np.asarray(v) for k, v in (sample_stats or {}).items() if np.asarray(v).ndim == 2}
    if "divergent" in stats:
        stats["diverging"] = stats.pop("divergent").astype(bool)
    return az.from_dict(posterior=posterior, sample_stats=stats or None)


def sampler_trace(idata, n_divergent: int, path: Path) -> Path:
    """ArviZ's trace plot: density (left) and trace (right) per coordinate, one colour per chain; divergent
    transitions as ticks under the trace."""
    az = arviz()
    n = len(idata.posterior.data_vars)
    axes = az.plot_trace(idata, compact=False, divergences="bottom", figsize=(9, 1.9 * n + 0.6),
                         backend_kwargs={"layout": "constrained"})
    fig = np.asarray(axes).flat[0].figure
    marked = f"{n_divergent} divergent transitions marked under the trace" if n_divergent else "no divergent transitions"
    fig.suptitle(f"lowest-ESS coordinates ({marked})", fontsize=10)
    return _save(fig, path)


def sampler_rank(idata, path: Path) -> Path:
    """Rank histograms per chain of each coordinate (ArviZ ``plot_rank``): uniform when the chains agree."""
    az = arviz()
    n = len(idata.posterior.data_vars)
    ncols = min(n, 4)
    axes = az.plot_rank(idata, kind="bars", figsize=(2.6 * ncols, 2.4 * -(-n // ncols) + 0.5),
                        backend_kwargs={"layout": "constrained"})
    fig = np.asarray(axes).flat[0].figure
    fig.suptitle("rank plots of the lowest-ESS coordinates (flat: the chains mix)", fontsize=10)
    return _save(fig, path)


def sampler_energy(idata, path: Path) -> Path:
    """The marginal energy and the energy-transition densities (ArviZ ``plot_energy``), BFMI per chain."""
    az = arviz()
    bfmi = np.atleast_1d(az.bfmi(idata))
    ax = az.plot_energy(idata, figsize=(6, 3.6), bfmi=False)
    low = "" if bfmi.min() >= BFMI_LIMIT else f"; below {BFMI_LIMIT}: the energy is explored poorly"
    ax.set_title("Hamiltonian energy; BFMI per chain: " + ", ".join(f"{b:.2f}" for b in bfmi) + low, fontsize=9)
    ax.figure.set_layout_engine("constrained")
    return _save(ax.figure, path)


def sampler_plots(draws: np.ndarray, sample_stats: dict, coords: list[int], name: str, folder: Path,
                  coordinate_names: list[str] | None = None) -> list[Path]:
    """trace.png and rank.png of ``coords``; energy.png where the sampler records the energy."""
    idata = _selected(draws, sample_stats, coords, name, coordinate_names)
    n_divergent = int(np.sum(sample_stats["divergent"])) if "divergent" in (sample_stats or {}) else 0
    out = [sampler_trace(idata, n_divergent, folder / "trace.png")]
    if draws.shape[1] >= 4:  # ranks of fewer draws say nothing
        out.append(sampler_rank(idata, folder / "rank.png"))
    if "energy" in (sample_stats or {}) and draws.shape[1] >= 4:
        out.append(sampler_energy(idata, folder / "energy.png"))
    return out


# --- approximations ---------------------------------------------------------------------------------
def furthest_from_reference(draws: np.ndarray, mean: np.ndarray, sd: np.ndarray, k: int) -> list[int]:
    """The k coordinates whose mean sits furthest from the reference's, in reference sds."""
    flat = draws.reshape(-1, draws.shape[-1])
    err = np.abs(flat.mean(0) - mean) / np.maximum(sd, 1e-300)
    return [int(j) for j in np.argsort(-np.nan_to_num(err, nan=-np.inf))[:k]]


def approximation_marginals(draws: np.ndarray, coords: list[int], name: str, path: Path,
                            coordinate_names: list[str] | None = None, reference=None,
                            khat: float | None = None) -> Path:
    """Histograms of the approximation's draws of ``coords`` (pooled), each over the reference posterior's
    normal density N(mean_ref_j, sd_ref_j^2) where a reference is given; k-hat in the title."""
    flat = draws.reshape(-1, draws.shape[-1])
    ncols = min(len(coords), 4)
    nrows = -(-len(coords) // ncols)
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(2.6 * ncols, 2.2 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    for ax, j in zip(axes.flat, coords):
        ax.hist(flat[:, j], bins=40, density=True, color="C0", alpha=0.55, label="draws")
        title = _label(coordinate_names, name, j)
        if reference is not None:
            mu, s = float(reference.mean[j]), float(reference.sd[j])
            lo, hi = min(flat[:, j].min(), mu - 4 * s), max(flat[:, j].max(), mu + 4 * s)
            grid = np.linspace(lo, hi, 200)
            ax.plot(grid, np.exp(-0.5 * ((grid - mu) / s) ** 2) / (s * np.sqrt(2 * np.pi)), color="k", lw=1.2,
                    label="reference")
            title += f"  (mean off {abs(flat[:, j].mean() - mu) / s:.2g} sd)"
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_yticks([])
    for ax in list(axes.flat)[len(coords):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="best")
    against = ("over the reference posterior's N(mean, sd) (NUTS moments)" if reference is not None
               else "(no reference posterior to compare with)")
    shown = f"; psis_khat = {khat:.2f}" + (" > 0.7: q misses posterior mass" if khat > 0.7 else "") \
        if khat is not None and np.isfinite(khat) else ""
    fig.suptitle(f"marginals of the approximation {against}{shown}", fontsize=9)
    return _save(fig, path)


# --- trainers ---------------------------------------------------------------------------------------
def elbo_curves(traces: dict[str, list[tuple[int, float]]], path: Path) -> Path | None:
    """The per-epoch ELBO traces (``*elbo*``) against the epoch; None when the trainer recorded none."""
    curves = {k: v for k, v in traces.items() if "elbo" in k and v}
    if not curves:
        return None
    fig, ax = pyplot().subplots(figsize=(6, 3.4), layout="constrained")
    for key, points in curves.items():
        epochs, values = zip(*points)
        ax.plot(epochs, values, marker="o" if len(points) < 30 else None, ms=3, label=key)
    ax.set_xlabel("epoch")
    ax.set_ylabel("ELBO per data point")
    ax.set_title("ELBO by epoch (higher is better)", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


# --- a run's plots ----------------------------------------------------------------------------------
def run_plots(method, draws: np.ndarray | None, sample_stats: dict, traces: dict, k: int, folder: Path, name: str,
              coordinate_names: list[str] | None = None, reference=None, khat: float | None = None) -> list[Path]:
    """The plots of a run of ``method`` (its ``family`` picks them; module docstring) of ``k`` coordinates:
    a sampler's worst-mixing ones (``method.plot_coordinates``), an approximation's furthest from the reference
    (else ``method.plot_coordinates``). None when ``k`` is 0."""
    if k <= 0:
        return []
    if method.family == "trainer":
        return [p for p in [elbo_curves(traces or {}, folder / "elbo.png")] if p is not None]
    if draws is None or draws.shape[1] == 0:
        return []
    if method.family == "sampler":
        return sampler_plots(draws, sample_stats, method.plot_coordinates(draws, k), name, folder, coordinate_names)
    coords = (furthest_from_reference(draws, reference.mean, reference.sd, k) if reference is not None
              else method.plot_coordinates(draws, k))
    return [approximation_marginals(draws, coords, name, folder / "marginals.png", coordinate_names, reference, khat)]


def latent_trajectory(latent_draws: np.ndarray, latent_path: np.ndarray, draws: np.ndarray, decoded_path: np.ndarray,
                      path: Path) -> Path:
    """Left: pre-samples encoded to the first two latent coordinates and one latent leapfrog
    trajectory; right: the pre-samples and the decoded trajectory in the first original coordinates
    (3-D when there are three), where the trajectory lies on the decoder's manifold."""
    plt = pyplot()
    fig = plt.figure(figsize=(11, 4.8))
    ax = fig.add_subplot(1, 2, 1)
    ax.scatter(latent_draws[:, 0], latent_draws[:, 1], s=4, alpha=0.3, label="pre-samples, encoded")
    ax.plot(latent_path[:, 0], latent_path[:, 1], "-o", ms=3, color="C3", label="latent leapfrog")
    ax.set_xlabel("z[0]")
    ax.set_ylabel("z[1]")
    ax.set_title("latent space")
    ax.legend(loc="best", fontsize=8)
    three = draws.shape[1] >= 3
    ax = fig.add_subplot(1, 2, 2, projection="3d" if three else None)
    cols = (0, 1, 2) if three else (0, 1)
    ax.scatter(*(draws[:, c] for c in cols), s=3, alpha=0.25, label="pre-samples")
    ax.plot(*(decoded_path[:, c] for c in cols), "-o", ms=3, color="C3", label="decoded trajectory")
    ax.set_title("original space")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
