"""Draws saved while a run samples, so that a run killed without warning (SIGKILL, out of memory, a
preempted node) keeps what it drew.

Every ``checkpoint_every`` retained draws, the draws since the last save go to the run's artifacts
as ``checkpoint/draws_<first>-<end>.npy``, an array (chains, end - first, dim): chunks are only
ever added, never rewritten, so a kill during a save loses at most the chunk being written. A run
that ends normally logs all its draws as ``draws.nc`` and removes the folder;
:func:`load_draws` joins the chunks of a killed run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

FOLDER = "checkpoint"
CHUNK = re.compile(r"draws_(\d+)-(\d+)\.npy$")


@dataclass
class DrawCheckpoint:
    """Saves chunks of draws through ``save`` (a path -> the run's ``checkpoint`` folder)."""

    every: int
    save: Callable[[Path], None]
    scratch: Path  # where a chunk is written before ``save`` copies it
    saved: int = 0  # draws per chain already saved

    def update(self, kept: list[torch.Tensor]) -> None:
        """Save the draws in ``kept`` (each (chains, dim)) beyond those saved, once ``every`` of them
        have gathered."""
        if len(kept) - self.saved < self.every:
            return
        path = self.scratch / f"draws_{self.saved:07d}-{len(kept):07d}.npy"
        np.save(path, torch.stack(kept[self.saved:], dim=1).numpy())
        self.save(path)
        path.unlink()
        self.saved = len(kept)


def load_draws(folder: Path) -> np.ndarray:
    """The draws (chains, draws, dim) of a checkpoint folder: its chunks, in order, up to the first gap."""
    chunks = sorted((int(m.group(1)), int(m.group(2)), p) for p in Path(folder).iterdir()
                    if (m := CHUNK.search(p.name)))
    arrays, expected = [], 0
    for first, end, path in chunks:
        if first != expected:
            break
        arrays.append(np.load(path))
        expected = end
    if not arrays:
        raise FileNotFoundError(f"no draws_<first>-<end>.npy chunks in {folder}")
    return np.concatenate(arrays, axis=1)
