"""Typed descriptions of densities, for backends that evaluate a density without PyTorch.

A target describes its density; where the density has a known form, it also returns that form from
``density_form()`` (bayesx.targets.base), and the kernels choose from it whether PyTorch or the native
code runs (bayesx.kernels.backend). A form is plain data: arrays and a constant, nothing that samples.

:class:`LogisticForm`: a Gaussian-prior logistic regression seen through an affine map,

    log pi(u) = sum_i [y_i l_i - log(1 + e^{l_i})] - u^T P u / 2 - b^T u + constant,   l = c + A u,
    grad      = A^T (y - sigmoid(l)) - P u - b.

Bayesian logistic regression is A = X, c = 0, P = I / s^2, b = 0; its restriction to the decoder
q = a + B u of auto-encoding HMC (Shahbaba et al., "Deep Markov Chain Monte Carlo", eq. 7) is
A = X B, c = X a, P = B^T B / s^2, b = B^T a / s^2; and a Gaussian N(m, P^-1) is the form with no rows
(b = -P m, constant -m^T P m / 2).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor


class LogisticForm(NamedTuple):
    """The density above: design_t = A^T (k, n), offset c (n) or None, labels y (n), precision P (k, k) or
    its diagonal (k), shift b (k) or None, and the constant that completes log pi. All tensors share one
    device and dtype and are contiguous and detached (build it with :meth:`build`)."""

    design_t: Tensor
    offset: Tensor | None
    labels: Tensor
    precision: Tensor
    shift: Tensor | None
    constant: float = 0.0

    @classmethod
    def build(cls, design_t: Tensor, offset: Tensor | None, labels: Tensor, precision: Tensor,
              shift: Tensor | None, constant: float = 0.0) -> "LogisticForm":
        """The form of these arrays, each detached and made contiguous (what the native code reads)."""
        def ready(t):
            return None if t is None else t.detach().contiguous()
        return cls(ready(design_t), ready(offset), ready(labels), ready(precision), ready(shift), float(constant))

    @property
    def rows(self) -> int:
        """n, the number of logistic terms (0 for a Gaussian)."""
        return self.labels.shape[0]
