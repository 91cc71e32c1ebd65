"""The approximation family (VI, Laplace, Pathfinder, GAP, flows, AIS, SMC, SVGD).

An approximation's one hook is ``approximate(target, inputs) -> Fit``: a fitted q (anything that can
``sample_and_log_prob``) or :class:`Particles`, with the fit's traces, metrics and tags. The family
turns it into the run's draws and evidence (bayesx.diagnostics.importance):

- a fitted q: ``num_draws`` iid draws z_i ~ q weighed by w_i = p(z_i) / q(z_i), giving
  ``elbo_final`` (mean log w, a lower bound on log Z), ``log_evidence`` (log mean w, importance
  sampling with q as the proposal) with its delta-method standard error ``log_evidence_se``, and
  ``psis_khat``, the Pareto k-hat of the weights (ArviZ's PSIS; Vehtari, Simpson, Gelman, Yao and
  Gabry), above 0.7 neither the evidence nor q's draws are to be trusted; ``weights_ess_fraction``,
  the share of the draws importance sampling keeps, which finds the too-wide q that k-hat cannot see; and
  ``psis_mean_shift_max``, ``psis_sd_ratio_min``/``max``: q's moments of the parameters a user reads
  (``target.constrain``) against the weights' estimate of the posterior's, an estimate of the draws' own error;
- weighted particles: the same summary of the particles' own weights (AIS's are importance weights of
  the whole annealed path), their ``weights_ess``, and ``num_draws`` draws resampled by the weights
  (multinomial); equally weighted particles are the draws.

Either way the draws are evaluated as one chain (chains = 1) like any draws; never ESS or R-hat.
``fit_time_s`` is the hook's wall time.
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from dataclasses import dataclass, replace
from typing import Annotated, Protocol, final

import torch
from torch import Tensor

from bayesx import memory
from bayesx.diagnostics import importance
from bayesx.diagnostics.convergence import shown_against
from bayesx.diagnostics.importance import ESS_FRACTION_LIMIT, KHAT_LIMIT, MOMENT_TOLERANCE
from bayesx.diagnostics.stein import stein_warnings
from bayesx.errors import DensityError, RunInterrupted
from bayesx.kernels import backend
from bayesx.methods.base import Method, RunInputs
from bayesx.result import Outcome, Result
from bayesx.settings import AtLeast, Settings


class FittedApproximation(Protocol):
    """A fitted q over the target's parameter: iid draws with their log density (a flow without a
    closed-form inverse knows its density only at its own draws)."""

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """(n, dim) draws from q and log q at them (normalized)."""


@dataclass(frozen=True)
class Particles:
    """A particle approximation (AIS, SMC, SVGD): draws (n, dim), their log importance weights where
    the particles are weighted (None: equally weighted), and the method's own evidence estimate
    where it makes one that is not the mean of these weights (SMC's product of incremental means)."""

    draws: Tensor
    log_weights: Tensor | None = None
    log_evidence: float | None = None
    log_evidence_se: float | None = None
    pareto_smooth: bool = False  # resample by the PSIS-smoothed weights (multi-path Pathfinder's PS-IR)


@dataclass
class Fit(Outcome):
    """An approximation's output: the fitted q or the particles (None: the fit stopped before it had
    one, interrupted or failed), and the fit's :class:`Outcome` (its ``elbo`` trace, n_grad_evals, ...)."""

    approximation: FittedApproximation | Particles | None = None


@dataclass(frozen=True)
class ApproximationSettings(Settings):
    num_draws: Annotated[int, AtLeast(1)] = 1000  # iid draws from the fitted q, weighed and evaluated


class Approximation(Method):
    """A method that fits q, or returns weighted particles; subclasses implement :meth:`approximate`."""

    Settings = ApproximationSettings
    family = "approximation"
    hook = "approximate"
    summary_keys = ("elbo_final", "log_evidence", "log_evidence_se", "psis_khat", "weights_ess_fraction",
                    "psis_mean_shift_max", "psis_sd_ratio_min", "psis_sd_ratio_max", "n_grad_evals", "fit_time_s")
    compare_keys = ("elbo_final", "log_evidence", "psis_khat", "fit_time_s")
    approximate_draws = True

    @abstractmethod
    def approximate(self, target, inputs: RunInputs) -> Fit:
        """Fit q (or make particles) from ``inputs.initial``, evaluating log pi and its gradient through
        ``inputs.density`` (prepared once by :meth:`infer`: bayesx.kernels.backend.prepare)."""

    def gradient_batch(self, inputs: RunInputs) -> int:
        """Points per call at which this fit evaluates log pi and its gradient through ``inputs.density``, for the
        backend's choice of a compiled density; 0: it makes no such calls."""
        return 0

    def memory_needs(self, target, n_chains: int) -> list[memory.Need]:
        """The draws from q and the density over the design at all of them at once (bayesx.memory)."""
        fewer = "use a smaller method.num_draws"
        n, dim, dtype = self.settings.num_draws, target.dim, target.dtype
        return [memory.draws_need(1, n, dim, dtype, fewer), memory.state_need(n, dim, dtype, fewer, copies=4),
                *memory.design_needs(target, n, fewer)]

    @final
    def infer(self, target, inputs: RunInputs) -> Result:
        self.check(target, 1)  # the runner checked already; a Python caller meets the same one-line errors
        inputs, backend_record = self._prepare_density(target, inputs)
        start = time.perf_counter()
        try:
            fit = self.approximate(target, inputs)
        except (KeyboardInterrupt, RunInterrupted, DensityError) as exc:
            failed = str(exc) if isinstance(exc, DensityError) else None  # the run ends FAILED with this line
            return Result(interrupted=failed is None, error=failed,
                          tags={"stopped_during": "fit", **backend_record.tags},
                          timings={"fit_time_s": time.perf_counter() - start, **backend_record.timings})
        result = Result(**fit.outcome())
        result.tags.update(backend_record.tags)
        result.timings.update(backend_record.timings)
        result.timings["fit_time_s"] = time.perf_counter() - start
        if result.error is not None or fit.approximation is None:
            return result
        if isinstance(fit.approximation, Particles):
            self._weigh_particles(fit.approximation, inputs.gen, result)
        else:
            with torch.no_grad():
                z, log_q = fit.approximation.sample_and_log_prob(self.settings.num_draws, inputs.gen)
                log_weights = (target.log_prob(z) - log_q).double().cpu().numpy()
            result.metrics.update(importance.weight_summary(log_weights))
            reported = target.read_draws(z)
            result.metrics.update(importance.draw_checks(reported, log_weights))
            result.draws = z.detach().cpu()[None]
            result.tags["draws_are"] = f"{self.settings.num_draws} iid draws from the fitted q"
        result.tags.setdefault("stopped_during", "completed")
        return result

    def _prepare_density(self, target, inputs: RunInputs) -> tuple[RunInputs, Result]:
        """The family's one preparation of the density (bayesx.kernels.backend.prepare) for this fit's batches, under
        the run's compile policy: the inputs carrying it, and an empty Result with what it did (the tags
        ``kernels`` and ``compiled_density``, the timing ``compile_time_s``) for a fit that evaluates gradients."""
        record = Result()
        batch = self.gradient_batch(inputs)
        start = inputs.initial[:1] if inputs.initial is not None else \
            torch.zeros(1, target.dim, dtype=target.dtype, device=target.device)  # a method that starts from its own
        points = start.expand(max(batch, 1), -1).contiguous()
        density = backend.prepare(target, backend.Workload(points, None, gradients=batch >= 1), inputs.compile,
                                  inputs.density_identity)
        if batch >= 1:
            record.tags.update(density.tags(), kernels=density.name)
            record.timings.update(density.timings())
        return replace(inputs, density=density), record

    def _weigh_particles(self, particles: Particles, gen: torch.Generator, result: Result) -> None:
        n = particles.draws.shape[0]
        if particles.log_weights is None:
            result.draws = particles.draws.detach().cpu()[None]
            result.tags["draws_are"] = f"{n} equally weighted particles"
        else:
            result.metrics.update(importance.weight_summary(particles.log_weights.detach().double().cpu().numpy()))
            log_weights = particles.log_weights
            if particles.pareto_smooth:
                log_weights = torch.as_tensor(importance.pareto_smoothed(log_weights.detach().double().cpu().numpy()))
            draws, result.metrics["weights_ess"] = importance.resample(particles.draws, log_weights,
                                                                       self.settings.num_draws, gen)
            result.draws = draws.cpu()[None]
            smoothed = "Pareto-smoothed " if particles.pareto_smooth else ""
            result.tags["draws_are"] = f"{self.settings.num_draws} draws resampled from {n} {smoothed}weighted particles"
        if particles.log_evidence is not None:
            result.metrics["log_evidence"] = float(particles.log_evidence)
            if particles.log_evidence_se is not None:
                result.metrics["log_evidence_se"] = float(particles.log_evidence_se)

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """The importance weights' verdict on draws with a density (k-hat; below its limit, the share of draws the weights
        keep and q's moments against theirs), Stein's identity's on draws without one (SVGD's particles:
        bayesx.diagnostics.stein)."""
        khat = metrics.get("psis_khat", float("nan"))
        if khat == khat and khat > KHAT_LIMIT:
            shown = shown_against(khat, KHAT_LIMIT)
            return [f"psis_khat = {shown} > {KHAT_LIMIT}: q misses mass of the posterior, so its draws and the "
                    f"evidence estimate are unreliable; use a richer family or an MCMC method"]
        if not math.isfinite(metrics.get("elbo_final", 0.0)):
            return ["the ELBO is not finite: q puts mass where the target's density is zero or NaN"]
        found = []
        kept = metrics.get("weights_ess_fraction", float("nan"))
        if kept == kept and kept < ESS_FRACTION_LIMIT:
            shown = shown_against(kept, ESS_FRACTION_LIMIT)
            found.append(f"weights_ess_fraction = {shown} < {ESS_FRACTION_LIMIT}: the importance weights p/q are far from "
                         f"even though k-hat is not above {KHAT_LIMIT}: q differs from the posterior, so its draws are "
                         f"unreliable; use a richer family or an MCMC method")
        if metrics.get("psis_moments_flagged", 0.0) > 0:
            found.append(f"by the importance weights, q's draws are off along {metrics['psis_moments_flagged']:.0f} "
                         f"parameter(s): means up to {metrics['psis_mean_shift_max']:.2f} posterior sds, sds "
                         f"{metrics['psis_sd_ratio_min']:.2f} to {metrics['psis_sd_ratio_max']:.2f} of the posterior's "
                         f"(tolerance {MOMENT_TOLERANCE} sds); use a richer family or an MCMC method")
        found += evidence_warnings(metrics)
        return found + stein_warnings(metrics)


EVIDENCE_SHORTFALL = 0.1
"""Nats by which the importance-sampled evidence may fall below a target's exact log Z (beyond 3 standard errors)
before the run warns."""


def evidence_warnings(metrics: dict[str, float]) -> list[str]:
    """Where the target's log Z is exact (``log_evidence_err``): the importance-sampled evidence far below it means
    q's draws never reach part of the posterior (a mode of a multimodal density, U1's second lobe: 0.69 nats = log
    2 low), which neither k-hat nor the weights' checks can see, since they read only where q has draws."""
    shortfall = -metrics.get("log_evidence_err", 0.0)
    if shortfall > max(EVIDENCE_SHORTFALL, 3.0 * metrics.get("log_evidence_se", 0.0)):
        return [f"the importance-sampled evidence is {shortfall:.2f} nats below the exact log Z: q misses part of "
                f"the posterior (a mode?), so its draws are unreliable; use a richer family or an MCMC method"]
    return []
