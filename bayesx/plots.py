"""Trace and marginal plots written as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def trace_and_marginals(draws: np.ndarray, coords: list[int], name: str, path: Path) -> Path:
    """One row per coordinate: the trace of every chain (left) and its histogram (right)."""
    n = len(coords)
    fig, axes = plt.subplots(n, 2, figsize=(10, 2.2 * n), squeeze=False)
    for row, j in enumerate(coords):
        for chain in range(draws.shape[0]):
            axes[row, 0].plot(draws[chain, :, j], lw=0.6, alpha=0.8)
            axes[row, 1].hist(draws[chain, :, j], bins=40, histtype="step", density=True)
        axes[row, 0].set_ylabel(f"{name}[{j}]")
    axes[0, 0].set_title("trace (one colour per chain)")
    axes[0, 1].set_title("marginal density")
    axes[-1, 0].set_xlabel("draw")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
