"""The sampler family (MCMC: HMC, NUTS, RWM, ChEES, pCN, AE-HMC, AE-pCN, DA-pCN).

A sampler's one hook is ``sample(target, inputs) -> Draws``: warm up and sample all chains from
``inputs.initial`` (chains, dim), returning the draws (chains, draws, dim) with their per-draw
statistics (accept_prob, divergent, n_grad_evals, ...). The family turns them into the run's Result
and owns what is said about them: the rank-normalized ESS and split R-hat over all coordinates
(Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021, via ArviZ), the ESS per second of sampling
and per gradient, the ESS of the target's per-draw quantities, and the R-hat and divergence warnings.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import final

import numpy as np
from torch import Tensor

from bayesx import memory
from bayesx.adaptation.window import DENSE_FORMS, GRADIENT_FORMS
from bayesx.diagnostics import convergence
from bayesx.diagnostics.convergence import RHAT_LIMIT, shown_against
from bayesx.methods.base import Method, RunInputs
from bayesx.result import Outcome, Result
from bayesx.targets.base import Evaluation


@dataclass
class Draws(Outcome):
    """A sampler's output: draws (chains, draws, dim) on the CPU (None: stopped before any), their
    per-draw statistics, each (chains, draws), and the run's :class:`Outcome` (timings
    warmup_time_s and sampling_time_s, metrics such as step_size and accept_rate, the adapted
    inverse mass matrix in ``fitted``, ...)."""

    draws: Tensor | None = None
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)


class Sampler(Method):
    """MCMC; subclasses implement :meth:`sample`."""

    family = "sampler"
    hook = "sample"
    summary_keys = ("ess_bulk_min", "ess_bulk_min_per_s", "rhat_max", "accept_rate", "step_size", "time_per_iter_s",
                    "n_divergent", "n_grad_evals", "grad_cost_us", "warmup_time_s", "sampling_time_s")
    compare_keys = ("ess_bulk_min", "ess_bulk_min_per_s", "rhat_max", "accept_rate", "n_divergent", "sampling_time_s")

    @abstractmethod
    def sample(self, target, inputs: RunInputs) -> Draws:
        """Warm up and sample all chains from ``inputs.initial`` (chains, dim)."""

    @final
    def infer(self, target, inputs: RunInputs) -> Result:
        out = self.sample(target, inputs)
        return Result(**{**out.outcome(), "tags": {**out.tags, "ess_per_s_time": "sampling_time_s"}},
                      draws=out.draws, sample_stats=out.sample_stats)

    def memory_needs(self, target, n_chains: int) -> list[memory.Need]:
        """The draws, the chains' working state, the warm-up's longest metric window (its draws, and their
        gradients for the gradient-based forms, listed and stacked), a dense metric, the density over the
        design, and the Laplace start's Hessian (bayesx.memory). Every sampler's settings are MCMCSettings."""
        cfg, dim, dtype = self.settings, target.dim, target.dtype
        fewer = "use fewer n_chains"
        draws = max(cfg.num_draws, cfg.max_draws or 0)
        needs = [memory.draws_need(n_chains, draws, dim, dtype, f"{fewer} or a smaller method.num_draws "
                                                                 f"(and method.max_draws)"),
                 memory.state_need(n_chains, dim, dtype, fewer), *memory.design_needs(target, n_chains, fewer)]
        window = max((end - start for start, end in cfg.schedule().windows), default=0)
        if window:
            copies = 4 if cfg.mass in (*GRADIENT_FORMS, "auto") else 2
            needs.append(memory.Need(f"the warm-up's metric window ({n_chains} x {window} x {dim})",
                                     copies * n_chains * window * dim * memory.itemsize(dtype),
                                     f"{fewer} or a smaller method.num_warmup"))
        if cfg.mass in DENSE_FORMS:
            needs.append(memory.Need(f"the dense metric ({dim} x {dim})", 4.0 * dim * dim * memory.itemsize(dtype),
                                     "use method.mass=diag"))
        if cfg.init == "laplace":
            needs.append(memory.hessian_need(dim, dtype, "start without it: method.init=prior (or method.init="
                                                         "pathfinder), or use a model with fewer coordinates"))
        return needs

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
        if sampling > 0 and grads > 0:  # cost per gradient: what a slow build or a busy machine shows in
            out["grad_cost_us"] = 1e6 * sampling / grads  # (results/native_gradient_cause.md)
        out.update(convergence.quantity_ess(evaluation.quantities))
        return out

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """Convergence and sampler health in plain language (Vehtari et al. 2021 for R-hat)."""
        out = []
        rhat = metrics.get("rhat_max", float("nan"))
        if rhat == rhat and rhat > RHAT_LIMIT:
            shown = shown_against(rhat, RHAT_LIMIT)
            out.append(f"rhat_max = {shown} > {RHAT_LIMIT}: the chains disagree; draw more (method.num_draws, "
                       "method.max_draws, method.num_warmup) or change the metric (method.mass: dense for correlated coordinates, "
                       "diag_grad where the curvature varies across the posterior)")
        # divergences that met a NaN log density are the density's (their warning comes with the run's result)
        from_energy = metrics.get("n_divergent", 0) - metrics.get("n_divergent_nan", 0)
        if from_energy > 0:
            final = metrics.get("target_accept_final")
            at = f" at target_accept {final:g}" if final is not None else ""
            out.append(f"{from_energy:.0f} divergent transitions{at}: the draws may be biased; raise "
                       "method.target_accept (e.g. 0.95 or 0.99), or with a dense metric (NUTS's mass=auto up to 100 "
                       "coordinates) try method.mass=diag_grad")
        return out

    def plot_coordinates(self, draws: np.ndarray, k: int) -> list[int]:
        return convergence.lowest_ess_coordinates(draws, k)
