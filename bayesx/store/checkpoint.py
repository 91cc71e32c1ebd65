"""What a run saves while it runs, so that a run killed without warning (SIGKILL, out of memory, a
preempted node) keeps what it had and can be resumed (``resume=<run_id>``): an MCMC run's draws,
a trainer's epochs.

Every ``checkpoint_every`` retained draws, the draws since the last save go to the run's artifacts
as ``checkpoint/draws_<first>-<end>.npy``, an array (chains, end - first, dim), with the sampler's
per-draw statistics as ``stats_<first>-<end>.npz`` and the sampler's state after draw ``end`` as
``state_<end>.pt`` (positions, step size, inverse mass matrix, the generator's state, the next
iteration). Files are only ever added, never rewritten, so a kill during a save loses at most the
chunk being written. A run that ends normally logs all its draws as ``draws.nc`` and removes the
folder. :func:`load_draws` joins the chunks of a killed run; :func:`load_resume` also reads the
state to continue from.

After a Ctrl-C, the run still records what it had (its metrics, ``draws.nc``, plots): a second Ctrl-C
while it does so only says so (:func:`patient_interrupts`); a third stops it, and the run keeps only
this folder (:class:`RecordingStopped` says that in its line). A Ctrl-C or SIGTERM that comes once the method
has finished (its draws all made) does not stop the recording either (:func:`recording`): the run is stored
whole, and the command stops after it.

A damaged file (a kill or a full disk while it was copied) is passed over: a resumed run goes on from the last
intact state before it (:attr:`Resume.damaged` names it). Every state keeps the run's wall time when it was saved
(``WALL_TIME``), from which a resumed run's ``wall_time_s`` goes on, as its ``sampling_time_s`` does.

A method of several stages (AE-HMC, AE-pCN, DA-pCN: pre-sampling and training, then the sampler in the latent
space) saves what its finished stages made as ``checkpoint/stage_<name>.pt`` (:meth:`RunCheckpoint.stage`: the
pre-samples, the trained network, the generator's state), so that a resumed run does not make them again; its
last stage's draws are checkpointed as any sampler's.

A trainer saves its whole state after each epoch (weights, optimizer, schedule, random states,
the metric history) as ``checkpoint/epoch_a.pt`` or ``epoch_b.pt``, alternately, so that a kill
while one is being copied leaves the other intact; its per-epoch metrics go to the run as they
come (``log``), so a killed run's history is there and a resumed one continues it at the next step.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bayesx.errors import InterruptKept

FOLDER = "checkpoint"
WALL_TIME = "run_wall_time_s"  # in every saved state: the run's wall time when it was saved (a resumed run goes on from it)
CHUNK = re.compile(r"draws_(\d+)-(\d+)\.npy$")
STAGE = re.compile(r"stage_(\w+)\.pt$")
EPOCH_SLOTS = ("epoch_a.pt", "epoch_b.pt")


@dataclass
class RunCheckpoint:
    """Saves chunks of draws, statistics and the sampler's state, or a trainer's epochs, through
    ``save`` (a path -> the run's ``checkpoint`` folder); ``log`` records metrics at a step as they come."""

    every: int
    save: Callable[[Path], None]
    scratch: Path  # where files are written before ``save`` copies them
    log: Callable[[dict[str, float], int], None] | None = None
    clock: Callable[[], float] | None = None  # the run's wall time so far, kept with each state (WALL_TIME)
    saved: int = 0  # draws per chain already saved
    logged_until: int = 0  # the last step whose metrics ``log`` recorded

    def _timed(self, state: dict) -> dict:
        return {**state, WALL_TIME: self.clock()} if self.clock is not None else state

    def stage(self, name: str, state: dict) -> None:
        """After a finished stage of a method of several (pre-sampling and training): what it made, so that a
        resumed run starts after it (:attr:`Resume.stages`)."""
        path = self.scratch / f"stage_{name}.pt"
        torch.save(self._timed(state), path)
        self.save(path)
        path.unlink()

    def epoch(self, epoch: int, state: dict, metrics: dict[str, float]) -> None:
        """After a trainer's epoch: its metrics to the run at step ``epoch``, its state to a slot."""
        if self.log is not None:
            self.log(metrics, epoch)
            self.logged_until = epoch
        path = self.scratch / EPOCH_SLOTS[epoch % 2]
        torch.save(self._timed({**state, "epoch": epoch}), path)
        self.save(path)
        path.unlink()

    def update(self, draws: torch.Tensor | np.ndarray, stats: dict[str, np.ndarray] | None = None,
               state: Callable[[], dict] | None = None) -> None:
        """Save the draws (chains, n, dim) beyond those saved, with their statistics (name -> (chains, n)) and
        ``state()``, once ``every`` of them have gathered."""
        end = draws.shape[1]
        if end - self.saved < self.every:
            return
        span = f"{self.saved:07d}-{end:07d}"
        files = [self.scratch / f"draws_{span}.npy"]
        np.save(files[0], np.asarray(draws[:, self.saved:]))
        if stats:
            files.append(self.scratch / f"stats_{span}.npz")
            np.savez(files[-1], **{k: v[:, self.saved:] for k, v in stats.items()})
        if state is not None:
            files.append(self.scratch / f"state_{end:07d}.pt")
            torch.save(self._timed(state()), files[-1])
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


def _damage(path: Path, exc: BaseException) -> str:
    """What is wrong with a checkpoint file that did not load, in a few words."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{path.name} is damaged ({type(exc).__name__}{': ' + text[:100] if text else ''})"


def _intact_chunks(folder: Path) -> tuple[list[tuple[int, np.ndarray, dict[str, np.ndarray]]], str | None]:
    """The contiguous chunks from draw 0 on that load, each (end, draws, stats), up to the first gap or the
    first damaged file (a draws or statistics file that does not load: a kill or a full disk while it was being
    copied), and what was damaged (None: nothing)."""
    out = []
    for first, end, path in _chunks(folder):
        stats_path, reading = Path(folder) / f"stats_{first:07d}-{end:07d}.npz", path
        try:
            draws, stats = np.load(path), {}
            if stats_path.is_file():
                reading = stats_path
                with np.load(stats_path) as saved:
                    stats = {name: saved[name] for name in saved.files}
        except Exception as exc:  # noqa: BLE001 - any failure to read a file means it is damaged
            return out, _damage(reading, exc)
        if draws.ndim != 3 or draws.shape[1] != end - first or (out and draws.shape[::2] != out[0][1].shape[::2]):
            return out, f"{path.name} is damaged (its shape is {draws.shape}, not {end - first} draws like the others)"
        out.append((end, draws, stats))
    return out, None


def load_draws(folder: Path) -> np.ndarray:
    """The draws (chains, draws, dim) of a checkpoint folder: its chunks, in order, up to the first gap or
    damaged chunk."""
    chunks, _ = _intact_chunks(folder)
    if not chunks:
        raise FileNotFoundError(f"no intact draws_<first>-<end>.npy chunks in {folder}")
    return np.concatenate([draws for _, draws, _ in chunks], axis=1)


@dataclass
class Resume:
    """What a killed run had: a sampler's draws, their statistics and its state after the last one, or
    a trainer's state after its last epoch (no draws), and what a method of several stages made in those it
    finished (``stages``: name -> state; a run killed in its last stage before a draw was saved has only these).
    ``damaged`` says which later checkpoint files did not load and were passed over (None: none were)."""

    draws: np.ndarray | None  # (chains, draws, dim)
    stats: dict[str, np.ndarray]  # name -> (chains, draws)
    state: dict
    damaged: str | None = None
    stages: dict[str, dict] = field(default_factory=dict)

    def where(self) -> str:
        """Where a resumed run goes on from, in a few words."""
        if "epoch" in self.state:
            return f"epoch {self.state['epoch']}"
        if self.draws is not None:
            return f"draw {self.draws.shape[1]}"
        return "the end of its " + " and ".join(self.stages)


def _latest_epoch(folder: Path) -> tuple[dict | None, str | None]:
    """The later of the two epoch slots that loads (a kill during a copy can damage one), and what was damaged."""
    states, damaged = [], None
    for name in EPOCH_SLOTS:
        path = Path(folder) / name
        if not path.is_file():
            continue
        try:
            states.append(torch.load(path, weights_only=True))
        except Exception as exc:  # noqa: BLE001 - any failure to read it means it is damaged
            damaged = _damage(path, exc)
    return (max(states, key=lambda s: s["epoch"]) if states else None), damaged


def _finished_stages(folder: Path) -> tuple[dict[str, dict], str | None]:
    """The stages a method of several finished (``stage_<name>.pt`` that load), and what was damaged."""
    stages, damaged = {}, None
    for path in sorted(Path(folder).iterdir()):
        if (m := STAGE.search(path.name)) is None:
            continue
        try:
            stages[m.group(1)] = torch.load(path, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure to read it means it is damaged
            damaged = _damage(path, exc)
    return stages, damaged


def load_resume(folder: Path) -> Resume | None:
    """The latest point a run can continue from: a trainer's last epoch, or the longest run of intact draw chunks
    whose state was saved and loads, with the stages finished before them (a method of several stages: those alone
    where no draw was saved yet); None when there is none (killed before its first checkpoint, or every
    checkpoint damaged). A damaged file (a kill or a full disk while it was being copied) is passed over for the
    last intact state before it, and named in the Resume's ``damaged``."""
    epoch_state, damaged = _latest_epoch(folder)
    if epoch_state is not None:
        return Resume(None, {}, epoch_state, damaged)
    stages, damaged_stage = _finished_stages(folder)
    resumed = _resume_from_chunks(folder)
    if resumed is None:
        return Resume(None, {}, {}, damaged_stage, stages) if stages else None
    resumed.stages, resumed.damaged = stages, resumed.damaged or damaged_stage
    return resumed


def _resume_from_chunks(folder: Path) -> Resume | None:
    """The longest run of intact draw chunks whose state was saved and loads (None: none)."""
    chunks, damaged = _intact_chunks(folder)
    while chunks:
        path = Path(folder) / f"state_{chunks[-1][0]:07d}.pt"
        if path.is_file():  # a chunk without a state: killed before its state was saved (the state comes last)
            try:
                state = torch.load(path, weights_only=True)
                break
            except Exception as exc:  # noqa: BLE001 - any failure to read it means it is damaged
                damaged = damaged or _damage(path, exc)
        chunks.pop()
    else:
        return None
    names = {name for _, _, stats in chunks for name in stats}
    stats = {name: np.concatenate([s[name] for _, _, s in chunks if name in s], axis=1) for name in names}
    return Resume(np.concatenate([draws for _, draws, _ in chunks], axis=1), stats, state, damaged)


class RecordingStopped(InterruptKept):
    """Another Ctrl-C or SIGTERM stopped the run while it recorded what it had: the line says what it kept."""


KEPT_ONLY_CHECKPOINT = ("the run is marked KILLED in MLflow and keeps only its checkpoint (the draws saved every "
                        "checkpoint_every, if any), not its metrics or draws.nc")


RECORDING_NOTICE = ("bayesx: interrupted; recording what the run had (its metrics and draws) - interrupt once more "
                    "to stop without them")


@dataclass
class Interrupts:
    """The Ctrl-Cs a run's block has seen (:func:`patient_interrupts`), and the signal that came while it recorded
    what it had (:func:`recording`; None: none did)."""

    count: int = 0
    deferred: int | None = None
    last_signal: int = signal.SIGINT  # the signal a handler saw last (sent again where its exception was lost)


REDELIVERY_S = 0.01
"""Seconds after which a signal whose handler's exception Python lost (:func:`redelivered_when_lost`) is sent again."""


@contextlib.contextmanager
def redelivered_when_lost(seen: Interrupts, uncount: bool) -> Iterator[None]:
    """Within the block, a KeyboardInterrupt or RecordingStopped that a signal handler raised while the interpreter ran
    a finalizer (a weakref callback, a ``__del__``) is not lost: Python reports such an exception as "ignored" (a
    traceback on standard error, CI stop 61) and goes on; here that report is not printed, and the same signal is
    sent again a moment later, when the main thread is back in ordinary code. ``uncount``: the handler counts its
    signals (:func:`patient_interrupts`), so the lost one is taken off the count first."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, RecordingStopped)):
            if uncount:
                seen.count -= 1
            threading.Timer(REDELIVERY_S, os.kill, (os.getpid(), seen.last_signal)).start()
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


@contextlib.contextmanager
def patient_interrupts() -> Iterator[Interrupts]:
    """Within the block, the first Ctrl-C interrupts as usual (KeyboardInterrupt: the method stops and
    the run records what it had); the second only prints that the recording goes on, so that an impatient
    double Ctrl-C keeps the run's metrics and draws; the third raises :class:`RecordingStopped`. While the run
    records (:func:`recording`), Ctrl-C and SIGTERM are counted there."""
    seen = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum, frame):
        seen.count += 1
        seen.last_signal = signum
        if seen.count == 1:
            raise KeyboardInterrupt
        if seen.count == 2:
            print(RECORDING_NOTICE, file=sys.stderr, flush=True)
            return
        raise RecordingStopped(KEPT_ONLY_CHECKPOINT)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with redelivered_when_lost(seen, uncount=True):
            yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def recording(seen: Interrupts) -> Iterator[Interrupts]:
    """Within the block, the run records what its method returned (its metrics, draws, plots: seconds), and an
    interrupt does not stop that: the first Ctrl-C or SIGTERM only says so, and is kept as ``seen.deferred`` (the
    caller stops once the run is stored); the next stops the recording (:class:`RecordingStopped`). A run whose
    method had finished before the signal thus keeps its draws and metrics; one whose sampling a Ctrl-C stopped
    (``seen``, from :func:`patient_interrupts`) keeps them through one more, as before, whenever it comes."""
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return

    def handler(signum, frame):
        seen.last_signal = signum
        if seen.deferred is None and seen.count < 2:  # a second Ctrl-C before the recording began was told already
            seen.deferred = signum
            print(RECORDING_NOTICE, file=sys.stderr, flush=True)
            return
        raise RecordingStopped(KEPT_ONLY_CHECKPOINT)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with redelivered_when_lost(seen, uncount=False):
            yield seen
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
