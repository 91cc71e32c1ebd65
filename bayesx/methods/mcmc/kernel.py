"""What the MCMC driver asks of a sampler: a :class:`Kernel`.

A kernel moves all chains one transition at a time, in BlackJAX's shape: pure functions over an immutable state,
parameters as plain values. The driver (bayesx.methods.mcmc.sampler) does the rest: the start (Laplace or
Pathfinder), the warm-up (bayesx.adaptation, wrapped around ``step`` from outside), the run's length
(bayesx.methods.mcmc.run_length), draws, checkpoints, progress and the density's faults.

A new sampler is one :class:`TransitionKernel` around the functions of its ``bayesx.kernels`` module, e.g.
random-walk Metropolis::

    TransitionKernel(rwm, lambda step_size, metric: rwm.RWMParams(step_size, metric), gradients=0,
                     uses_gradients=False)

or any object with the same members.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from bayesx.kernels.metric import Metric


@runtime_checkable
class Kernel(Protocol):
    """A transition kernel as the driver uses it.

    uses_gradients            whether a transition evaluates grad log pi (gradient-free kernels: the adaptation
                              forms that read gradients are refused, and the density is not compiled for them)
    init(position, density)   the state at ``position`` (chains, dim)
    step(state, density, params, gen) -> (state, info)
                              one transition of every chain; ``info`` a NamedTuple of per-chain statistics with
                              at least accept_prob, divergent and n_grad_evals (and ``faults`` where the kernel
                              watches the density, bayesx.methods.mcmc.health)
    log_density(state)        what the chain tracks of the target (checked finite at the start)
    parameters(step_size, metric, **tuned)
                              the params ``step`` takes, from what warm-up adapts (``tuned``: what a sampler's
                              own warm-up tuned beyond the step size and the metric, WarmupProgress.tuned)
    gradients_per_transition()
                              density gradients (or calls) one transition of all chains usually costs: what the
                              backend weighs when it decides whether compiling the density pays
    """

    uses_gradients: bool

    def init(self, position: Tensor, density) -> Any: ...

    def step(self, state, density, params, gen: torch.Generator) -> tuple[Any, Any]: ...

    def log_density(self, state) -> Tensor: ...

    def parameters(self, step_size: float, metric: Metric | None, **tuned: float) -> Any: ...

    def gradients_per_transition(self) -> int: ...


@dataclass(frozen=True)
class TransitionKernel:
    """A :class:`Kernel` from a ``bayesx.kernels`` module's transition functions (``init``, ``step``,
    ``log_density``, or a bayesx.kernels.common.Kernel binding them to fixed objects), ``make_params`` (step size,
    metric and the tuned values as keywords -> params) and the gradients of one transition."""

    functions: Any
    make_params: Callable[[float, Metric | None], Any]
    gradients: int
    uses_gradients: bool = True

    def init(self, position: Tensor, density):
        return self.functions.init(position, density)

    def step(self, state, density, params, gen: torch.Generator):
        return self.functions.step(state, density, params, gen)

    def log_density(self, state) -> Tensor:
        return self.functions.log_density(state)

    def parameters(self, step_size: float, metric: Metric | None, **tuned: float):
        return self.make_params(step_size, metric, **tuned)

    def gradients_per_transition(self) -> int:
        return self.gradients
