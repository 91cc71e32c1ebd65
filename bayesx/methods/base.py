"""The method contract: every method belongs to one family, and the family is the contract.

The runner builds a method from its config, then only talks to it through :class:`Method`:

    check_fits(method, target, ...)            the family fits the model (a posterior, or a model to train)
    method.check(target, n_chains)            settings that need the target, before a run is recorded
    method.memory_needs(target, n_chains)     its peak memory by part (bayesx.memory), checked before allocating
    inputs = RunInputs(method.initial_points(target, n_chains, gen), gen, progress, artifact_dir)
    result = method.infer(target, inputs)      -> bayesx.result.Result
    method.draw_metrics(result, evaluation)    family-owned metrics of the draws
    method.warnings(metrics), method.summary_keys   health warnings; what the summary and `compare` show

A family (``FAMILIES``) has one hook, ``(target, inputs) -> output``, returning a typed value (nothing
is written into an object passed in); the family's ``infer`` calls it and makes the Result, and the
family's mathematics (diagnostics, weighting, resampling) lives in its package (ARCHITECTURE.md: an example):

    sampler        bayesx.methods.mcmc.family   Sampler.sample(target, inputs)         -> Draws
    approximation  bayesx.methods.vi.family     Approximation.approximate(target, ...) -> Fit
    trainer        bayesx.methods.vae.family    Trainer.train(model, inputs)           -> TrainedModel

A method is one module in its family's package plus one yaml in ``conf/method/``, blind to MLflow and Hydra.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from bayesx.store.checkpoint import RunCheckpoint, Resume
from bayesx.errors import BayesxError
from bayesx.methods.registry import methods_of_family
from bayesx.result import Result
from bayesx.run_settings import default_compile_policy
from bayesx.settings import Settings, configure
from bayesx.targets.base import Evaluation

FAMILIES: dict[str, str] = {"sampler": "bayesx.methods.mcmc.family:Sampler",  # where each family's class lives
                            "approximation": "bayesx.methods.vi.family:Approximation",  # (imported on demand:
                            "trainer": "bayesx.methods.vae.family:Trainer"}  # the families import this module)


@dataclass(frozen=True)
class RunInputs:
    """What the runner hands a method (each field's comment says what it is)."""

    initial: Tensor | None  # starting points (chains, dim); None for trainers
    gen: torch.Generator  # the run's generator
    progress: bool | None = None  # progress bars or not
    artifact_dir: Path | None = None  # a folder for the method's files
    checkpoint: RunCheckpoint | None = None  # where a sampler saves its draws as it goes (None: only at the end)
    resume: Resume | None = None  # a killed run's checkpoint to continue from (methods that are ``resumable``)
    compile: str = field(default_factory=default_compile_policy)  # the density's compile policy (device.compile)
    density_identity: str | None = None  # what defines the target's density (the runner's posterior identity)
    density: object | None = None  # the kernels.density.Density the family prepared once for its method


class Method(ABC):
    """A configured inference method (the ``method`` config group): its options are one Settings dataclass, checked
    when built (``Method(settings)`` or ``Method(**options)``, errors naming ``method.<key>``), in ``self.settings``."""

    Settings: ClassVar[type[Settings]] = Settings
    family: ClassVar[str]
    hook: ClassVar[str]  # the name of the family's one hook, ``(target, inputs) -> output``
    name: ClassVar[str] = "method"
    summary_keys: ClassVar[tuple[str, ...]] = ()
    compare_keys: ClassVar[tuple[str, ...]] = ()  # the few of those that `bayesx compare` puts in its table
    resumable: ClassVar[bool] = False  # ``resume=<run_id>`` continues a killed run from its checkpoint
    approximate_draws: ClassVar[bool] = False  # approximate draws: compared with a reference by default

    def __init__(self, settings: Settings | None = None, **options):
        self.settings = configure(self.Settings, settings if settings is not None else options, "method")

    def check(self, target, n_chains: int) -> None:
        """Settings that do not fit the target, before a run: raise InvalidSetting(key, problem) or a BayesxError."""

    def memory_needs(self, target, n_chains: int) -> list:  # the run's peak, as bayesx.memory.Need parts ([]: unknown)
        return []

    def needs_gradients(self) -> bool:  # grad log pi anywhere in a run (kernel, fit, the start's mode search)
        return True

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> Tensor | None:
        """Starting points (chains, dim): the target's own (None for trainers)."""
        return target.initial_point(n_chains, gen)

    @abstractmethod
    def infer(self, target, inputs: RunInputs) -> Result:
        """Run the method on the target (the family's: it calls the hook and makes the Result)."""

    def draw_metrics(self, result: Result, evaluation: Evaluation) -> dict[str, float]:
        """Family-owned metrics of the draws (after the target's evaluation)."""
        return {}

    def warnings(self, metrics: dict[str, float]) -> list[str]:  # plain-language health warnings about the metrics
        return []

    def plot_coordinates(self, draws: np.ndarray, k: int) -> list[int]:  # the coordinates worth a trace plot
        return list(range(min(k, draws.shape[-1])))


def family_class(family: str) -> type[Method]:
    module, name = FAMILIES[family].split(":")
    return getattr(importlib.import_module(module), name)


def check_fits(method: Method, target, method_choice: str, model_choice: str) -> None:
    """Samplers and approximations need a posterior (with a gradient if they use one); trainers a trained model."""
    if method.family == "trainer" and target.capabilities.posterior:
        raise BayesxError(f"method={method_choice} trains a VAE; use model=vae (got model={model_choice})")
    if method.family != "trainer" and not target.capabilities.posterior:
        verb = "samples" if method.family == "sampler" else "approximates"
        raise BayesxError(f"method={method_choice} {verb} a posterior, but model={model_choice} is trained: use "
                          + ", ".join(f"method={name}" for name in methods_of_family("trainer")))
    if method.family != "trainer" and method.needs_gradients() and (problem := target.gradient_problem()):
        raise BayesxError(f"method={method_choice} needs the gradient of the log density, but {problem}; fix the "
                          f"density, or use a method without gradients (method=rwm method.init=prior)")
