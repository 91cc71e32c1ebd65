"""NUTS as a method of the runner (kernel: bayesx.kernels.nuts)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated

import numpy as np

from bayesx.kernels import nuts
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.settings import Between, InvalidSetting


@dataclass(frozen=True)
class NUTSSettings(MCMCSettings):
    max_tree_depth: Annotated[int, Between(1, 20, closed=True)] = 10  # at most 2^depth - 1 leapfrog steps
    # the cap during warm-up only (null: max_tree_depth). Early windows adapt with small steps, so their
    # trees are the deepest of the run; the draws that estimate the metric need not be the best mixed.
    warmup_max_tree_depth: Annotated[int | None, Between(1, 20, closed=True)] = None

    def check(self):
        super().check()
        if self.warmup_max_tree_depth is not None and self.warmup_max_tree_depth > self.max_tree_depth:
            raise InvalidSetting("warmup_max_tree_depth", f"={self.warmup_max_tree_depth} is deeper than max_tree_depth="
                                 f"{self.max_tree_depth}; use at most {self.max_tree_depth}, or null")


class NUTS(MCMCMethod):
    """The No-U-Turn sampler with multinomial sampling, up to 2^max_tree_depth - 1 steps."""

    Settings = NUTSSettings
    name = "nuts"

    def make_kernel(self) -> TransitionKernel:
        # gradients: a tree of 8 leaves, NUTS's shallowest usual depth
        return TransitionKernel(nuts, self.tree_params, gradients=8)

    def tree_params(self, step_size, metric, depth: int | None = None) -> nuts.NUTSParams:
        """The kernel's params, trees capped at ``depth`` (None: max_tree_depth)."""
        return nuts.NUTSParams(step_size, metric, depth or self.settings.max_tree_depth)

    def make_adaptation(self, density, gen):
        adaptation = super().make_adaptation(density, gen)
        depth = self.settings.warmup_max_tree_depth
        return adaptation if depth is None else replace(adaptation, make_params=partial(self.tree_params, depth=depth))

    def extra_metrics(self, stats):
        if not stats:
            return {}
        depth = stats["tree_depth"]
        return {"tree_depth_mean": float(np.mean(depth)),
                "n_max_tree_depth": float(np.sum(depth >= self.settings.max_tree_depth))}

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        out = super().warnings(metrics)
        if metrics.get("n_max_tree_depth", 0) > 0:
            out.append(f"{metrics['n_max_tree_depth']:.0f} NUTS transitions hit max_tree_depth; "
                       "raise method.max_tree_depth or try method.mass=dense")
        return out
