"""The shared MCMC driver: warm-up, then sampling, for any kernel with ``init``, ``step`` and
``log_density`` (a module of bayesx.kernels, or a bayesx.kernels.common.Kernel).

A method subclasses :class:`MCMCMethod`, names its kernel and says how to build the kernel's
parameters (plain values) from a step size and a metric. Warm-up is bayesx.adaptation's
WindowAdaptation wrapped around the kernel from outside; collection of draws as (chains, draws,
dim), progress reporting, timing and interruption are handled here once.
"""

from __future__ import annotations

import time
from types import ModuleType

import numpy as np
import torch
from tqdm.auto import tqdm

from bayesx.adaptation.window import WarmupProgress, WarmupSchedule, WindowAdaptation, find_initial_step_size
from bayesx.errors import BayesxError, RunInterrupted
from bayesx.kernels.metric import Metric, identity_metric, make_metric
from bayesx.methods.base import Sampler
from bayesx.optimize import fit_laplace
from bayesx.result import Result

MASS_CHOICES = ("diag", "dense", "identity")


class MCMCMethod(Sampler):
    """Configuration and driver for one MCMC method (built from the method config group).

    num_warmup      warm-up iterations (adaptation), discarded
    num_draws       retained iterations per chain
    step_size       initial step size; null asks the heuristic of Hoffman and Gelman (Alg. 4)
    target_accept   acceptance statistic that dual averaging aims at
    adapt_step_size tune the step size during warm-up
    mass            inverse-mass-matrix (or proposal covariance) form: diag, dense or identity
    thin            keep every thin-th draw
    init            prior: start from the target's initial points with an identity metric;
                    laplace: find the mode (L-BFGS), start the chains at draws from the Laplace
                    approximation N(mode, H^-1) and the metric at H^-1 (or its diagonal)
    """

    kernel: ModuleType
    name = "mcmc"

    def __init__(
        self,
        num_warmup: int = 1000,
        num_draws: int = 1000,
        step_size: float | None = None,
        target_accept: float = 0.8,
        adapt_step_size: bool = True,
        mass: str = "diag",
        thin: int = 1,
        init_buffer: int = 75,
        term_buffer: int = 50,
        base_window: int = 25,
        init: str = "prior",
    ):
        if num_warmup < 0:
            raise BayesxError(f"method.num_warmup must be >= 0, got {num_warmup}; set method.num_warmup=1000 or similar")
        if num_draws < 1:
            raise BayesxError(f"method.num_draws must be >= 1, got {num_draws}; set method.num_draws=1000 or similar")
        if step_size is not None and not step_size > 0:
            raise BayesxError(f"method.step_size must be positive, got {step_size}; set a positive value or null to tune it")
        if not 0.0 < target_accept < 1.0:
            raise BayesxError(f"method.target_accept must lie in (0, 1), got {target_accept}; the usual values are 0.6-0.9")
        if mass not in MASS_CHOICES:
            raise BayesxError(f"method.mass must be one of {', '.join(MASS_CHOICES)}, got '{mass}'")
        if init not in ("prior", "laplace"):
            raise BayesxError(f"method.init must be prior or laplace, got '{init}'")
        if thin < 1:
            raise BayesxError(f"method.thin must be >= 1, got {thin}")
        self.num_warmup, self.num_draws, self.thin = num_warmup, num_draws, thin
        self.step_size, self.target_accept, self.adapt_step_size = step_size, target_accept, adapt_step_size
        self.mass, self.init = mass, init
        self.schedule = WarmupSchedule.build(num_warmup, init_buffer, term_buffer, base_window, mass != "identity")

    # --- what a subclass provides -------------------------------------------------------------
    def make_params(self, step_size: float, metric: Metric):
        raise NotImplementedError

    def search_step_size(self, state, target, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """A starting step size for dual averaging, at the start and after each metric update."""
        return find_initial_step_size(state, target, metric, gen, guess)

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:
        return {}

    def kernel_name(self, target, position: torch.Tensor) -> str:
        """Which implementation evaluates the density this kernel moves on (the ``kernels`` tag)."""
        return target.kernel_name(position)

    # --- the driver ------------------------------------------------------------------------------
    def run(self, target, initial_position: torch.Tensor, gen: torch.Generator, progress: bool | None = None,
            artifact_dir=None) -> Result:
        """Warm up and sample all chains from ``initial_position`` (chains, dim)."""
        n_chains, dim = initial_position.shape
        dense = self.mass == "dense"
        result = Result()
        result.tags["kernels"] = self.kernel_name(target, initial_position)
        start = time.perf_counter()
        metric = identity_metric(dim, dense, initial_position.dtype, initial_position.device)
        if self.init == "laplace":
            try:
                initial_position, metric = self._laplace_start(target, initial_position, gen, dense)
            except (KeyboardInterrupt, RunInterrupted):  # stopped while finding the mode: part of warm-up
                result.interrupted = True
                result.timings.update(warmup_time_s=time.perf_counter() - start, sampling_time_s=0.0)
                result.tags["stopped_during"] = "warmup"
                return result
            result.timings["laplace_time_s"] = time.perf_counter() - start
        state = self.kernel.init(initial_position, target)
        if not bool(torch.isfinite(self.kernel.log_density(state)).all()):
            raise BayesxError("the log density is not finite at the initial point; check the data or set a smaller model.init_scale")
        if self.step_size is not None:
            step_size = float(self.step_size)
        else:
            step_size = self.search_step_size(state, target, metric, gen, 1.0)
        adaptation = WindowAdaptation(self.kernel.step, self.make_params,
                                      lambda s, m, guess: self.search_step_size(s, target, m, gen, guess),
                                      self.schedule, self.target_accept, self.adapt_step_size, dense)
        warm = WarmupProgress(state, step_size, metric)
        stats: dict[str, list[np.ndarray]] = {}
        kept = []
        stage = "warmup"
        bar = tqdm(total=self.num_warmup + self.num_draws * self.thin, desc=f"{self.name} warmup",
                   disable=None if progress is None else not progress, unit="it", leave=False)
        try:
            adaptation.run(warm, target, gen, on_step=lambda info, eps, it: self._tick(bar, info, eps, it))
            state, step_size, metric = warm.state, warm.step_size, warm.metric
            params = self.make_params(step_size, metric)
            result.timings["warmup_time_s"] = time.perf_counter() - start

            stage = "sampling"
            bar.set_description(f"{self.name} sampling")
            sampling_start = time.perf_counter()
            for it in range(self.num_draws * self.thin):
                state, info = self.kernel.step(state, target, params, gen)
                if it % self.thin == 0:
                    kept.append(state.position.detach().to("cpu"))
                    for name, value in info._asdict().items():
                        stats.setdefault(name, []).append(value.detach().to("cpu").numpy())
                self._tick(bar, info, step_size, it)
        except (KeyboardInterrupt, RunInterrupted):
            result.interrupted = True
            if stage == "warmup":
                step_size, metric = warm.step_size, warm.metric
        finally:
            bar.close()
        end = time.perf_counter()
        if stage == "warmup":
            result.timings["warmup_time_s"] = end - start
            result.timings["sampling_time_s"] = 0.0
        else:
            result.timings["sampling_time_s"] = end - sampling_start
            if kept:
                result.metrics["time_per_iter_s"] = result.timings["sampling_time_s"] / (len(kept) * self.thin)
        result.tags["stopped_during"] = stage if result.interrupted else "completed"

        if kept:
            result.draws = torch.stack(kept, dim=1)
            result.sample_stats = {name: np.stack(values, axis=1) for name, values in stats.items()}
        result.metrics.update(self._summaries(result.sample_stats, step_size, warm.grad_evals))
        result.metrics.update(self.extra_metrics(result.sample_stats))
        result.fitted["inverse_mass"] = metric.inv_mass.detach().to("cpu")
        return result

    def _laplace_start(self, target, initial_position, gen, dense: bool):
        laplace = fit_laplace(target, initial_position)
        inv_mass = laplace.cov if dense else laplace.cov.diagonal().clone()
        metric = make_metric(inv_mass if self.mass != "identity" else torch.ones_like(laplace.mode))
        chol = torch.linalg.cholesky(laplace.cov)
        z = torch.randn(initial_position.shape, generator=gen, dtype=chol.dtype, device=chol.device)
        return laplace.mode + z @ chol.T, metric

    def _summaries(self, stats: dict[str, np.ndarray], step_size: float, warmup_grad_evals: int) -> dict[str, float]:
        out = {"step_size": float(step_size), "n_grad_evals_warmup": float(warmup_grad_evals)}
        if stats:
            out["accept_rate"] = float(np.mean(stats["accept_prob"]))
            out["n_divergent"] = float(np.sum(stats["divergent"]))
            out["n_grad_evals"] = float(np.sum(stats["n_grad_evals"]))
        return out

    @staticmethod
    def _tick(bar, info, step_size: float, it: int) -> None:
        bar.update(1)
        if it % 25 == 0 and not bar.disable:
            bar.set_postfix(step=f"{step_size:.3g}", accept=f"{float(info.accept_prob.mean()):.2f}",
                            div=int(info.divergent.sum()))
