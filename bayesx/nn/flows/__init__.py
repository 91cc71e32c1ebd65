"""Normalizing-flow families (one module each) and ``build_flow``, which stacks K layers of one family
on a Gaussian base. Written here rather than taken from a flow library: planar and radial flows are in
no maintained library, and the coupling and autoregressive layers are a screenful each, tested
against autograd Jacobians like the others (tests/test_flows.py)."""

from __future__ import annotations

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.nn.flows.autoregressive import IAF, MAF
from bayesx.nn.flows.base import Flow, FlowLayer, GaussianBase, NotInvertible
from bayesx.nn.flows.coupling import AdditiveCoupling, AffineCoupling, Rescale, Squash
from bayesx.nn.flows.planar import Planar
from bayesx.nn.flows.radial import Radial

FAMILIES = ("planar", "radial", "nice", "realnvp", "maf", "iaf")

__all__ = ["FAMILIES", "Flow", "FlowLayer", "GaussianBase", "NotInvertible", "build_flow", "check_dimension"]


def check_dimension(family: str, dim: int) -> None:
    """Coupling flows split the coordinates in two: they need two."""
    if family in ("nice", "realnvp") and dim < 2:
        raise BayesxError(f"method.flow={family} is a coupling flow: it splits the coordinates and needs a target "
                          f"of dimension >= 2, got {dim}; use flow=planar, radial, maf or iaf")


def layers_of(family: str, dim: int, n_layers: int, hidden: int, gen: torch.Generator) -> list[FlowLayer]:
    check_dimension(family, dim)
    if family == "planar":
        return [Planar(dim, gen, n_layers)]  # one module: the K maps share a hand-written backward pass
    if family == "radial":
        return [Radial(dim, gen) for _ in range(n_layers)]
    if family == "nice":
        return [AdditiveCoupling(dim, gen, hidden, k % 2) for k in range(n_layers)] + [Rescale(dim)]
    if family == "realnvp":
        return [AffineCoupling(dim, gen, hidden, k % 2) for k in range(n_layers)]
    if family in ("maf", "iaf"):
        layer = MAF if family == "maf" else IAF
        return [layer(dim, gen, hidden, reverse=bool(k % 2)) for k in range(n_layers)]
    raise BayesxError(f"unknown flow {family!r}; choose one of {', '.join(FAMILIES)}")


def build_flow(family: str, dim: int, n_layers: int, hidden: int, base_mean: Tensor, base_scale: Tensor,
               learned_base: bool, gen: torch.Generator, box: float | None = None) -> Flow:
    """K layers of ``family`` on the base N(base_mean, diag(base_scale^2)) (learned or fixed), in the
    base's dtype and device, then a squashing layer onto (-box, box)^dim where ``box`` is given; the
    layers' initial weights come from ``gen`` (CPU)."""
    layers = layers_of(family, dim, n_layers, hidden, gen) + ([Squash(box)] if box is not None else [])
    flow = Flow(GaussianBase(base_mean.cpu(), base_scale.cpu(), learned_base), layers)
    return flow.to(dtype=base_mean.dtype, device=base_mean.device)
