"""A target seen through an affine map: pi_r(u) = pi(offset + B u), u in R^h.

Latent samplers evaluate the target only at decoded points q = offset + B u, where B (D, h) is the
decoder's last linear layer scaled back to the parameter's units. The generic restriction maps u
to q and pulls the gradient back, grad_u = B^T grad_q: O(D h) per call on top of the target's
own cost. Targets whose log density depends on q through products X q (logistic regression)
override ``restrict`` and precompute X B, so a call costs O(n h) and never touches R^D.
"""

from __future__ import annotations

from torch import Tensor

from bayesx.targets.base import TargetBase


class AffineRestriction(TargetBase):
    """pi(offset + u B^T) for u (chains, h); autograd-free given the target's gradient."""

    def __init__(self, target, offset: Tensor, basis: Tensor):
        self.target, self.offset, self.basis = target, offset, basis
        self.dim, self.dtype, self.device = basis.shape[1], basis.dtype, basis.device

    def point(self, u: Tensor) -> Tensor:
        return self.offset + u @ self.basis.T

    def log_prob(self, u: Tensor) -> Tensor:
        return self.target.log_prob(self.point(u))

    def log_prob_and_grad(self, u: Tensor) -> tuple[Tensor, Tensor]:
        lp, grad = self.target.log_prob_and_grad(self.point(u))
        return lp, grad @ self.basis

    def autograd_log_prob(self):
        return self.log_prob if self.target.autograd_log_prob() is not None else None

    def potential_grad(self, u: Tensor) -> Tensor:
        """-grad_u log pi_r(u)."""
        return -self.log_prob_and_grad(u)[1]
