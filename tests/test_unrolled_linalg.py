"""bayesx.native.unrolled_linalg: the Cholesky factorization and triangular solves that compiled densities are
traced with equal LAPACK's (values, info on a matrix that is not positive definite, gradients), and a traced
density that factorizes a matrix keeps no operation AOTInductor would hand to its proxy executor."""

from __future__ import annotations

import pytest
import torch

from bayesx.native import compiled
from bayesx.native.unrolled_linalg import cholesky_ex, solve_triangular


def spd(batch: int = 3, n: int = 6, seed: int = 0) -> torch.Tensor:
    m = torch.randn(batch, n, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return m @ m.mT + 0.1 * torch.eye(n, dtype=torch.float64)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_equals_lapack_and_reports_the_first_bad_pivot(upper):
    a = spd()
    factor, info = cholesky_ex(a, upper=upper)
    expected, expected_info = torch.linalg.cholesky_ex(a, upper=upper)
    torch.testing.assert_close(factor, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(info, expected_info)
    bad = a.clone()
    bad[1, 3, 3] = -5.0  # not positive definite: LAPACK says pivot 4
    assert cholesky_ex(bad)[1].tolist() == torch.linalg.cholesky_ex(bad)[1].tolist() == [0, 4, 0]
    assert cholesky_ex(a * torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)[:, None, None])[1][1] == 1


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_triangular_solves_equal_lapack(upper, left, unitriangular):
    lower = torch.linalg.cholesky(spd())
    a = lower.mT if upper else lower
    b = torch.randn(3, 6, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    b = b if left else b.mT
    x = solve_triangular(a, b, upper=upper, left=left, unitriangular=unitriangular)
    expected = torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unitriangular)
    torch.testing.assert_close(x, expected, rtol=1e-10, atol=1e-10)


def gp_log_density(q: torch.Tensor) -> torch.Tensor:
    """A Gaussian process's marginal likelihood: log N(y; 0, alpha^2 K_rho + I / 4) at q = (log rho, log alpha)."""
    x = torch.linspace(-2.0, 2.0, 8, dtype=q.dtype)
    y = torch.sin(2.0 * x)
    rho, alpha = torch.exp(q[..., 0]), torch.exp(q[..., 1])
    k = alpha[..., None, None] ** 2 * torch.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / rho[..., None, None] ** 2)
    chol, _ = torch.linalg.cholesky_ex(k + 0.25 * torch.eye(8, dtype=q.dtype))
    white = torch.linalg.solve_triangular(chol, y.expand(*q.shape[:-1], 8)[..., None], upper=False)[..., 0]
    return -0.5 * (white**2).sum(-1) - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)


def test_a_traced_gaussian_process_has_no_lapack_call_and_the_same_gradient():
    graph = compiled._trace(gp_log_density, 2, torch.float64)
    ops = {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}
    assert not any("cholesky" in op or "triangular" in op for op in ops), ops
    q = torch.tensor([0.3, -0.2], dtype=torch.float64)
    value, grad = graph(q)
    with torch.enable_grad():
        point = q.clone().requires_grad_(True)
        expected = gp_log_density(point)
        (expected_grad,) = torch.autograd.grad(expected, point)
    torch.testing.assert_close(value, expected.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-10, atol=1e-10)


def test_matrices_beyond_the_unrolling_cap_keep_lapack():
    """Unrolling grows the graph as n^2: beyond UNROLL_UP_TO rows the factorization stays a LAPACK call (whose
    density the compile then refuses in one line), and the upper factor reads the upper triangle as LAPACK's."""
    from bayesx.native.unrolled_linalg import UNROLL_UP_TO

    n = UNROLL_UP_TO + 1

    def large(q):
        a = torch.eye(n, dtype=q.dtype) * torch.exp(q[..., 0])[..., None, None]
        return torch.log(torch.diagonal(torch.linalg.cholesky_ex(a)[0], dim1=-2, dim2=-1)).sum(-1)

    ops = {str(node.target) for node in compiled._trace(large, 1, torch.float64).graph.nodes}
    assert "aten.linalg_cholesky_ex.default" in ops
    a = spd()
    lopsided = a.triu() + 7.0 * a.tril(-1)  # only the upper triangle is the matrix LAPACK factorizes
    torch.testing.assert_close(cholesky_ex(lopsided, upper=True)[0], torch.linalg.cholesky_ex(lopsided, upper=True)[0],
                               rtol=1e-12, atol=1e-12)
