"""Normalizing-flow layers: log|det J| against the brute-force autograd Jacobian, inverses where they
exist, planar and radial invertibility constraints, and the flow density against the change of
variables. Negative controls: a wrong log-determinant (planar without the u reparameterization's
effect, i.e. psi^T u instead of psi^T u_hat) is caught by the same check."""

from __future__ import annotations


import pytest
import torch

from bayesx.errors import BayesxError
from bayesx.nn.flows import FAMILIES, NotInvertible, build_flow, layers_of
from bayesx.nn.flows.planar import Planar


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def perturbed(layer: torch.nn.Module, seed: int, scale: float = 0.5) -> torch.nn.Module:
    """The layer with every parameter moved off its (identity-like) start, in float64."""
    layer = layer.double()
    g = gen(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return layer


def jacobian_log_det(layer, z: torch.Tensor) -> torch.Tensor:
    out = []
    for row in z:
        jac = torch.autograd.functional.jacobian(lambda x: layer(x[None])[0][0], row)
        out.append(torch.linalg.slogdet(jac)[1])
    return torch.stack(out)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dim", [2, 5])
def test_log_det_matches_the_autograd_jacobian(family, dim):
    for k, layer in enumerate(layers_of(family, dim, 2, 16, gen(0))):
        layer = perturbed(layer, seed=10 + k)
        z = torch.randn(6, dim, generator=gen(1), dtype=torch.float64)
        y, log_det = layer(z)
        assert y.shape == z.shape and log_det.shape == (6,)
        torch.testing.assert_close(log_det, jacobian_log_det(layer, z), atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("family", ["nice", "realnvp", "maf", "iaf"])
def test_inverse_undoes_forward(family):
    flow = build_flow(family, 5, 4, 16, torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64),
                      True, gen(2))
    for k, layer in enumerate(flow.layers):
        perturbed(layer, seed=20 + k, scale=0.3)
    z = torch.randn(7, 5, generator=gen(3), dtype=torch.float64)
    for layer in flow.layers:
        torch.testing.assert_close(layer.inverse(layer(z)[0]), z, atol=1e-9, rtol=1e-9)
    draws, log_q = flow.sample_and_log_prob(7, gen(4))
    torch.testing.assert_close(flow.log_prob(draws), log_q, atol=1e-9, rtol=1e-9)


def test_flow_density_integrates_to_one():
    """A 2-D RealNVP flow's density, evaluated through its inverse on a grid, integrates to one."""
    flow = build_flow("realnvp", 2, 3, 16, torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64),
                      False, gen(5))
    for k, layer in enumerate(flow.layers):
        perturbed(layer, seed=30 + k, scale=0.3)
    axis = torch.linspace(-12.0, 12.0, 801, dtype=torch.float64)
    grid = torch.cartesian_prod(axis, axis)
    with torch.no_grad():
        density = torch.exp(flow.log_prob(grid)).reshape(801, 801)
    assert float(torch.trapezoid(torch.trapezoid(density, axis), axis)) == pytest.approx(1.0, abs=2e-3)


def test_planar_stays_invertible_and_a_wrong_log_det_is_caught():
    layer = Planar(3, gen(6)).double()
    with torch.no_grad():  # w^T u = -5: invertible only through u_hat
        layer.w.copy_(torch.tensor([1.0, 0.0, 0.0]))
        layer.u.copy_(torch.tensor([-5.0, 1.0, 0.0]))
    w, u = layer.w[0], layer.u[0]
    assert float((w @ layer.u_hat()[0]).detach()) > -1.0
    z = torch.randn(5, 3, generator=gen(7), dtype=torch.float64)
    _, log_det = layer(z)
    torch.testing.assert_close(log_det, jacobian_log_det(layer, z))
    h = torch.tanh(z @ w + layer.b[0])
    wrong = torch.log(torch.abs(1.0 + (1.0 - h * h) * (w @ u)))  # u, not u_hat
    assert not torch.allclose(wrong, jacobian_log_det(layer, z), atol=1e-3)


