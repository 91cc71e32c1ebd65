"""Trace and marginal plots written as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def trace_and_marginals(draws: np.ndarray, coords: list[int], name: str, path: Path,
                        coordinate_names: list[str] | None = None) -> Path:
    """One row per coordinate: the trace of every chain (left) and its histogram (right)."""
    n = len(coords)
    fig, axes = plt.subplots(n, 2, figsize=(10, 2.2 * n), squeeze=False)
    for row, j in enumerate(coords):
        for chain in range(draws.shape[0]):
            axes[row, 0].plot(draws[chain, :, j], lw=0.6, alpha=0.8)
            axes[row, 1].hist(draws[chain, :, j], bins=40, histtype="step", density=True)
        axes[row, 0].set_ylabel(coordinate_names[j] if coordinate_names else f"{name}[{j}]")
    axes[0, 0].set_title("trace (one colour per chain)")
    axes[0, 1].set_title("marginal density")
    axes[-1, 0].set_xlabel("draw")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def latent_trajectory(latent_draws: np.ndarray, latent_path: np.ndarray, draws: np.ndarray, decoded_path: np.ndarray,
                      path: Path) -> Path:
    """Left: pre-samples encoded to the first two latent coordinates and one latent leapfrog
    trajectory; right: the pre-samples and the decoded trajectory in the first original coordinates
    (3-D when there are three), where the trajectory lies on the decoder's manifold."""
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
