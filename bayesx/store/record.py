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

import numpy as np


@dataclass(frozen=True)
class Summary:
    """What a person reads about the run, on the terminal and in the store.

    shown      the metrics the run's summary prints, in order (the family's choice)
    compared   the few that `bayesx compare` tabulates for this run
    warnings   plain-language problems the run survived (R-hat, divergences, k-hat, ...)
    remarks    sentences about the evaluation (why a metric is absent) and the reference posterior
    description  the run's note for a person browsing the store: its key metrics rounded, what its
               errors were measured against, its warnings in full (markdown; bayesx.store.run_note)
    posterior  the per-parameter posterior summary as printed (its first parameters; posterior_summary.csv: all)
    """

    shown: tuple[str, ...] = ()
    compared: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()
    description: str = ""
    posterior: tuple[str, ...] = ()  # the per-parameter posterior summary's lines (bayesx.diagnostics.summary)


@dataclass(frozen=True)
class Artifact:
    """A file of the run, logged under ``folder`` of its artifacts (None: the top level)."""

    path: Path
    folder: str | None = None


@dataclass(frozen=True)
class DataInput:
    """One split of the data set a run was fitted or evaluated on, as the store lists it.

    name      the data choice (digits, mnist01, csv, ...)
    context   what the run did with it: ``training`` or ``test``
    digest    a digest of the split's content (bayesx.store.provenance.content_digest): equal digests, equal data
    origin    where the data came from (a file, a download, scikit-learn, a generator)
    features, targets  the split's arrays (the store records their shapes and types, not the values)
    """

    name: str
    context: str
    digest: str
    origin: str
    features: np.ndarray
    targets: np.ndarray | None = None


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
    not_finite metrics the run computed as NaN or infinite: not stored (a metric that does not apply is
               absent), named in the summary's remarks
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
    not_finite: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunStart:
    """What a run is opened with, before its method runs: its name, the tags that identify it (method,
    model, data, device, provenance), its flattened config as params and the config file, the sweep it
    belongs to, the killed run it continues (``resume_run_id``) and the data it uses (``datasets``)."""

    name: str
    tags: dict[str, str]
    params: dict[str, object]
    config_text: str
    parent_run_id: str | None = None
    resume_run_id: str | None = None
    datasets: tuple[DataInput, ...] = ()
