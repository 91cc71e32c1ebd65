"""What a method hands back: its family's typed output, and the runner's :class:`Result`.

Every family's output (bayesx.methods.mcmc.family.Draws, bayesx.methods.vi.family.Fit,
bayesx.methods.vae.family.TrainedModel) is an :class:`Outcome` plus its main value; the family's
``infer`` turns it into the one :class:`Result` the runner records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
from torch import Tensor


@dataclass(kw_only=True)
class Outcome:
    """What every run of a method carries beside its main value (keywords only, so that a family's
    output names its main value first); knows nothing of MLflow.

    metrics       scalar summaries named as in the metric table (step_size, accept_rate, ...)
    timings       seconds per stage: warmup_time_s, sampling_time_s, ...
    traces        stepped metrics: name -> list of (step, value)
    artifacts     extra files the method wrote: artifact sub-folder -> paths
    tags          strings describing the run (kernels, q_family, stopped_during, ...)
    fitted        fitted quantities worth keeping, e.g. the adapted inverse mass matrix
    warnings      problems the run survived, recorded in the run and printed with the summary
    interrupted   True when the run was stopped by Ctrl-C or SIGTERM; the rest holds what was done
    error         a one-line reason the method stopped early (e.g. a NaN loss): the runner records
                  what the result holds, then marks the run FAILED with this message
    """

    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    traces: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    artifacts: dict[str, list[Path]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    fitted: dict[str, Tensor] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    interrupted: bool = False
    error: str | None = None

    def outcome(self) -> dict:
        """The :class:`Outcome` fields of this value, as keywords for another output (e.g. a Result)."""
        return {f.name: getattr(self, f.name) for f in fields(Outcome)}


@dataclass
class Result(Outcome):
    """What ``method.infer`` returns to the runner: draws (chains, draws, dim) on the CPU, or None
    (a trainer, or a run stopped before it drew), their per-draw sampler statistics, each (chains,
    draws) (accept_prob, divergent, ...; empty where no sampler made them), and the run's
    :class:`Outcome`."""

    draws: Tensor | None = None
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
