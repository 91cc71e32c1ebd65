"""Image grids of trained VAEs (artifacts of a run)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def tile(images: np.ndarray, columns: int | None = None) -> np.ndarray:
    """(N, C, H, W) in [0, 1] -> one (rows H, columns W[, 3]) mosaic."""
    n, c, h, w = images.shape
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    canvas = np.ones((rows * (h + 1), columns * (w + 1), c), dtype=np.float32)
    for i, image in enumerate(images):
        r, k = divmod(i, columns)
        canvas[r * (h + 1): r * (h + 1) + h, k * (w + 1): k * (w + 1) + w] = np.transpose(image, (1, 2, 0))
    return canvas[..., 0] if c == 1 else canvas


def _save(mosaic: np.ndarray, title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 6 * mosaic.shape[0] / mosaic.shape[1] + 0.4))
    ax.imshow(np.clip(mosaic, 0, 1), cmap="gray" if mosaic.ndim == 2 else None, vmin=0, vmax=1)
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def image_grid(images: np.ndarray, path: Path, title: str) -> Path:
    return _save(tile(images), title, path)


def reconstructions(originals: np.ndarray, recon: np.ndarray, path: Path) -> Path:
    """Originals in the odd rows, their reconstructions (decoder mean at the encoder mean) below."""
    n = min(len(originals), 32)
    columns = 8
    pairs = []
    for start in range(0, n, columns):
        pairs += [originals[start:start + columns], recon[start:start + columns]]
    return _save(tile(np.concatenate(pairs), columns), "test images (rows 1, 3, ...) and reconstructions", path)
