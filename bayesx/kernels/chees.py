"""HMC with a jittered trajectory length, the transition of ChEES-HMC (Hoffman, Radul and Sountsov 2021).

One transition of every chain, in lock-step: a jitter u ~ Uniform(0, 1) shared by all chains, then
HMC (bayesx.kernels.hmc) with n = max(1, ceil(u T / eps)) leapfrog steps, so the trajectory time u T
varies from one transition to the next. Jitter removes the resonances a fixed length has, and a
shared length keeps the chains' work equal, which is what SIMD hardware and GPUs want. T and eps
come from bayesx.adaptation.chees.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from bayesx.kernels import hmc
from bayesx.kernels.density import Density
from bayesx.kernels.common import log_density  # noqa: F401  (the state carries log_prob)
from bayesx.kernels.hmc import HMCInfo, HMCState, init  # noqa: F401
from bayesx.kernels.metric import Metric


class CheesParams(NamedTuple):
    step_size: float
    metric: Metric
    trajectory_length: float  # T: the trajectory time u T, u ~ U(0, 1)
    max_steps: int  # cap on leapfrog steps per transition


def num_steps(jitter: float, params: CheesParams) -> int:
    return int(min(params.max_steps, max(1, math.ceil(jitter * params.trajectory_length / params.step_size))))


def step(state: HMCState, density: Density, params: CheesParams, gen: torch.Generator) -> tuple[HMCState, HMCInfo]:
    jitter = float(torch.rand((), generator=gen, device=gen.device))
    return hmc.step(state, density, hmc.HMCParams(params.step_size, params.metric, num_steps(jitter, params)), gen)
