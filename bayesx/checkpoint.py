"""Draws saved while a run samples, so that a run killed without warning (SIGKILL, out of memory, a
preempted node) keeps what it drew and can be resumed (``resume=<run_id>``).

Every ``checkpoint_every`` retained draws, the draws since the last save go to the run's artifacts
as ``checkpoint/draws_<first>-<end>.npy``, an array (chains, end - first, dim), with the sampler's
per-draw statistics as ``stats_<first>-<end>.npz`` and the sampler's state after draw ``end`` as
``state_<end>.pt`` (positions, step size, inverse mass matrix, the generator's state, the next
iteration). Files are only ever added, never rewritten, so a kill during a save loses at most the
chunk being written. A run that ends normally logs all its draws as ``draws.nc`` and removes the
folder. :func:`load_draws` joins the chunks of a killed run; :func:`load_resume` also reads the
state to continue from.
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
    """Saves chunks of draws, statistics and the sampler's state through ``save`` (a path -> the run's
    ``checkpoint`` folder)."""

    every: int
    save: Callable[[Path], None]
    scratch: Path  # where files are written before ``save`` copies them
    saved: int = 0  # draws per chain already saved

    def update(self, kept: list[torch.Tensor], stats: dict[str, list[np.ndarray]] | None = None,
               state: Callable[[], dict] | None = None) -> None:
        """Save the draws in ``kept`` (each (chains, dim)) beyond those saved, with their statistics
        (name -> one (chains,) array per draw) and ``state()``, once ``every`` of them have gathered."""
        end = len(kept)
        if end - self.saved < self.every:
            return
        span = f"{self.saved:07d}-{end:07d}"
        files = [self.scratch / f"draws_{span}.npy"]
        np.save(files[0], torch.stack(kept[self.saved:], dim=1).numpy())
        if stats:
            files.append(self.scratch / f"stats_{span}.npz")
            np.savez(files[-1], **{k: np.stack(v[self.saved:], axis=1) for k, v in stats.items()})
        if state is not None:
            files.append(self.scratch / f"state_{end:07d}.pt")
            torch.save(state(), files[-1])
        for path in files:  # the state last: a state file means its draws are saved
            self.save(path)
            path.unlink()
        self.saved = end


def _chunks(folder: Path) -> list[tuple[int, int, Path]]:
    """The contiguous draw chunks from draw 0 on, in order (up to the first gap)."""
    found = sorted((int(m.group(1)), int(m.group(2)), p) for p in Path(folder).iterdir()
                   if (m := CHUNK.search(p.name)))
    out, expected = [], 0
    for first, end, path in found:
        if first != expected:
            break
        out.append((first, end, path))
        expected = end
    return out


def load_draws(folder: Path) -> np.ndarray:
    """The draws (chains, draws, dim) of a checkpoint folder: its chunks, in order, up to the first gap."""
    chunks = _chunks(folder)
    if not chunks:
        raise FileNotFoundError(f"no draws_<first>-<end>.npy chunks in {folder}")
    return np.concatenate([np.load(path) for _, _, path in chunks], axis=1)


@dataclass
class Resume:
    """What a killed run had: its draws, their statistics, and the sampler's state after the last one."""

    draws: np.ndarray  # (chains, draws, dim)
    stats: dict[str, np.ndarray]  # name -> (chains, draws)
    state: dict


def load_resume(folder: Path) -> Resume | None:
    """The latest point a run can continue from: the longest run of chunks whose state was saved; None
    when there is none (killed before its first checkpoint)."""
    chunks = _chunks(folder)
    while chunks and not (Path(folder) / f"state_{chunks[-1][1]:07d}.pt").is_file():
        chunks.pop()
    if not chunks:
        return None
    end = chunks[-1][1]
    draws = np.concatenate([np.load(path) for _, _, path in chunks], axis=1)
    stats: dict[str, list[np.ndarray]] = {}
    for first, last, _ in chunks:
        stats_path = Path(folder) / f"stats_{first:07d}-{last:07d}.npz"
        if stats_path.is_file():
            with np.load(stats_path) as saved:
                for name in saved.files:
                    stats.setdefault(name, []).append(saved[name])
    state = torch.load(Path(folder) / f"state_{end:07d}.pt", weights_only=True)
    return Resume(draws, {k: np.concatenate(v, axis=1) for k, v in stats.items()}, state)
