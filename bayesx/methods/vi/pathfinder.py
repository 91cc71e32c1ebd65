"""Pathfinder as a method (``method=pathfinder``; Zhang, Carpenter, Gelman and Vehtari 2022): one path is
bayesx.methods.common.pathfinder (shared with MCMC's ``init=pathfinder``); this module runs several and pools them.

``n_paths: 1`` (single-path Pathfinder, the paper's Algorithm 1) returns the best Gaussian of one L-BFGS
path as q; the approximation family then weighs ``num_draws`` draws from it (importance-sampled
evidence, PSIS k-hat). With more paths (multi-path Pathfinder, the paper's Algorithm 2; Stan's
default of 4 paths) each path starts at its own initial point and gives ``draws_per_path`` draws with
log weights log p - log q_path; the family smooths the pooled weights by PSIS and resamples
``num_draws`` draws by them (the paper's Pareto-smoothed importance resampling). The reported
``psis_khat`` is the k-hat of the raw pooled weights: above 0.7 the resampled draws are unreliable.
A path with no usable iterate (e.g. one that starts where log p is -1e44 and stalls) is dropped and
counted in ``paths_failed``, as Stan does; the run fails only when every path does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from bayesx.nn.distributions import GaussianQ
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit, Particles
from bayesx.methods.common.pathfinder import PathFailed, PathSettings, single_path
from bayesx.methods.common.progress import progress_bar
from bayesx.settings import AtLeast, Positive

PATH_DEFAULTS = PathSettings()


@dataclass(frozen=True)
class PathfinderSettings(ApproximationSettings):
    """Defaults and their sources: conf/method/pathfinder.yaml and bayesx.methods.common.pathfinder.PathSettings."""

    n_paths: Annotated[int, AtLeast(1)] = 4  # the paper's multi-path Pathfinder; Stan's num_paths
    history: Annotated[int, AtLeast(1)] = PATH_DEFAULTS.history
    max_iter: Annotated[int, AtLeast(1)] = PATH_DEFAULTS.max_iter
    tol_rel_obj: Annotated[float, Positive()] = PATH_DEFAULTS.tol_rel_obj
    tol_grad: Annotated[float, Positive()] = PATH_DEFAULTS.tol_grad
    elbo_draws: Annotated[int, AtLeast(1)] = PATH_DEFAULTS.elbo_draws
    draws_per_path: Annotated[int, AtLeast(1)] = 1000  # multi-path: draws from each path's best Gaussian (Stan's num_draws)

    def path_settings(self) -> PathSettings:
        return PathSettings(history=self.history, max_iter=self.max_iter, tol_rel_obj=self.tol_rel_obj,
                            tol_grad=self.tol_grad, elbo_draws=self.elbo_draws)


class Pathfinder(Approximation):
    """Pathfinder; see the module docstring and ``conf/method/pathfinder.yaml``."""

    Settings = PathfinderSettings
    name = "pathfinder"

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> Tensor:
        return target.initial_point(self.settings.n_paths, gen)

    def gradient_batch(self, inputs: RunInputs) -> int:
        return 1  # L-BFGS evaluates one point at a time

    def approximate(self, target, inputs: RunInputs) -> Fit:
        cfg, gen, out, paths, failures = self.settings, inputs.gen, Fit(), [], []
        bar = progress_bar(cfg.n_paths, "pathfinder paths", inputs.progress, "path")
        try:
            for start in inputs.initial:
                try:
                    paths.append(single_path(inputs.density, start, gen, cfg.path_settings()))
                except PathFailed as failure:
                    failures.append(str(failure))
                bar.update(1)
        finally:
            bar.close()
        if not paths:
            raise PathFailed(f"every one of the {cfg.n_paths} Pathfinder paths failed: {failures[0]}")
        out.metrics.update({
            "n_grad_evals": float(sum(p.n_grad_evals for p in paths)),
            "lbfgs_iterations": float(sum(p.n_iterations for p in paths)),
            "path_elbo_best": max(p.elbo for p in paths),
            "paths_failed": float(len(failures)),
        })
        out.tags["lbfgs_stop"] = "; ".join(sorted({p.stop_reason for p in paths}))
        out.traces["path_elbo"] = paths[0].elbos
        if len(paths) == 1:
            out.fitted.update({"q_mean": paths[0].mean.cpu(), "q_cov": paths[0].cov.cpu()})
            out.approximation = GaussianQ(paths[0].mean, paths[0].chol())
            return out
        out.approximation = pooled_particles(target, [GaussianQ(p.mean, p.chol()) for p in paths],
                                             cfg.draws_per_path, gen)
        return out


def pooled_particles(target, gaussians: list[GaussianQ], draws_per_path: int, gen: torch.Generator) -> Particles:
    """Multi-path Pathfinder's pool (the paper's Algorithm 2): ``draws_per_path`` draws from each path's
    Gaussian q_i, each weighed by its own path's ratio p / q_i, to be resampled by the PSIS-smoothed weights."""
    draws, log_weights = [], []
    for q in gaussians:
        with torch.no_grad():
            z = q.sample(draws_per_path, gen)
            draws.append(z)
            log_weights.append(target.log_prob(z) - q.log_prob(z))
    return Particles(torch.cat(draws), torch.cat(log_weights), pareto_smooth=True)
