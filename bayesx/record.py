"""What the runner hands the tracker: one record per run, made once, stored in one call.

The runner knows the run (its config, its method's output, the target's evaluation); the tracker knows
the store (MLflow: params, tags, metrics, steps, artifacts). A :class:`RunRecord` is the whole of
what passes between them at the end of a run, so the runner never pushes pieces one call at a time,
and the tracker decides how each part is stored (which tags carry the summary, how long a param may
be). Nothing here imports MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Summary:
    """What a person reads about the run, on the terminal and in the store.

    shown      the metrics the run's summary prints, in order (the family's choice)
    compared   the few that `bayesx compare` tabulates for this run
    warnings   plain-language problems the run survived (R-hat, divergences, k-hat, ...)
    remarks    sentences about the evaluation (why a metric is absent) and the reference posterior
    """

    shown: tuple[str, ...] = ()
    compared: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Artifact:
    """A file of the run, logged under ``folder`` of its artifacts (None: the top level)."""

    path: Path
    folder: str | None = None


@dataclass(frozen=True)
class RunRecord:
    """Everything a finished, failed or interrupted run leaves in the store.

    status     FINISHED, KILLED (interrupted: it keeps what it had) or FAILED (the method stopped with
               an error, recorded as ``error``)
    metrics    final scalars; ``series`` the stepped ones (name -> (step, value)), whose steps the
               run's checkpoint logged already (up to ``logged_until``) are not repeated
    tags       what describes the run beyond its config (the method's, the target's, the reference's)
    artifacts  files to upload; ``discard`` artifact folders the run no longer needs (a complete run's
               checkpoint)
    """

    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    discard: tuple[str, ...] = ()
    summary: Summary = Summary()
    error: str | None = None
    logged_until: int = 0


@dataclass(frozen=True)
class RunStart:
    """What a run is opened with, before its method runs: its name, the tags that identify it (method,
    model, data, device, provenance), its flattened config as params and the config file, the sweep it
    belongs to, and the killed run it continues (``resume_run_id``)."""

    name: str
    tags: dict[str, str]
    params: dict[str, object]
    config_text: str
    parent_run_id: str | None = None
    resume_run_id: str | None = None