def planar_stack_inputs(k: int = 5, n: int = 6, dim: int = 3):
    g = gen(40)
    u = (0.6 * torch.randn(k, dim, generator=g, dtype=torch.float64)).requires_grad_()
    w = (0.8 * torch.randn(k, dim, generator=g, dtype=torch.float64)).requires_grad_()
    b = (0.3 * torch.randn(k, generator=g, dtype=torch.float64)).requires_grad_()
    z = torch.randn(n, dim, generator=g, dtype=torch.float64).requires_grad_()
    return z, u, w, b


def stacked(z, u, w, b, function=None):
    from bayesx.nn.flows import planar as module

    u_hat, m = module.constrained_u(u, w)
    return (function or module._PlanarStack).apply(z, u_hat, w, b, m.squeeze(-1))


def test_planar_stack_backward_matches_finite_differences_and_the_layer_by_layer_map():
    """The hand-written backward pass of K planar maps: torch.autograd.gradcheck (finite differences) on
    every input, and values and gradients equal to K applications of the per-row map on autograd."""
    from bayesx.nn.flows.planar import planar

    inputs = planar_stack_inputs()
    assert torch.autograd.gradcheck(stacked, inputs)
    z, u, w, b = inputs
    y, log_det = stacked(*inputs)
    ref, ref_log_det = z, 0.0
    for k in range(len(u)):
        ref, step = planar(ref, u[k], w[k], b[k])
        ref_log_det = ref_log_det + step
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(log_det, ref_log_det)
    weights = torch.randn(y.shape, generator=gen(41), dtype=torch.float64)
    ours = torch.autograd.grad((weights * y).sum() + log_det.sum(), inputs)
    theirs = torch.autograd.grad((weights * ref).sum() + ref_log_det.sum(), inputs)
    for a, b_ in zip(ours, theirs):
        torch.testing.assert_close(a, b_)


def test_a_planar_stack_backward_without_the_log_det_term_is_caught():
    """Negative control: drop d log|D_k| / d h_k from the backward pass and gradcheck fails."""
    from bayesx.nn.flows.planar import _PlanarStack

    class Dropped(_PlanarStack):
        @staticmethod
        def backward(ctx, g, g_log_det):
            return _PlanarStack.backward(ctx, g, torch.zeros_like(g_log_det))

    inputs = planar_stack_inputs()
    assert not torch.autograd.gradcheck(lambda *a: stacked(*a, function=Dropped), inputs, raise_exception=False)


def test_squash_log_det_and_inverse():
    from bayesx.nn.flows.coupling import Squash

    layer = Squash(4.0)
    z = 2.0 * torch.randn(6, 2, generator=gen(11), dtype=torch.float64)
    y, log_det = layer(z)
    assert float(y.abs().max()) < 4.0
    torch.testing.assert_close(log_det, jacobian_log_det(layer, z))
    torch.testing.assert_close(layer.inverse(y), z)


def test_planar_and_radial_have_no_closed_form_inverse():
    flow = build_flow("planar", 2, 2, 8, torch.zeros(2), torch.ones(2), False, gen(8))
    with pytest.raises(NotInvertible, match="no closed-form inverse"):
        flow.log_prob(torch.zeros(1, 2))


def test_bad_flow_requests_are_one_line():
    with pytest.raises(BayesxError, match="unknown flow 'glow'"):
        layers_of("glow", 2, 1, 8, gen(0))
    with pytest.raises(BayesxError, match="needs a target of dimension >= 2"):
        layers_of("realnvp", 1, 2, 8, gen(0))


def test_every_family_starts_near_the_identity():
    """Coupling and autoregressive layers start at the identity (zeroed last layers), planar and radial
    ones within their small initial weights of it (planar thanks to m(0) = 0)."""
    z = torch.randn(4, 3, generator=gen(9), dtype=torch.float64)
    for family in FAMILIES:
        for layer in layers_of(family, 3, 2, 8, gen(0)):
            y, log_det = layer.double()(z)
            assert (y - z).abs().max() < 0.05 and log_det.abs().max() < 0.05, family
