"""Figures of the elliptic inverse problem (artifacts of a run)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _grid(model, values: np.ndarray) -> np.ndarray:
    """P2 values on a uniform n x n mesh sit on a (2n+1)^2 grid; arrange them as an image."""
    side = 2 * model.mesh + 1
    ij = np.rint(model.dof_coordinates * (side - 1)).astype(int)
    image = np.full((side, side), np.nan)
    image[ij[:, 1], ij[:, 0]] = values
    return image


def _field(ax, model, values, title, cmap="viridis"):
    im = ax.imshow(_grid(model, values), origin="lower", extent=(0, 1, 0, 1), cmap=cmap)
    ax.set_title(title, fontsize=10)
    plt.colorbar(im, ax=ax, fraction=0.046)
    return im


def true_field(model, path: Path) -> Path:
    """Deep MCMC Figure 4: the true log-transmissivity and the observations at the 25 sensors."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    _field(axes[0], model, model.true_u, "true log-transmissivity u0")
    sc = axes[1].scatter(model.sensors[:, 0], model.sensors[:, 1], c=model.observations, s=140, cmap="coolwarm",
                         edgecolors="k")
    axes[1].set(xlim=(0, 1), ylim=(0, 1), aspect="equal", title=f"25 observations (noise sd {model.noise_sd:g})")
    plt.colorbar(sc, ax=axes[1], fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def posterior_fields(model, mean: np.ndarray, sd: np.ndarray, path: Path) -> Path:
    """The true field beside the posterior mean and standard deviation fields."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    _field(axes[0], model, model.true_u, "true field")
    _field(axes[1], model, mean, "posterior mean")
    _field(axes[2], model, sd, "posterior standard deviation", cmap="magma")
    for ax in axes:
        ax.plot(model.sensors[:, 0], model.sensors[:, 1], "w.", ms=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def log_likelihood_trace(trace: np.ndarray, source: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for chain in np.atleast_2d(trace):
        ax.plot(chain, lw=0.7)
    ax.set(xlabel=f"draw ({source})", ylabel="log-likelihood (negative misfit)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
