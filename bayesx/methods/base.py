"""The method contract: every method belongs to one family, and the family is the contract.

The runner builds a method from its config, then only talks to it through :class:`Method`:

    check_fits(method, target, ...)            the family fits the model (a posterior, or a model to train)
    method.check(target, n_chains)            settings that need the target, before a run is recorded
    inputs = RunInputs(method.initial_points(target, n_chains, gen), gen, progress, artifact_dir)
    result = method.infer(target, inputs)      -> Result (bayesx.result)
    method.draw_metrics(result, evaluation)    family-owned metrics of the draws
    method.warnings(metrics)                   plain-language health warnings
    method.summary_keys                        what the run's summary and `bayesx compare` show

Families:

- :class:`Sampler` (MCMC: HMC, NUTS, RWM, pCN, AE-HMC, AE-pCN): draws (chains, draws, dim) with
  per-draw statistics -> ESS, R-hat, ESS per second and per gradient, the ESS of the target's
  per-draw quantities, divergence and tree-depth warnings.
- :class:`Approximation` (VI, Laplace, ...): a fitted q that can ``sample`` and ``log_prob``
  -> the ELBO, the importance-sampled evidence with its standard error and the PSIS k-hat of
  the weights log p - log q, and iid draws from q evaluated like any draws; never ESS or R-hat.
- :class:`Trainer` (the VAEs): a trained network -> ELBO, test NLL, images; no draws.

A method is one module in its family's package plus one yaml in ``conf/method/``; it knows nothing
of MLflow or Hydra. See ARCHITECTURE.md for a worked example.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor

from bayesx.checkpoint import RunCheckpoint, Resume
from bayesx.diagnostics import convergence, importance
from bayesx.errors import BayesxError, RunInterrupted
from bayesx.result import Result
from bayesx.settings import AtLeast, Settings, configure
from bayesx.targets.base import Evaluation

RHAT_LIMIT = 1.01
KHAT_LIMIT = 0.7


@dataclass
class RunInputs:
    """What the runner hands a method: starting points (None for trainers), the run's generator,
    whether to show progress bars, a folder for the files the method writes, and where a sampler
    saves its draws as it goes (bayesx.checkpoint; None: only at the end)."""

    initial: Tensor | None
    gen: torch.Generator
    progress: bool | None = None
    artifact_dir: Path | None = None
    checkpoint: RunCheckpoint | None = None
    resume: Resume | None = None  # a killed run's checkpoint to continue from (methods that are ``resumable``)


class Method(ABC):
    """A configured inference method (built from the ``method`` config group).

    Its options are one :class:`bayesx.settings.Settings` dataclass, ``Settings``; the method is
    built from checked values, ``Method(settings)`` or ``Method(**options)`` (checked on the way,
    errors naming ``method.<key>``), and reads them from ``self.settings``.
    """

    Settings: ClassVar[type[Settings]] = Settings
    family: ClassVar[str]
    name: ClassVar[str] = "method"
    summary_keys: ClassVar[tuple[str, ...]] = ()
    compare_keys: ClassVar[tuple[str, ...]] = ()
    """The few of the summary's metrics that `bayesx compare` puts in its table."""
    resumable: ClassVar[bool] = False
    """True where ``resume=<run_id>`` can continue a killed run of this method from its checkpoint."""
    approximate_draws: ClassVar[bool] = False
    """True where the draws follow the posterior only approximately: the runner then compares them
    with a reference posterior by default (reference.enabled=null)."""

    def __init__(self, settings: Settings | None = None, **options):
        self.settings = configure(self.Settings, settings if settings is not None else options, "method")

    def check(self, target, n_chains: int) -> None:
        """Settings that do not fit this target (before a run is recorded): raise
        ``InvalidSetting(key, problem)`` (the runner names it ``method.<key>``) or a BayesxError."""

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> Tensor | None:
        """Starting points (chains, dim): the target's own (None for trainers)."""
        return target.initial_point(n_chains, gen)

    @abstractmethod
    def infer(self, target, inputs: RunInputs) -> Result:
        """Run the method on the target."""

    def draw_metrics(self, result: Result, evaluation: Evaluation) -> dict[str, float]:
        """Family-owned metrics of the draws (after the target's evaluation)."""
        return {}

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        return []

    def plot_coordinates(self, draws: np.ndarray, k: int) -> list[int]:
        """The coordinates worth a trace and marginal plot."""
        return list(range(min(k, draws.shape[-1])))


def check_fits(method: Method, target, method_choice: str, model_choice: str) -> None:
    """Samplers and approximations need a posterior; trainers need a model that is trained."""
    from bayesx.config import (
        methods_of_family,  # the choices are read from conf/method, not listed here
    )

    if method.family == Trainer.family and target.capabilities.posterior:
        raise BayesxError(f"method={method_choice} trains a VAE; use model=vae (got model={model_choice})")
    if method.family != Trainer.family and not target.capabilities.posterior:
        verb = "samples" if method.family == Sampler.family else "approximates"
        raise BayesxError(f"method={method_choice} {verb} a posterior, but model={model_choice} is trained: use "
                          + ", ".join(f"method={name}" for name in methods_of_family(Trainer.family)))


