"""The elliptic-PDE inverse problem: P2 finite elements (convergence, assembly against scikit-fem),
the adjoint gradient against finite differences, the dense path against the sparse one, the prior
(covariance and on-disk cache), forward(), the generated data, bad input and evaluate().

Meshes are tiny (2-8 squares per side, at most 16 for the convergence study) so that the file runs
in a few seconds. The prior factor cache goes to a temporary ``$BAYESX_DATA_DIR``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from skfem import BilinearForm, asm
from skfem.helpers import dot, grad

from bayesx.diagnostics import convergence
from bayesx.errors import BayesxError
from method_helpers import prepared
from bayesx.targets.elliptic import EllipticInverse, prior, problem
from bayesx.targets.elliptic import dense
from bayesx.targets.elliptic.dense import LapackLU, TorchLU
from bayesx.targets.elliptic.fem import P2Space

MESH = 4  # 81 unknowns


pytestmark = pytest.mark.usefixtures("data_dir")  # the prior-factor caches go to a temporary folder


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- P2 finite elements --------------------------------------------------------------------------------
PI = math.pi


def exact_pressure(x, y):
    """p = cos(pi x) cos(pi y): zero normal derivative on the unit square, zero boundary mean."""
    return np.cos(PI * x) * np.cos(PI * y)


def log_coefficient(x, y):
    return 0.3 * np.sin(2 * PI * x) * y


def manufactured_source(x, y):
    """f = -div(exp(u) grad p) = -exp(u) (lap p + grad u . grad p) for the two functions above."""
    k = np.exp(log_coefficient(x, y))
    ux, uy = 0.6 * PI * np.cos(2 * PI * x) * y, 0.3 * np.sin(2 * PI * x)
    px, py = -PI * np.sin(PI * x) * np.cos(PI * y), -PI * np.cos(PI * x) * np.sin(PI * y)
    lap = -2.0 * PI**2 * exact_pressure(x, y)
    return -k * (lap + ux * px + uy * py)


def test_manufactured_source_is_minus_the_divergence_of_the_flux():
    """Guard the hand-derived f against central differences of the flux k grad p."""
    h = 1e-4
    k = lambda x, y: np.exp(log_coefficient(x, y))  # noqa: E731
    flux_x = lambda x, y: k(x, y) * (exact_pressure(x + h, y) - exact_pressure(x - h, y)) / (2 * h)  # noqa: E731
    flux_y = lambda x, y: k(x, y) * (exact_pressure(x, y + h) - exact_pressure(x, y - h)) / (2 * h)  # noqa: E731
    pts = np.random.default_rng(0).uniform(0.1, 0.9, size=(6, 2))
    for x, y in pts:
        div = ((flux_x(x + h, y) - flux_x(x - h, y)) + (flux_y(x, y + h) - flux_y(x, y - h))) / (2 * h)
        assert manufactured_source(x, y) == pytest.approx(-div, rel=1e-5, abs=1e-5)


def solve_manufactured(n: int) -> tuple[P2Space, np.ndarray]:
    space = P2Space(n)
    factorized = space.factorize(space.interpolate(log_coefficient))
    return space, factorized.solve(np.append(space.load_vector(manufactured_source), 0.0))


def test_p2_converges_at_third_order_in_l2():
    # the exact solution satisfies the constraint int_boundary p ds = 0 (each side integrates cos to 0)
    space = P2Space(4)
    assert abs(space.boundary @ space.interpolate(exact_pressure)) < 1e-12
    errors = {}
    for n in (4, 8, 16):
        space, x = solve_manufactured(n)
        errors[n] = space.l2_error(x[:-1], exact_pressure)
        # compatible data (int f = 0): the multiplier vanishes up to the discretization error
        assert abs(x[-1]) < 1e-4
        # the discrete solution obeys the discrete constraint
        assert abs(space.boundary @ x[:-1]) < 1e-10
    rates = [math.log2(errors[n] / errors[2 * n]) for n in (4, 8)]
    # P2: O(h^3) in L2. A rate limited by the P2 interpolation of the coefficient would also be 3.
    assert all(2.7 < r < 3.4 for r in rates), (errors, rates)
    assert errors[16] < 1e-4


@pytest.mark.parametrize("n", [2, 5])
def test_stiffness_equals_scikit_fem_assembly(n):
    space = P2Space(n)
    u = np.random.default_rng(n).normal(scale=0.7, size=space.n_dofs)
    saddle = space.saddle_matrix(space.coefficient_at_quadrature(u)).tocsr()
    stiffness = saddle[: space.n_dofs, : space.n_dofs]
    form = BilinearForm(lambda p, v, w: np.exp(w.u) * dot(grad(p), grad(v)))
    reference = asm(form, space.basis, u=space.basis.interpolate(u))
    scale = abs(reference).max()
    assert abs(stiffness - reference).max() <= 1e-12 * scale
    # the constraint row/column is the boundary vector, the corner zero
    boundary_col = saddle[: space.n_dofs, space.n_dofs].toarray().ravel()
    boundary_row = saddle[space.n_dofs, : space.n_dofs].toarray().ravel()
    np.testing.assert_array_equal(boundary_col, space.boundary)
    np.testing.assert_array_equal(boundary_row, space.boundary)
    assert saddle[space.n_dofs, space.n_dofs] == 0.0


@pytest.mark.parametrize("n", [2, 5])
def test_boundary_vector_integrates_over_the_perimeter(n):
    space = P2Space(n)
    assert space.boundary.sum() == pytest.approx(4.0, abs=1e-12)  # int_boundary 1 ds
    x, y = space.coords.T
    on_boundary = np.isclose(x, 0) | np.isclose(x, 1) | np.isclose(y, 0) | np.isclose(y, 1)
    assert np.all(space.boundary[on_boundary] > 0.01)
    # interior dofs of boundary elements pick up rounding (~1e-18) from the facet quadrature, no more
    assert np.all(np.abs(space.boundary[~on_boundary]) < 1e-15)
    # P2 integrates quadratics on the edges exactly: int x ds = 0.5 + 0.5 + 0 + 1 = 2
    assert space.boundary @ space.interpolate(lambda x, y: x) == pytest.approx(2.0, abs=1e-12)
    assert space.boundary @ space.interpolate(lambda x, y: x**2) == pytest.approx(1 / 3 + 1 / 3 + 0 + 1, abs=1e-12)


# --- adjoint gradient ----------------------------------------------------------------------------------
def directional_fd(f, q: torch.Tensor, d: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return (f(q + eps * d) - f(q - eps * d)) / (2 * eps)


def assert_directional(fd: torch.Tensor, analytic: torch.Tensor, rtol: float = 1e-5):
    scale = torch.maximum(analytic.abs(), torch.ones_like(analytic))
    assert torch.all((fd - analytic).abs() <= rtol * scale), (fd, analytic)


@pytest.mark.parametrize("whiten", [False, True])
def test_log_likelihood_gradient_matches_finite_differences(whiten):
    """The adjoint gradient of l with respect to the field u; along q it is J^T grad_u (J = L when whitened)."""
    model = EllipticInverse(mesh=MESH, whiten=whiten)
    g = gen(1)
    q = model.sample_prior(3, g)
    log_lik, grad_u = model._misfit(q, need_grad=True)
    assert torch.allclose(log_lik, model.log_likelihood(q))
    grad_q = grad_u @ model.prior.chol if whiten else grad_u
    for _ in range(3):
        d = torch.randn(model.dim, generator=g, dtype=torch.float64)
        assert_directional(directional_fd(model.log_likelihood, q, d), grad_q @ d)


@pytest.mark.parametrize("whiten", [False, True])
def test_log_prob_gradient_matches_finite_differences(whiten):
    model = EllipticInverse(mesh=MESH, whiten=whiten)
    g = gen(2)
    q = model.sample_prior(3, g)
    lp, grad = model.log_prob_and_grad(q)
    assert torch.allclose(lp, model.log_prob(q))
    assert grad.shape == q.shape
    for _ in range(3):
        d = torch.randn(model.dim, generator=g, dtype=torch.float64)
        assert_directional(directional_fd(model.log_prob, q, d), grad @ d)
    # batch shapes pass through: (2, 3, dim) -> (2, 3)
    lp2, grad2 = model.log_prob_and_grad(torch.stack([q, q]))
    assert lp2.shape == (2, 3) and grad2.shape == (2, 3, model.dim)
    assert torch.allclose(lp2[1], lp) and torch.allclose(grad2[0], grad)


def test_whitened_and_plain_parameterizations_agree():
    plain, white = EllipticInverse(mesh=MESH), EllipticInverse(mesh=MESH, whiten=True)
    v = white.sample_prior(2, gen(3))
    u = white.field(v)
    assert torch.allclose(white.log_likelihood(v), plain.log_likelihood(u))
    # the log priors differ by the constant log det L only: here both drop it, so they are equal
    assert torch.allclose(white.prior_log_prob(v), plain.prior_log_prob(u))
    _, grad_u = plain._misfit(u, True)
    _, grad_v = white._misfit(v, True)
    assert torch.allclose(grad_v, grad_u)  # _misfit differentiates with respect to the field
    assert torch.allclose(white.prior_factor(), torch.eye(white.dim, dtype=torch.float64))


def test_prior_gradient_is_minus_the_precision_times_u():
    model = EllipticInverse(mesh=2)
    u = model.sample_prior(2, gen(4))
    lp, grad = model.prior_log_prob_and_grad(u)
    cov = prior.exponential_kernel(model.space.coords, 1.25, 0.0625)
    cov[np.diag_indices_from(cov)] += prior.JITTER * 1.25**2
    expected = -np.linalg.solve(cov, u.numpy().T).T
    np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lp.numpy(), 0.5 * (u.numpy() * expected).sum(-1), rtol=1e-8)


@pytest.mark.parametrize("whiten, level, restriction", [(False, None, "projection"), (True, None, "projection"),
                                                         (False, 2, "projection"), (True, 2, "injection")])
def test_prediction_jacobian_matches_finite_differences(whiten, level, restriction):
    """dF_n/dq from one adjoint solve per sensor (times L when whitened, R_n^T on a coarse level): central
    differences of the level's predictions along random directions agree, and the rows differ from one another
    (a control against one row repeated)."""
    model = EllipticInverse(mesh=MESH, whiten=whiten, solver="sparse", restriction=restriction)
    q = 0.5 * model.sample_prior(1, gen(41))[0]
    jacobian = model.prediction_jacobian(q, level).numpy()
    assert jacobian.shape == (25, model.dim)
    rng = np.random.default_rng(42)
    for _ in range(3):
        d, eps = torch.as_tensor(rng.normal(size=model.dim)), 1e-6
        fd = (model.level_predictions((q + eps * d)[None], level) - model.level_predictions((q - eps * d)[None], level))
        np.testing.assert_allclose(jacobian @ d.numpy(), fd[0].numpy() / (2 * eps), rtol=1e-5, atol=1e-8)
    assert np.abs(jacobian[0] - jacobian[1]).max() > 1e-3 * np.abs(jacobian).max()


# --- dense solver -------------------------------------------------------------------------------------
@pytest.mark.parametrize("whiten", [False, True])
def test_dense_solver_equals_sparse_solver(whiten):
    sparse = EllipticInverse(mesh=MESH, whiten=whiten, solver="sparse")
    dense = EllipticInverse(mesh=MESH, whiten=whiten, solver="dense")
    assert sparse.describe()["solver"] == "sparse" and dense.describe()["solver"] == "dense"
    q = sparse.sample_prior(4, gen(5))
    lp_s, grad_s = sparse.log_prob_and_grad(q)
    lp_d, grad_d = dense.log_prob_and_grad(q)
    torch.testing.assert_close(lp_d, lp_s, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grad_d, grad_s, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(dense.log_likelihood(q), sparse.log_likelihood(q), rtol=1e-10, atol=1e-10)
    # a failed solve is NaN on both paths, without touching the other rows
    bad = q.clone()
    bad[1] = 1e4
    for model in (sparse, dense):
        with np.errstate(over="ignore", invalid="ignore"):
            ll, g = model._misfit(bad, True)
        assert torch.isnan(ll[1]) and torch.isnan(g[1]).all()
        assert torch.isfinite(ll[[0, 2, 3]]).all() and torch.isfinite(g[[0, 2, 3]]).all()


def test_auto_solver_is_dense_for_small_levels_on_the_cpu():
    model = EllipticInverse(mesh=10)
    assert model.likelihood_level.solver == "sparse" and model.level(5).solver == "dense"  # 441 and 121 unknowns
    assert model.describe()["solver"] == "sparse" and model.describe()["linear_solver"] == "superlu"
    assert EllipticInverse(mesh=10, solver="dense").level(5).solver == "dense"  # an explicit choice holds everywhere
    assert EllipticInverse(mesh=4, solver="sparse").describe()["solver"] == "sparse"
    assert EllipticInverse(mesh=4, solver="dense").describe()["linear_solver"] == "lapack-lu"
    # the solver describes the model; the samplers' backend (the run's ``kernels`` tag) is PyTorch's
    assert model.density_form() is None and prepared(model, model.initial_point(2, gen(0))).name == "pytorch"


def _symmetric_systems(n: int, batch: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, n, n, generator=g, dtype=torch.float64)
    return a + a.transpose(1, 2) + 2 * n * torch.eye(n, dtype=torch.float64)


def test_lapack_lu_solves_symmetric_systems_and_reports_failures():
    matrices = _symmetric_systems(7, 3, 0)
    rhs = torch.randn(3, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    matrices[1, 2, :] = matrices[1, :, 2] = 0.0  # singular: a zero row and column
    matrices[2, 0, 0] = math.inf
    factors = LapackLU(matrices.clone())
    assert factors.failed.tolist() == [False, True, True]
    x = factors.solve(rhs)
    torch.testing.assert_close(matrices[0] @ x[0], rhs[0], rtol=1e-12, atol=1e-12)
    assert torch.isnan(x[2]).all()  # not factorized at all: NaN, never garbage


@pytest.mark.parametrize("batched", [True, False])
def test_torch_lu_and_lapack_lu_agree(batched, monkeypatch):
    """The GPU path's torch LU, batched (small matrices) or one call per matrix (large ones, here forced by the
    size threshold), run here on the CPU with one thread (see dense.py on why not more); a singular matrix fails."""
    if not batched:
        monkeypatch.setattr(dense, "BATCHED_LU_MAX_SIZE", 4)
    matrices = _symmetric_systems(9, 4, 2)
    matrices[3, 2, :] = matrices[3, :, 2] = 0.0
    rhs = torch.randn(4, 9, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        factors = TorchLU(matrices.clone())
        assert len(factors.factors) == (1 if batched else 4)
        torch.testing.assert_close(factors.solve(rhs)[:3], LapackLU(matrices[:3].clone()).solve(rhs[:3]),
                                   rtol=1e-12, atol=1e-12)
        assert factors.failed.tolist() == [False, False, False, True]
    finally:
        torch.set_num_threads(threads)


def test_dense_solves_in_chunks_agree_with_one_batch(monkeypatch):
    """Chains whose dense matrices would not fit MAX_BATCH_BYTES at once are solved a few at a time, with the same
    values and gradients (here forced to one chain per chunk)."""
    model = EllipticInverse(mesh=MESH, solver="dense")
    q = model.sample_prior(3, gen(12))
    whole, whole_log_lik = model.log_prob_and_grad(q), model.log_likelihood(q)
    monkeypatch.setattr(dense, "MAX_BATCH_BYTES", 1)
    operators = model.likelihood_level._dense_operators()
    assert len(operators._chunks(q)) == 3
    chunked = model.log_prob_and_grad(q)
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(chunked[1], whole[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.log_likelihood(q), whole_log_lik, rtol=1e-12, atol=1e-12)


# --- prior --------------------------------------------------------------------------------------------
def test_prior_draws_have_the_exponential_kernel_covariance():
    sigma, length = 1.25, 0.0625
    model = EllipticInverse(mesh=2, prior_sd=sigma, prior_length=length)  # 25 dofs
    n = 20000
    draws = model.sample_prior(n, gen(6)).numpy()
    assert draws.shape == (n, model.dim)
    estimate = draws.T @ draws / n  # the mean is known to be zero
    dist = np.linalg.norm(model.space.coords[:, None] - model.space.coords[None], axis=-1)
    kernel = sigma**2 * np.exp(-dist / (2 * length))
    # for Gaussian draws with zero mean, Var(x_i x_j) = C_ii C_jj + C_ij^2
    sd = np.sqrt((np.outer(np.diag(kernel), np.diag(kernel)) + kernel**2) / n)
    z = (estimate - kernel) / sd
    upper = np.triu_indices(model.dim)
    assert np.max(np.abs(z[upper])) < 5.0, np.max(np.abs(z[upper]))  # 325 entries: 5 sd is a 1-in-3000 miss
    assert 0.6 < np.mean(z[upper] ** 2) < 1.6  # the z-scores are of the right size
    # negative control: the kernel without the factor 2 in 2 s0 is rejected by the same check
    wrong = sigma**2 * np.exp(-dist / length)
    assert np.max(np.abs((estimate - wrong) / sd)[upper]) > 10.0


def test_a_long_range_prior_falls_back_to_the_cholesky_factor():
    """No circulant embedding of a kernel this long-ranged is positive semi-definite: draws use L z instead."""
    model = EllipticInverse(mesh=4, prior_length=2.0)
    assert model.prior.circulant is None and model.describe()["prior_draws"] == "cholesky"
    draws = model.sample_prior(20000, gen(8)).numpy()
    dist = np.linalg.norm(model.space.coords[:, None] - model.space.coords[None], axis=-1)
    kernel = 1.25**2 * np.exp(-dist / (2 * 2.0))
    assert np.abs(draws.T @ draws / 20000 - kernel).max() < 0.1  # sd of each entry <= 1.25^2 * sqrt(2 / 20000)
    assert EllipticInverse(mesh=4).prior.circulant is not None


def test_prior_factor_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESX_DATA_DIR", str(tmp_path))
    first = EllipticInverse(mesh=3)
    files = sorted((tmp_path / "elliptic").glob("prior-chol-*.npy"))
    assert [f.name.split("-")[2] for f in files] == [str(first.dim)]
    cached = np.load(files[0])
    np.testing.assert_array_equal(cached, first.prior.chol.numpy())
    np.testing.assert_allclose(cached @ cached.T, prior.exponential_kernel(first.space.coords, 1.25, 0.0625),
                               atol=1e-8)

    def no_factorization(*args, **kwargs):
        raise AssertionError("the prior was factorized again instead of loaded from the cache")

    with monkeypatch.context() as mp:
        mp.setattr(prior, "exponential_kernel", no_factorization)
        second = EllipticInverse(mesh=3)
    assert torch.equal(second.prior.chol, first.prior.chol)

    # another length scale is another file; a corrupt file is factorized again and replaced
    EllipticInverse(mesh=3, prior_length=0.1)
    assert len(list((tmp_path / "elliptic").glob("prior-chol-*.npy"))) == 2
    files[0].write_bytes(files[0].read_bytes()[:200])
    third = EllipticInverse(mesh=3)
    assert torch.equal(third.prior.chol, first.prior.chol)
    np.testing.assert_array_equal(np.load(files[0]), cached)
    assert not list((tmp_path / "elliptic").glob("*.tmp.npy"))


# --- forward ------------------------------------------------------------------------------------------
def test_forward_shapes_and_inputs():
    model = EllipticInverse(mesh=MESH)
    one = model.forward(model.true_u)
    assert one.shape == (25,) and np.all(np.isfinite(one))
    fields = model.sample_prior(3, gen(7))
    many = model.forward(fields)
    assert many.shape == (3, 25)
    np.testing.assert_allclose(model.forward(fields[1]), many[1], rtol=1e-12)
    np.testing.assert_allclose(model.forward(fields.numpy()), many, rtol=1e-12)
    # the log-likelihood is the misfit of forward() against the observations
    expected = -0.5 * (((model.observations - many) / model.noise_sd) ** 2).sum(-1)
    np.testing.assert_allclose(model.log_likelihood(fields).numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("shape", [(5,), (82,), (2, 3, 81), (2, 80)])
def test_forward_rejects_a_field_of_the_wrong_length(shape):
    model = EllipticInverse(mesh=MESH)
    with pytest.raises(BayesxError, match=r"field of length 81 .*4 x 4 mesh") as info:
        model.forward(np.zeros(shape))
    assert str(tuple(shape)) in str(info.value)


@pytest.mark.parametrize("value", [1e4, -1e4, np.nan])
def test_forward_of_a_field_whose_solve_diverges(value):
    model = EllipticInverse(mesh=MESH)
    field = np.zeros(model.dim)
    field[:10] = value
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(BayesxError, match="PDE solve diverged"):
            model.forward(field)
        with pytest.raises(BayesxError, match="PDE solve diverged"):
            model.forward(np.stack([np.zeros(model.dim), field]))
        # the sampler's entry point reports NaN instead, row by row
        q = torch.as_tensor(np.stack([np.zeros(model.dim), field]))
        ll = model.log_likelihood(q)
    assert torch.isfinite(ll[0]) and torch.isnan(ll[1])


# --- bad constructor input --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, needle", [
    ({"mesh": 1}, "model.mesh"),
    ({"mesh": 0}, "model.mesh"),
    ({"mesh": 2.5}, "model.mesh"),
    ({"prior_length": 0}, "model.prior_length"),
    ({"prior_sd": -1}, "model.prior_sd"),
    ({"noise_sd": 0}, "model.noise_sd"),
    ({"snr": -2}, "model.snr"),
    ({"solver": "magic"}, "model.solver"),
    ({"restriction": "nearest"}, "model.restriction"),
    ({"data_mesh_factor": 0}, "model.data_mesh_factor"),
    ({"whiten": "yes"}, "model.whiten"),
    ({"eval_draws": 0}, "model.eval_draws"),
], ids=lambda v: str(v))
def test_bad_constructor_input_names_the_option(kwargs, needle):
    with pytest.raises(BayesxError) as info:
        EllipticInverse(**kwargs)
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert repr(next(iter(kwargs.values()))).strip("'") in message


# --- data ---------------------------------------------------------------------------------------------
def test_observations_are_noisy_seeded_and_reproducible():
    model = EllipticInverse(mesh=MESH)
    assert model.noise_sd == pytest.approx(0.1)  # max|u0| / snr = 1 / 10
    assert model.observations.shape == model.clean.shape == (25,)
    noise = model.observations - model.clean
    assert np.all(noise != 0)
    # exactly the seeded normal draws, scaled by the noise sd
    np.testing.assert_allclose(noise, np.random.default_rng(2017).normal(size=25) * 0.1, rtol=1e-12, atol=1e-15)
    again = EllipticInverse(mesh=MESH)
    np.testing.assert_array_equal(again.observations, model.observations)
    other = EllipticInverse(mesh=MESH, data_seed=7)
    np.testing.assert_array_equal(other.clean, model.clean)
    assert np.all(other.observations != model.observations)
    louder = EllipticInverse(mesh=MESH, noise_sd=0.5)
    np.testing.assert_allclose(louder.observations - louder.clean, 5.0 * noise, rtol=1e-10)
    np.testing.assert_array_equal(problem.sensor_points(), model.sensors)


def test_data_are_generated_on_the_finer_mesh():
    model = EllipticInverse(mesh=MESH)  # data_mesh_factor 2: generated on 8 x 8
    on_inference_mesh = model.forward(model.true_u)
    rel = np.linalg.norm(model.clean - on_inference_mesh) / np.linalg.norm(on_inference_mesh)
    assert 1e-3 < rel < 0.5  # close, but no inverse crime
    # the clean data are those of the 8 x 8 mesh itself
    fine = EllipticInverse(mesh=2 * MESH, data_mesh_factor=1)
    np.testing.assert_allclose(model.clean, fine.clean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(fine.clean, fine.forward(fine.true_u), rtol=1e-12, atol=1e-15)
    # and the noise is the same seeded draw, whichever mesh infers
    np.testing.assert_allclose(model.observations - model.clean, fine.observations - fine.clean, rtol=1e-12)


# --- evaluate and artifacts -----------------------------------------------------------------------------
def test_evaluate_uses_the_recorded_log_likelihood_exactly():
    model = EllipticInverse(mesh=MESH)
    draws = model.sample_prior(12, gen(8)).reshape(2, 6, model.dim)
    recorded = np.arange(12, dtype=np.float64).reshape(2, 6) - 100.0  # not the draws' likelihoods
    evaluation = model.evaluate(draws, sample_stats={"log_lik": recorded, "accepted": np.ones((2, 6), bool)})
    out = {**evaluation.metrics, **convergence.quantity_ess(evaluation.quantities)}  # as the sampler family reports
    assert {"log_likelihood", "ess_log_likelihood", "field_rel_err", "ess_field_min"} <= set(out)
    assert out["log_likelihood"] == float(recorded.mean())
    assert math.isfinite(out["ess_log_likelihood"]) and out["ess_log_likelihood"] > 0
    assert math.isfinite(out["ess_field_min"]) and out["ess_field_min"] > 0
    np.testing.assert_array_equal(evaluation.quantities["log_likelihood"], recorded)
    assert evaluation.notes["log_likelihood"] == "every retained draw"


def test_evaluate_computes_the_log_likelihood_when_not_recorded():
    model = EllipticInverse(mesh=MESH)
    draws = model.sample_prior(12, gen(9)).reshape(2, 6, model.dim)
    evaluation = model.evaluate(draws)
    expected = model.log_likelihood(draws.reshape(-1, model.dim)).mean()
    assert evaluation.metrics["log_likelihood"] == pytest.approx(float(expected), rel=1e-12)
    assert "ess_log_likelihood" in convergence.quantity_ess(evaluation.quantities)
    # with eval_draws=4 over 2 chains: the first and last draw of each chain; too few for an ESS
    thin = EllipticInverse(mesh=MESH, eval_draws=4)
    evaluation = thin.evaluate(draws)
    expected = thin.log_likelihood(draws[:, [0, 5]].reshape(-1, model.dim)).mean()
    assert evaluation.metrics["log_likelihood"] == pytest.approx(float(expected), rel=1e-12)
    assert "ess_log_likelihood" not in convergence.quantity_ess(evaluation.quantities)
    assert evaluation.quantities["log_likelihood"].shape == (2, 2)


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # constant draws: no R-hat
def test_evaluate_field_error_and_posterior_moments():
    model = EllipticInverse(mesh=MESH)
    truth = torch.as_tensor(model.true_u).expand(2, 5, model.dim)
    out = model.evaluate(truth + 0.0).metrics
    assert out["field_rel_err"] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(model.evaluate(truth + 0.0).quantities["field"][0, 0], model.true_u[model.field_probe_dofs()])
    zero = model.evaluate(torch.zeros(2, 5, model.dim)).metrics
    assert zero["field_rel_err"] == pytest.approx(1.0)
    # whitened draws are mapped to fields first
    white = EllipticInverse(mesh=MESH, whiten=True)
    v = white.prior.whiten(torch.as_tensor(white.true_u))
    assert white.evaluate(v.expand(2, 5, white.dim) + 0.0).metrics["field_rel_err"] == pytest.approx(0.0, abs=1e-9)


def test_write_artifacts(tmp_path):
    model = EllipticInverse(mesh=MESH)
    before = model.write_artifacts(tmp_path, None, None)
    assert [p.name for p in before["data"]] == ["observations.csv"]
    assert [p.name for p in before["plots"]] == ["true_field.png"]
    table = np.loadtxt(tmp_path / "observations.csv", delimiter=",", skiprows=1)
    assert (tmp_path / "observations.csv").read_text().splitlines()[0] == "x,y,clean,observed"
    assert table.shape == (25, 4)
    np.testing.assert_allclose(table[:, :2], model.sensors)
    np.testing.assert_allclose(table[:, 2], model.clean, rtol=1e-9)
    np.testing.assert_allclose(table[:, 3], model.observations, rtol=1e-9)

    draws = model.sample_prior(12, gen(10)).reshape(2, 6, model.dim)
    after = model.write_artifacts(tmp_path, draws, model.evaluate(draws))
    assert sorted(p.name for p in after["plots"]) == ["log_likelihood_trace.png", "posterior_fields.png",
                                                     "true_field.png"]
    for path in after["plots"]:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 1000


def test_describe_and_probes():
    model = EllipticInverse(mesh=MESH)
    tags = model.describe()
    assert tags == {"dim": "81", "mesh": "4", "elements": "P2", "n_obs": "25", "noise_sd": "0.1", "whiten": "false",
                    "solver": "dense", "linear_solver": "lapack-lu", "likelihood_mesh": "4", "restriction": "projection",
                    "prior_draws": "circulant",
                    "posterior": "exact"}
    probes = model.field_probe_dofs()
    assert probes.shape == (5,)
    np.testing.assert_allclose(model.dof_coordinates[probes], [[0.25, 0.25], [0.5, 0.5], [0.75, 0.25],
                                                               [0.75, 0.75], [0.25, 0.75]])
