"""Targets whose density the native kernels (bayesx.native) evaluate: the mixins that give a target its
``fused_trajectory`` and ``fused_nuts`` (bayesx.targets.base) from the native code, for CPU chains where
that code runs, and None elsewhere (then the samplers run their PyTorch paths).

- :class:`FusedLogistic`: densities in logistic form (bayesx.native.logistic): logistic regression, its
  restriction to a subspace, and a Gaussian (the form with no rows).

Neal's funnel (bayesx.targets.toy) has its own native gradient and NUTS (bayesx.native.funnel).
"""

from __future__ import annotations

from torch import Tensor

from bayesx.native import logistic as native
from bayesx.native.logistic import LogisticForm
from bayesx.native.nuts import chain_seeds


class FusedLogistic:
    """The native kernel of a density in logistic form (bayesx.native.logistic), for CPU chains where
    it runs (``native.supports``: CPU tensors, the library built, not many chains on a large design).
    The density provides its form (``logistic_form``)."""

    def logistic_form(self) -> LogisticForm:
        raise NotImplementedError

    def _native(self, q: Tensor) -> bool:
        """Whether the native kernel runs for these chains (never under autograd or for one point)."""
        return q.dim() == 2 and not q.requires_grad and native.supports(self.logistic_form(), q)

    def fused_trajectory(self, position, momentum, step_size, num_steps, inv_mass, grad=None, log_prob=None):
        if not self._native(position):
            return None
        return native.trajectory(self.logistic_form(), position, momentum, step_size, num_steps, inv_mass, grad,
                                 log_prob)

    def fused_nuts(self, position, momentum, log_prob, grad, step_size, inv_mass, max_depth, gen):
        if not self._native(position):
            return None
        return native.nuts(self.logistic_form(), position, momentum, log_prob, grad, step_size, inv_mass, max_depth,
                           chain_seeds(position.shape[0], gen))

    def kernel_name(self, position: Tensor) -> str:
        return "native" if self._native(position) else "pytorch"