# --- samplers -------------------------------------------------------------------------------------
class Sampler(Method):
    """MCMC: ``run(target, initial, gen, progress, artifact_dir)`` returns draws (chains, draws, dim)
    with per-draw statistics (accept_prob, divergent, n_grad_evals, ...)."""

    family = "sampler"
    summary_keys = ("ess_bulk_min", "ess_bulk_min_per_s", "rhat_max", "accept_rate", "step_size", "time_per_iter_s",
                    "n_divergent", "n_grad_evals", "warmup_time_s", "sampling_time_s")
    compare_keys = ("ess_bulk_min", "ess_bulk_min_per_s", "rhat_max", "accept_rate", "n_divergent", "sampling_time_s")

    @abstractmethod
    def run(self, target, initial_position: Tensor, gen: torch.Generator, progress: bool | None = None,
            artifact_dir: Path | None = None, checkpoint: RunCheckpoint | None = None,
            resume: Resume | None = None) -> Result:
        """Warm up and sample all chains from ``initial_position`` (chains, dim)."""

    def infer(self, target, inputs: RunInputs) -> Result:
        result = self.run(target, inputs.initial, inputs.gen, inputs.progress, inputs.artifact_dir, inputs.checkpoint,
                          inputs.resume)
        result.tags["ess_per_s_time"] = "sampling_time_s"
        return result

    def draw_metrics(self, result: Result, evaluation: Evaluation) -> dict[str, float]:
        """ESS and R-hat (ArviZ) over all coordinates, the ESS rates, and the ESS of the target's
        per-draw quantities."""
        if result.draws is None:
            return {}
        out = convergence.summarize(result.draws.numpy())
        sampling = result.timings.get("sampling_time_s", 0.0)
        if "ess_bulk_min" in out and sampling > 0:
            out["ess_bulk_min_per_s"] = out["ess_bulk_min"] / sampling
        grads = result.metrics.get("n_grad_evals", 0.0)
        if "ess_bulk_min" in out and grads > 0:
            out["ess_bulk_min_per_grad"] = out["ess_bulk_min"] / grads
        out.update(convergence.quantity_ess(evaluation.quantities))
        return out

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """Convergence and sampler health in plain language (Vehtari et al. 2021 for R-hat)."""
        out = []
        rhat = metrics.get("rhat_max", float("nan"))
        if rhat == rhat and rhat > RHAT_LIMIT:
            out.append(f"rhat_max = {rhat:.3g} > {RHAT_LIMIT}: the chains disagree; draw more (method.num_draws, "
                       "method.num_warmup) or use a better-adapted sampler (method=nuts method.mass=dense)")
        if metrics.get("n_divergent", 0) > 0:
            out.append(f"{metrics['n_divergent']:.0f} divergent transitions: the draws may be biased; "
                       "raise method.target_accept (e.g. 0.95)")
        if metrics.get("n_max_tree_depth", 0) > 0:
            out.append(f"{metrics['n_max_tree_depth']:.0f} NUTS transitions hit max_tree_depth; "
                       "raise method.max_tree_depth or try method.mass=dense")
        return out

    def plot_coordinates(self, draws: np.ndarray, k: int) -> list[int]:
        return convergence.lowest_ess_coordinates(draws, k)


# --- approximations -------------------------------------------------------------------------------
class FittedApproximation(Protocol):
    """A fitted q over the target's parameter: iid draws with their log density (a flow without a
    closed-form inverse knows its density only at its own draws)."""

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """(n, dim) draws from q and log q at them (normalized)."""


@dataclass(frozen=True)
class ApproximationSettings(Settings):
    num_draws: Annotated[int, AtLeast(1)] = 1000  # iid draws from the fitted q, weighed and evaluated


@dataclass
class Particles:
    """A particle approximation (AIS, SMC, SVGD): draws (n, dim), their log importance weights where
    the particles are weighted (None: equally weighted), and the method's own evidence estimate
    where it makes one that is not the mean of these weights (SMC's product of incremental means)."""

    draws: Tensor
    log_weights: Tensor | None = None
    log_evidence: float | None = None
    log_evidence_se: float | None = None


