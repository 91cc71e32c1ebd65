"""Pathfinder as a method (``method=pathfinder``; Zhang, Carpenter, Gelman and Vehtari 2022): the
algorithm is bayesx.pathfinder (shared with MCMC's ``init=pathfinder``).

``n_paths: 1`` returns the best Gaussian of one L-BFGS path as q; the approximation family then
weighs ``num_draws`` draws from it (importance-sampled evidence, PSIS k-hat). With more paths each
path starts at its own initial point and gives ``draws_per_path`` draws with log weights
log p - log q_path; the family resamples ``num_draws`` of the pooled draws by their weights
(multi-path Pathfinder's importance resampling; the paper smooths the weights with PSIS first, we
resample by the raw weights and report the PSIS k-hat that says whether that is safe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit, Particles
from bayesx.distributions import GaussianQ
from bayesx.pathfinder import single_path
from bayesx.progress import progress_bar
from bayesx.settings import AtLeast


@dataclass(frozen=True)
class PathfinderSettings(ApproximationSettings):
    n_paths: Annotated[int, AtLeast(1)] = 1
    history: Annotated[int, AtLeast(1)] = 6  # L-BFGS curvature pairs (the paper's J)
    max_iter: Annotated[int, AtLeast(1)] = 1000  # L-BFGS iterations per path
    elbo_draws: Annotated[int, AtLeast(1)] = 5  # draws per iterate to choose the best Gaussian (the paper's K)
    draws_per_path: Annotated[int, AtLeast(1)] = 1000  # multi-path: draws from each path's best Gaussian


class Pathfinder(Approximation):
    """Pathfinder; see the module docstring and ``conf/method/pathfinder.yaml``."""

    Settings = PathfinderSettings
    name = "pathfinder"

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> Tensor:
        return target.initial_point(self.settings.n_paths, gen)

    def gradient_batch(self, inputs: RunInputs) -> int:
        return 1  # L-BFGS evaluates one point at a time

    def approximate(self, target, inputs: RunInputs) -> Fit:
        cfg, gen, out, paths = self.settings, inputs.gen, Fit(), []
        bar = progress_bar(cfg.n_paths, "pathfinder paths", inputs.progress, "path")
        try:
            for start in inputs.initial:
                paths.append(single_path(target, start, gen, cfg.history, cfg.max_iter, cfg.elbo_draws))
                bar.update(1)
        finally:
            bar.close()
        out.metrics.update({
            "n_grad_evals": float(sum(p.n_grad_evals for p in paths)),
            "lbfgs_iterations": float(sum(p.n_iterations for p in paths)),
            "path_elbo_best": max(p.elbo for p in paths),
        })
        out.traces["path_elbo"] = paths[0].elbos
        if len(paths) == 1:
            out.fitted.update({"q_mean": paths[0].mean.cpu(), "q_cov": paths[0].cov.cpu()})
            out.approximation = GaussianQ(paths[0].mean, paths[0].chol())
            return out
        draws, log_weights = [], []
        for path in paths:
            q = GaussianQ(path.mean, path.chol())
            with torch.no_grad():
                z = q.sample(cfg.draws_per_path, gen)
                draws.append(z)
                log_weights.append(target.log_prob(z) - q.log_prob(z))
        out.approximation = Particles(torch.cat(draws), torch.cat(log_weights))
        return out
