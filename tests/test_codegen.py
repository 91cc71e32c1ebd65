"""Densities written as plain C (bayesx.native.codegen) equal autograd, for every posterior of the suite and every
operator family the writer covers; a wrong operator is caught by the compile check and never used; the kernels
split plain-C chains over threads without changing a draw.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from bayesx.native import codegen, compiled
from bayesx.native import logistic as native

pytestmark = pytest.mark.skipif(not (native.available() and shutil.which("cc")), reason="no C compiler here")

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A fresh cache, and AOTInductor made to fail at once (what falls back to it is seen, not waited for)."""
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiled, "_compile", lambda *args: (_ for _ in ()).throw(compiled.NotCompiled("AOT off")))


def _agrees(log_prob, dim: int, dtype=torch.float64, scale: float = 0.7, tol: float = 1e-10):
    """The plain C density's (log pi, grad) against autograd's at five points (log_prob: (..., dim) -> (...))."""
    density = compiled.compiled_density(log_prob, dim, dtype)
    assert density.compiler == "plain C"
    q = scale * torch.randn(5, dim, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    lp, grad = density.log_prob_and_grad(q)
    x = q.clone().requires_grad_(True)
    expected = log_prob(x)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    torch.testing.assert_close(lp, expected.detach().to(dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(grad, expected_grad, rtol=tol, atol=tol)
    return density


GROUP = torch.tensor([0, 2, 1, 1, 0, 2, 2, 3])
DATA = torch.linspace(-1.0, 2.0, 8, dtype=torch.float64)
MATRIX = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _square(q):
    return q.reshape(*q.shape[:-1], 2, 2)


OPERATOR_FAMILIES = {
    # a hierarchical model indexing group effects by a data vector: index, and its accumulating inverse
    "index and index_put": (lambda q: -0.5 * ((DATA - q[..., GROUP]) ** 2).sum(-1) - 0.5 * (q ** 2).sum(-1), 4),
    "gather and scatter_add": (lambda q: -(torch.gather(q.exp(), -1, GROUP.expand(*q.shape[:-1], 8)) * DATA).sum(-1)
                               - q.square().sum(-1), 4),
    "index_select": (lambda q: -torch.index_select(q, -1, GROUP).square().sum(-1), 4),
    "matrix products": (lambda q: -0.5 * (q[..., :3] @ MATRIX.T).square().sum(-1)
                        - ((q[..., :3] @ MATRIX.T @ MATRIX) * q[..., :3]).sum(-1)
                        - 0.1 * (_square(q) @ _square(q)).sum((-1, -2)), 4),
    "reductions": (lambda q: torch.logsumexp(q, -1) - q.amax(-1) + q.mean(-1) - 0.01 * q.exp().prod(-1)
                   + 0.1 * torch.cumsum(q, -1).sum(-1) - (_square(q).sum(-2) ** 2).sum(-1), 4),
    "softmax": (lambda q: torch.log_softmax(q.reshape(*q.shape[:-1], 2, 3), -1).sum((-1, -2))
                + torch.softmax(q, -1)[..., 0], 6),
    "concatenation and padding": (lambda q: -torch.cat([q[..., :2] * 2, q[..., 1:], torch.nn.functional.pad(q, (1, 2))],
                                                       -1).square().sum(-1), 4),
    "selection and clamping": (lambda q: torch.where(q > 0, q.clamp_min(0).log1p(), -q).sum(-1)
                               - torch.clamp(q, -0.3, 0.4).square().sum(-1) - torch.maximum(q, q.flip(-1)).sum(-1), 4),
    "special functions": (lambda q: torch.lgamma(q.exp()).sum(-1) + torch.erf(q).sum(-1) + torch.tanh(q).sum(-1)
                          + torch.sigmoid(q).log().sum(-1) + torch.nn.functional.softplus(q).sum(-1)
                          + torch.atan(q).sum(-1) - 0.1 * (q ** 3).sum(-1) + torch.digamma(q.exp() + 0.5).sum(-1), 4),
    "transposes and views": (lambda q: -(q.reshape(*q.shape[:-1], 2, 3).transpose(-1, -2).reshape(*q.shape[:-1], 6)
                                         * torch.arange(6.0, dtype=q.dtype)).square().sum(-1)
                             - 0.01 * q.unsqueeze(-2).expand(*q.shape[:-1], 3, 6).sum(-2).square().sum(-1), 6),
}


@pytest.mark.parametrize("family", list(OPERATOR_FAMILIES))
def test_every_operator_family_equals_autograd(family):
    log_prob, dim = OPERATOR_FAMILIES[family]
    # torch's own trigamma (polygamma(1, x), digamma's derivative) is off by up to 1e-9 (against scipy; ours by
    # 1e-14, next test), which the special functions' gradient carries
    _agrees(log_prob, dim, tol=1e-8 if family == "special functions" else 1e-10)


def test_digamma_and_trigamma_equal_scipy_to_round_off():
    """C's library has neither; bayesx writes its own (codegen.DIGAMMA, TRIGAMMA)."""
    scipy_special = pytest.importorskip("scipy.special")
    x = torch.tensor([0.3, 0.7, 1.0, 2.5, 9.9, 10.5, 50.0, -0.5, -1.3], dtype=torch.float64)
    density = compiled.compiled_density(lambda q: torch.digamma(q).sum(-1), len(x), torch.float64)
    lp, grad = density.log_prob_and_grad(x[None])
    torch.testing.assert_close(lp[0], torch.tensor(scipy_special.digamma(x.numpy()).sum(), dtype=torch.float64),
                               rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(grad[0], torch.tensor(scipy_special.polygamma(1, x.numpy()), dtype=torch.float64),
                               rtol=1e-13, atol=1e-13)


def test_float32_equals_autograd_to_float32_rounding():
    log_prob, dim = OPERATOR_FAMILIES["index and index_put"]
    _agrees(log_prob, dim, torch.float32, tol=1e-4)


def test_infinities_keep_their_meaning_outside_the_support():
    """-inf outside the support stays -inf (no -ffast-math: finite-math would fold it away)."""
    def log_prob(q):
        inside = torch.log(q[..., 0].clamp_min(1e-300))
        return torch.where(q[..., 0] > 0, inside, torch.full_like(inside, -float("inf"))) - q.square().sum(-1)

    density = compiled.compiled_density(log_prob, 2, torch.float64)
    lp, _ = density.log_prob_and_grad(torch.tensor([[-1.0, 0.0], [0.5, 0.0]], dtype=torch.float64))
    assert lp[0] == -float("inf") and torch.isfinite(lp[1])


@pytest.mark.slow
def test_every_posterior_of_the_suite_is_written_as_plain_c_and_equals_autograd():
    """Every posterior but those whose Python loop runs hundreds of steps (loop_steps): unrolled, their graphs become
    ~48,000 lines of C that the compiler takes minutes over, until loops are written as loops."""
    from bayesx.targets.posteriordb.suite import SUITE
    from bayesx.targets.posteriordb.target import PosteriorDB

    for name in (n for n, entry in SUITE.items() if not entry.loop_steps):
        target = PosteriorDB(name=name)
        q = 0.3 * torch.randn(4, target.dim, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        density = compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
        assert density.compiler == "plain C", name
        lp, grad = density.log_prob_and_grad(q)
        expected, expected_grad = target.log_prob_and_grad(q)
        torch.testing.assert_close(lp, expected, rtol=1e-10, atol=1e-10, msg=name)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-9, msg=name)


def test_a_wrong_operator_is_caught_by_the_check_and_never_used(monkeypatch):
    """Negative control: exp written as exp(2x) gives a library that the compile check refuses; the density
    then goes to AOTInductor (made to fail here), and the reason names both."""
    monkeypatch.setitem(codegen.HANDLERS, aten.exp.default, codegen._unary("exp(2 * {a})"))
    with pytest.raises(compiled.NotCompiled, match=r"AOT off \(and as plain C: the compiled log density differs"):
        compiled.compiled_density(lambda q: -q.exp().sum(-1) - q.square().sum(-1), 3, torch.float64)


def _unbound_walk(q):
    """A random walk written as users write one: the states unbound into one tensor per step, a Python loop over
    them, the data split into pieces too (a constant's unbind)."""
    x = q.unbind(-1)
    y = DATA.unbind(0)
    lp = -0.5 * x[0] ** 2
    for t in range(1, len(x)):
        lp = lp - 0.5 * ((x[t] - x[t - 1]) / 0.5) ** 2 - 0.5 * (y[t] - x[t]) ** 2
    return lp + sum(piece.sum(-1) for piece in q.split(3, -1)) * 0.1


def test_multi_output_views_are_written_as_plain_c():
    """unbind and split (of the parameters and of the data) are views read through by their pieces, as one
    Python loop over a state vector uses them (posteriordb's second-tier local_level and sv_latent): plain C, not
    AOTInductor's minutes. Control: an operator with several outputs that are not views of its input is still
    refused, with the reason."""
    _agrees(_unbound_walk, 8)

    def with_sort(q):
        return torch.sort(q, -1).values.sum(-1) - q.square().sum(-1)
    with pytest.raises(compiled.NotCompiled, match=r"as plain C: .*(several outputs|sort)"):
        compiled.compiled_density(with_sort, 3, torch.float64)


def test_an_operator_without_c_goes_to_aotinductor_with_the_reason():
    def log_prob(q):
        return torch.linalg.eigvalsh(q[..., :, None] * q[..., None, :]).sum(-1) - q.square().sum(-1)
    with pytest.raises(compiled.NotCompiled, match=r"as plain C: no C for the operator aten\._linalg_eigh"):
        compiled.compiled_density(log_prob, 3, torch.float64)


def test_buffers_are_reused_once_their_last_reader_has_run():
    """A chain of 40 elementwise steps on 1,000 numbers and its gradient: the workspace is a fraction of what every
    buffer of its own would take."""
    big = torch.linspace(0, 1, 1000, dtype=torch.float64)

    def log_prob(q):
        x = q[0] * big
        for _ in range(40):
            x = torch.tanh(x) + big
        return -x.square().sum() - q.square().sum()
    # the backward pass keeps the forward's 40 tanh values: the reuse is among the other 170 buffers
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(compiled._grad_and_value(log_prob), decomposition_table=compiled._decompositions())(
        torch.zeros(2, dtype=torch.float64))
    generated = codegen.generate(graph, 2, torch.float64)
    assert generated.operations > 80
    assert generated.work_bytes < generated.allocated_bytes / 3, (generated.work_bytes, generated.allocated_bytes)


def test_chains_split_over_threads_give_the_same_draws_as_one_thread(monkeypatch):
    from bayesx.kernels.nuts import chain_seeds

    log_prob, dim = OPERATOR_FAMILIES["index and index_put"]
    density = compiled.compiled_density(log_prob, dim, torch.float64)
    q = 0.1 * torch.randn(6, dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p = torch.randn(6, dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lp, grad = density.log_prob_and_grad(q)
    seeds = chain_seeds(6, torch.Generator().manual_seed(2))
    inv_mass = torch.ones(dim, dtype=torch.float64)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        assert density.threads(6) == threads
        results.append(density.nuts(q, p, lp, grad, 0.3, inv_mass, 6, seeds).position)
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


TABLE = torch.linspace(0.0, 3.5, 8, dtype=torch.float64)
F = torch.nn.functional


def _rows(log_prob):
    """A density written for a batch (n, 2), as a user writes one: the trace's single point is one row."""
    return lambda q: log_prob(q.reshape(-1, 2)).reshape(q.shape[:-1])


def _slot(q):
    """A table position computed from the parameters: floor(|q0| * 2), past the 8 entries from |q0| = 4 on."""
    return torch.floor(q[:, 0].abs() * 2).long()


def _signed_slot(q):
    """floor(q0 * 2): negative for q0 < 0 (from -1/2 to -4 a position counted from the end where that is allowed)."""
    return torch.floor(q[:, 0] * 2).long()


def _gaussian(q):
    return -0.5 * q.square().sum(-1)


INDEXING = {
    # name: (density over rows (n, 2), the operator whose bounds check fails, a point PyTorch accepts, one it refuses)
    "advanced indexing": (lambda q: _gaussian(q) + TABLE[_slot(q)], "aten.index.Tensor", [3.9, 1.0], [-5.0, 1.0]),
    "negative advanced index": (lambda q: _gaussian(q) + TABLE[_signed_slot(q)], "aten.index.Tensor", [-3.9, 1.0],
                                [-4.1, 1.0]),
    "index_put": (lambda q: _gaussian(q) + (torch.zeros(q.shape[0], 8, dtype=q.dtype).index_put(
        (torch.arange(q.shape[0]), _slot(q)), q[:, 1]) * TABLE).sum(-1), "aten.index_put.default", [3.9, 1.0],
        [4.0, 1.0]),
    "index_select": (lambda q: _gaussian(q) + TABLE.index_select(0, _signed_slot(q)), "aten.index_select.default",
                     [3.9, 1.0], [-0.2, 1.0]),  # no position counted from the end: -1 is refused
    "gather": (lambda q: _gaussian(q) + TABLE.expand(q.shape[0], 8).gather(1, _slot(q)[:, None])[:, 0],
               "aten.gather.default", [3.9, 1.0], [4.5, 1.0]),
    "scatter_add": (lambda q: _gaussian(q) + (torch.zeros(q.shape[0], 8, dtype=q.dtype).scatter_add(
        1, _slot(q)[:, None], q[:, 1:]) * TABLE).sum(-1), "aten.scatter_add.default", [3.9, 1.0], [-4.2, 1.0]),
    "embedding": (lambda q: _gaussian(q) + F.embedding(_slot(q), TABLE[:, None])[:, 0], "aten.embedding.default",
                  [3.9, 1.0], [6.0, 1.0]),
}


@pytest.mark.parametrize("name", list(INDEXING))
def test_an_index_from_the_parameters_is_checked_as_pytorch_checks_it(name):
    """Each indexing operator that codegen writes checks a parameter-dependent index against its dimension: where
    PyTorch raises (IndexError, RuntimeError), the compiled evaluation fails with the index and the operator, and
    never returns a number read past the table (before: +16.1 at theta=[-5, 1]). Control: at a point inside, the
    compiled value equals PyTorch's, and PyTorch does raise at the point outside."""
    from bayesx.errors import DensityError

    function, operator, inside, outside = INDEXING[name]
    log_prob = _rows(function)
    graph = compiled._trace(log_prob, 2, torch.float64)
    assert operator in codegen.generate(graph, 2, torch.float64).checks, "the operator writes a bounds check"
    density = compiled.compiled_density(log_prob, 2, torch.float64)
    assert density.compiler == "plain C"
    inside, outside = (torch.tensor([point], dtype=torch.float64) for point in (inside, outside))
    lp, grad = density.log_prob_and_grad(inside)
    x = inside.clone().requires_grad_(True)
    torch.testing.assert_close(lp, log_prob(x).detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, torch.autograd.grad(log_prob(x).sum(), x)[0], rtol=1e-12, atol=1e-12)
    with pytest.raises((IndexError, RuntimeError)):
        log_prob(outside)
    with pytest.raises(DensityError, match=r"index -?\d+ is out of bounds for dimension \d with size 8 in the "
                                           rf"compiled density \({operator}\) at theta=\[{outside[0, 0]:.3g}, 1\]"):
        density.log_prob_and_grad(outside)
    lp, _ = density.log_prob_and_grad(inside)  # the fault was cleared: the density evaluates again
    assert torch.isfinite(lp).all()


def test_an_index_of_the_data_alone_is_not_checked_at_run_time():
    """Data indices are checked once, when the graph is interpreted (they are the same at every point): no check in
    the C (the hierarchical models of the suite index by a data vector in every gradient). Control: the same
    indexing by a parameter-dependent index writes one."""
    log_prob, _ = OPERATOR_FAMILIES["index and index_put"]
    graph = compiled._trace(log_prob, 4, torch.float64)
    assert codegen.generate(graph, 4, torch.float64).checks == []
    graph = compiled._trace(_rows(INDEXING["advanced indexing"][0]), 2, torch.float64)
    assert codegen.generate(graph, 2, torch.float64).checks == ["aten.index.Tensor"], \
        "one check: the gradient's index_put reads the same index, checked already"


@pytest.mark.parametrize("offset", [0, 1, -1])
def test_a_diagonal_read_differentiates_through_diagonal_scatter(offset):
    """torch.diagonal's gradient is aten.diagonal_scatter (a GP's log-determinant from its Cholesky factor): written
    as a strided region of the output, equal to autograd on and off the main diagonal."""
    def log_prob(q):
        m = q[..., :, None] * q[..., None, :] + 3.0 * torch.eye(4, dtype=q.dtype)
        return torch.log(torch.diagonal(m, offset=offset, dim1=-2, dim2=-1).abs() + 1).sum(-1) - q.square().sum(-1)

    graph = compiled._trace(log_prob, 4, torch.float64)
    assert any(n.target == aten.diagonal_scatter.default for n in graph.graph.nodes)
    density = compiled.compiled_density(log_prob, 4, torch.float64)
    assert density.compiler == "plain C"
    q = torch.randn(3, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64).requires_grad_(True)
    expected = log_prob(q)
    (expected_grad,) = torch.autograd.grad(expected.sum(), q)
    lp, grad = density.log_prob_and_grad(q.detach())
    torch.testing.assert_close(lp, expected.detach())
    torch.testing.assert_close(grad, expected_grad)


def test_an_operation_of_broadcast_scalars_is_computed_once():
    """A normal likelihood whose scale is a parameter: torch.distributions expands sigma to the data's shape, so
    log(sigma) and sigma^2 read only broadcast scalars and are computed once, not at each of 3,000 rows
    (codegen._computed_once); the density still equals autograd. Control: log of the residuals, which differ
    row by row, stays a loop over the rows."""
    rows = torch.linspace(-2.0, 2.0, 3000, dtype=torch.float64)

    def log_prob(q):
        sigma = q[..., 1].exp()[..., None]
        mean = q[..., :1] + 0.5 * rows  # the scale is expanded to the mean's shape, row by row
        return torch.distributions.Normal(mean, sigma, validate_args=False).log_prob(rows).sum(-1) - q.square().sum(-1)

    def residual_logs(q):
        return -((rows - q[..., :1]).square() + 1.0).log().sum(-1) - q.square().sum(-1)

    _agrees(log_prob, 2)
    _agrees(residual_logs, 2)
    from torch.fx.experimental.proxy_tensor import make_fx

    def source(density):
        graph = make_fx(compiled._grad_and_value(density), decomposition_table=compiled._decompositions())(
            torch.zeros(2, dtype=torch.float64))
        return codegen.generate(graph, 2, torch.float64).source

    looped_logs = lambda text: [line for line in text.splitlines() if "log(" in line and "[i" in line]  # noqa: E731
    assert looped_logs(source(log_prob)) == []
    assert looped_logs(source(residual_logs)) != []