class Approximation(Method):
    """A method that fits q, or returns weighted particles.

    With a q (``sample`` and ``log_prob``) the family draws ``num_draws`` iid draws from it, weighs
    them by w = p(z) / q(z) and reports

        elbo_final       mean log w (the ELBO, a lower bound on log Z)
        log_evidence     log mean w (importance sampling with q as the proposal), and its standard
                         error log_evidence_se by the delta method, sd(w) / (sqrt(n) mean(w))
        psis_khat        the Pareto k-hat of the weights (ArviZ's PSIS, Vehtari et al. 2015/2024);
                         above 0.7 neither the evidence nor q's draws are to be trusted

    With :class:`Particles` the same summary is made of the particles' own weights (AIS's are
    importance weights of the whole annealed path), plus ``weights_ess`` = (sum w)^2 / sum w^2, and
    ``num_draws`` draws are resampled from them (multinomial); equally weighted particles are the
    draws. Either way the draws are evaluated as one chain (chains = 1) like any draws.
    Subclasses implement ``fit``.
    """

    Settings = ApproximationSettings
    family = "approximation"
    summary_keys = ("elbo_final", "log_evidence", "log_evidence_se", "psis_khat", "n_grad_evals", "fit_time_s")
    compare_keys = ("elbo_final", "log_evidence", "psis_khat", "fit_time_s")
    approximate_draws = True

    @abstractmethod
    def fit(self, target, initial: Tensor, gen: torch.Generator, result: Result,
            progress: bool | None = None) -> FittedApproximation | Particles:
        """Fit q (or make particles); record traces (e.g. the ``elbo`` per step) and metrics in ``result``."""

    def infer(self, target, inputs: RunInputs) -> Result:
        result = Result()
        start = time.perf_counter()
        try:
            fitted = self.fit(target, inputs.initial, inputs.gen, result, inputs.progress)
        except (KeyboardInterrupt, RunInterrupted):
            result.interrupted = True
            result.tags["stopped_during"] = "fit"
            result.timings["fit_time_s"] = time.perf_counter() - start
            return result
        result.timings["fit_time_s"] = time.perf_counter() - start
        if result.error is not None:
            return result
        if isinstance(fitted, Particles):
            self._weigh_particles(fitted, inputs.gen, result)
        else:
            with torch.no_grad():
                z, log_q = fitted.sample_and_log_prob(self.settings.num_draws, inputs.gen)
                log_weights = target.log_prob(z) - log_q
            result.metrics.update(importance.weight_summary(log_weights.double().cpu().numpy()))
            result.draws = z.detach().cpu()[None]
            result.tags["draws_are"] = f"{self.settings.num_draws} iid draws from the fitted q"
        result.tags.setdefault("stopped_during", "completed")
        return result

    def _weigh_particles(self, particles: Particles, gen: torch.Generator, result: Result) -> None:
        n = particles.draws.shape[0]
        if particles.log_weights is None:
            result.draws = particles.draws.detach().cpu()[None]
            result.tags["draws_are"] = f"{n} equally weighted particles"
        else:
            lw = particles.log_weights.detach().double()
            result.metrics.update(importance.weight_summary(lw.cpu().numpy()))
            usable = torch.nan_to_num(lw, nan=-math.inf)  # a failed density is a zero weight
            w = torch.exp(usable - usable.max())
            result.metrics["weights_ess"] = float(w.sum() ** 2 / (w * w).sum())
            pick = torch.multinomial(w.to(gen.device), self.settings.num_draws, replacement=True, generator=gen)
            result.draws = particles.draws.detach()[pick.to(particles.draws.device)].cpu()[None]
            result.tags["draws_are"] = f"{self.settings.num_draws} draws resampled from {n} weighted particles"
        if particles.log_evidence is not None:
            result.metrics["log_evidence"] = float(particles.log_evidence)
            if particles.log_evidence_se is not None:
                result.metrics["log_evidence_se"] = float(particles.log_evidence_se)

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        khat = metrics.get("psis_khat", float("nan"))
        if khat == khat and khat > KHAT_LIMIT:
            return [f"psis_khat = {khat:.2f} > {KHAT_LIMIT}: q misses mass of the posterior, so its draws and the "
                    f"evidence estimate are unreliable; use a richer family or an MCMC method"]
        if not math.isfinite(metrics.get("elbo_final", 0.0)):
            return ["the ELBO is not finite: q puts mass where the target's density is zero or NaN"]
        return []


# --- trainers -------------------------------------------------------------------------------------
class Trainer(Method):
    """A method that trains a model (``capabilities.posterior`` False): ``fit(model, gen, progress,
    artifact_dir)`` returns traces, metrics and files; no draws."""

    family = "trainer"
    summary_keys = ("test_elbo", "test_nll", "train_elbo", "epochs", "time_per_epoch_s", "eval_time_s",
                    "train_time_s")
    compare_keys = ("test_elbo", "test_nll", "train_time_s")

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> None:
        return None

    @abstractmethod
    def fit(self, model, gen: torch.Generator, progress: bool | None = None, artifact_dir: Path | None = None,
            epoch_callback=None, checkpoint: RunCheckpoint | None = None, resume: Resume | None = None) -> Result:
        """Train the model (saving each epoch to ``checkpoint``; from ``resume``'s epoch on where given)."""

    def infer(self, target, inputs: RunInputs) -> Result:
        return self.fit(target, inputs.gen, inputs.progress, inputs.artifact_dir, checkpoint=inputs.checkpoint,
                        resume=inputs.resume)


FAMILIES: dict[str, type[Method]] = {cls.family: cls for cls in (Sampler, Approximation, Trainer)}
