"""NUTS as a method of the runner (kernel: bayesx.kernels.nuts)."""

from __future__ import annotations

import numpy as np

from bayesx.errors import BayesxError
from bayesx.kernels import nuts
from bayesx.methods.mcmc.sampler import MCMCMethod


class NUTS(MCMCMethod):
    """The No-U-Turn sampler with multinomial sampling, up to 2^max_tree_depth - 1 steps."""

    kernel = nuts
    name = "nuts"

    def __init__(self, max_tree_depth: int = 10, target_accept: float = 0.8, **kwargs):
        if not 1 <= max_tree_depth <= 20:
            raise BayesxError(f"method.max_tree_depth must be between 1 and 20, got {max_tree_depth}")
        super().__init__(target_accept=target_accept, **kwargs)
        self.max_tree_depth = max_tree_depth

    def make_params(self, step_size, metric):
        return nuts.NUTSParams(step_size, metric, self.max_tree_depth)

    def extra_metrics(self, stats):
        if not stats:
            return {}
        depth = stats["tree_depth"]
        return {"tree_depth_mean": float(np.mean(depth)),
                "n_max_tree_depth": float(np.sum(depth >= self.max_tree_depth))}
