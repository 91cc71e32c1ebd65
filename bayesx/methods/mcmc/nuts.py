"""NUTS as a method of the runner (kernel: bayesx.kernels.nuts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from bayesx.kernels import nuts
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import Between


@dataclass(frozen=True)
class NUTSSettings(MCMCSettings):
    max_tree_depth: Annotated[int, Between(1, 20, closed=True)] = 10  # at most 2^depth - 1 leapfrog steps


class NUTS(MCMCMethod):
    """The No-U-Turn sampler with multinomial sampling, up to 2^max_tree_depth - 1 steps."""

    Settings = NUTSSettings
    kernel = nuts
    name = "nuts"

    def make_params(self, step_size, metric):
        return nuts.NUTSParams(step_size, metric, self.settings.max_tree_depth)

    def extra_metrics(self, stats):
        if not stats:
            return {}
        depth = stats["tree_depth"]
        return {"tree_depth_mean": float(np.mean(depth)),
                "n_max_tree_depth": float(np.sum(depth >= self.settings.max_tree_depth))}
