"""What a method hands back to the runner."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from torch import Tensor


@dataclass
class Result:
    """Draws or a fitted approximation, plus traces and timings; knows nothing of MLflow.

    draws         (chains, draws, dim) posterior draws, on the CPU, or None
    sample_stats  per-draw sampler statistics, each (chains, draws): accept_prob, divergent, ...
    metrics       scalar summaries named as in the metric table (step_size, accept_rate, ...)
    timings       seconds per stage: warmup_time_s, sampling_time_s, ...
    traces        stepped metrics: name -> list of (step, value)
    artifacts     extra files the method wrote: artifact sub-folder -> paths
    fitted        fitted quantities worth keeping, e.g. the adapted inverse mass matrix
    warnings      problems the run survived, recorded in the run and printed with the summary
    interrupted   True when the run was stopped by Ctrl-C or SIGTERM; the rest holds what was done
    error         a one-line reason the method stopped early (e.g. a NaN loss): the runner records
                  what the result holds, then marks the run FAILED with this message
    """

    draws: Tensor | None = None
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    traces: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    artifacts: dict[str, list[Path]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    fitted: dict[str, Tensor] = field(default_factory=dict)  # e.g. the adapted inverse mass matrix
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False
    error: str | None = None
