"""The k-DPP prior of DPP-VAE (bayesx.methods.vae.dpp): elementary symmetric polynomials, the Gaussian
kernel's spectrum, the truncated-spectrum normaliser bound, log p(Z) and its gradient, bad input."""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from bayesx.errors import BayesxError
from bayesx.methods.vae import dpp
from bayesx.methods.vae.dpp import (KDPPPrior, gaussian_kernel_eigenfunctions_1d, gaussian_kernel_eigenvalues,
                            gaussian_kernel_log_eigenvalues, kdpp_log_prob, log_elementary_symmetric,
                            log_elementary_symmetric_all, log_normalizer_bound, log_normalizer_bounds,
                            log_trace, matrix_L)


def brute_log_esp(lams, k):
    """log of sum over k-subsets of products, in exact rational arithmetic."""
    total = sum((math.prod((Fraction(x) for x in s), start=Fraction(1))
                 for s in itertools.combinations(lams, k)), start=Fraction(0))
    return math.log(total) if total > 0 else -math.inf


def reference_log_esp(log_lams, k):
    """Plain sequential log-space recursion (numpy), no blocking."""
    E = np.full(k + 1, -np.inf)
    E[0] = 0.0
    for x in log_lams:
        E[1:] = np.logaddexp(E[1:], x + E[:-1])
    return E


def one_dim_constants(rho, sigma):
    gamma = sigma / rho
    beta2 = math.sqrt(1 + 2 / gamma)
    a = ((beta2 + 1) / 2 + 1 / (2 * gamma)) ** -0.5
    r = 1 / (gamma * (beta2 + 1) + 1)
    return (math.pi * rho) ** -0.5 * a, r


# ----------------------------------------------------------------------------- elementary symmetric polynomials

@pytest.mark.parametrize("n", range(1, 9))
def test_esp_matches_brute_force_with_extreme_magnitudes(n):
    rng = np.random.default_rng(n)
    lams = [float(v) for v in 10.0 ** rng.uniform(-30, 30, size=n)]
    lams[0] = 1e-30
    if n > 1:
        lams[1] = 1e30
    log_l = torch.tensor([math.log(v) for v in lams], dtype=torch.float64)
    got = log_elementary_symmetric_all(log_l, n + 1)
    for k in range(n + 2):
        want = brute_log_esp(lams, k)
        if want == -math.inf:
            assert got[k].item() == -math.inf  # k > n: no k-subset
        else:
            assert got[k].item() == pytest.approx(want, rel=1e-12, abs=1e-12)
            assert log_elementary_symmetric(log_l, k).item() == pytest.approx(want, rel=1e-12, abs=1e-12)
    got32 = log_elementary_symmetric_all(log_l.float(), n)
    for k in range(n + 1):
        assert got32[k].item() == pytest.approx(brute_log_esp(lams, k), rel=1e-5, abs=1e-3)


def test_esp_large_k_and_long_spectra(monkeypatch):
    # 300 equal eigenvalues 1e20: e_k = C(300, k) 1e20^k, far beyond float64 range for k = 100
    log_l = torch.full((300,), 20 * math.log(10.0), dtype=torch.float64)
    k = 100
    want = math.lgamma(301) - math.lgamma(k + 1) - math.lgamma(301 - k) + k * 20 * math.log(10.0)
    assert log_elementary_symmetric(log_l, k).item() == pytest.approx(want, rel=1e-13)
    # a spread spectrum (1e-40..1e40), several blocks and an odd block count, against the plain recursion
    rng = np.random.default_rng(0)
    x = rng.uniform(-40, 40, size=333) * math.log(10.0)
    got = log_elementary_symmetric_all(torch.tensor(x), 120).numpy()
    want = reference_log_esp(x, 120)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    assert np.isfinite(got).all()
    monkeypatch.setattr(dpp, "_BLOCK", 7)  # many small blocks, odd counts at several levels
    np.testing.assert_allclose(log_elementary_symmetric_all(torch.tensor(x), 120).numpy(), want, rtol=1e-12, atol=1e-9)
    monkeypatch.undo()
    # zero eigenvalues (log = -inf) and k larger than the number of non-zero ones
    y = torch.tensor([0.0, -math.inf, math.log(2.0), -math.inf], dtype=torch.float64)
    e = log_elementary_symmetric_all(y, 3)
    assert e[1].item() == pytest.approx(math.log(3.0))
    assert e[2].item() == pytest.approx(math.log(2.0))
    assert e[3].item() == -math.inf
    # batch axes
    xb = torch.tensor(x[:200]).reshape(2, 100)
    eb = log_elementary_symmetric(xb, 30)
    for i in range(2):
        assert eb[i].item() == pytest.approx(reference_log_esp(x[100 * i:100 * (i + 1)], 30)[30], rel=1e-12)


def test_esp_gradient(monkeypatch):
    monkeypatch.setattr(dpp, "_BLOCK", 8)  # 30 eigenvalues = 4 blocks: the recursion and the block products
    torch.manual_seed(0)
    x = (torch.randn(30, dtype=torch.float64) * 3).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: log_elementary_symmetric(v, 6), (x,))
    # d e_k / d lambda_n = e_{k-1}(lambda without n): check one coordinate
    g, = torch.autograd.grad(log_elementary_symmetric(x, 6), x)
    lam = x.detach()
    rest = torch.cat([lam[:3], lam[4:]])
    want = math.exp(lam[3].item() + log_elementary_symmetric(rest, 5).item()
                    - log_elementary_symmetric(lam, 6).item())
    assert g[3].item() == pytest.approx(want, rel=1e-10)


def test_discrete_kdpp_normalizer_matches_subset_sum():
    rng = np.random.default_rng(1)
    n = 7
    B = rng.normal(size=(n, n + 2))
    L = torch.tensor(B @ B.T / n, dtype=torch.float64)
    log_eigs = torch.log(torch.linalg.eigvalsh(L))
    E = log_elementary_symmetric_all(log_eigs, n)
    for k in range(1, n + 1):
        logdets = [torch.linalg.slogdet(L[list(s)][:, list(s)])[1].item()
                   for s in itertools.combinations(range(n), k)]
        assert E[k].item() == pytest.approx(float(np.logaddexp.reduce(logdets)), rel=1e-10, abs=1e-10)
        # the k-DPP probabilities det(L_S) / e_k of all k-subsets sum to one
        assert float(np.logaddexp.reduce(np.array(logdets) - E[k].item())) == pytest.approx(0.0, abs=1e-10)


# ----------------------------------------------------------------------------- the Gaussian kernel's spectrum

def test_spectrum_trace_and_hilbert_schmidt_identities():
    alpha, rho, sigma = 3.0, [0.7, 1.0, 2.5], [1.3, 0.4, 1.0]
    lam = gaussian_kernel_eigenvalues(alpha, rho, sigma, 3, n_per_dim=45)
    # sum lambda = int L(x, x) dx = alpha prod (pi rho)^(-1/2)
    trace = alpha * math.prod((math.pi * r) ** -0.5 for r in rho)
    assert lam.sum().item() == pytest.approx(trace, rel=1e-12)
    assert math.exp(log_trace(alpha, rho, 3)) == pytest.approx(trace, rel=1e-14)
    # sum lambda^2 = int int L(x, y)^2 dx dy = alpha^2 prod 1 / (pi rho sqrt(1 + 2 rho / sigma))
    hs = alpha ** 2 * math.prod(1 / (math.pi * r * math.sqrt(1 + 2 * r / s)) for r, s in zip(rho, sigma))
    assert (lam ** 2).sum().item() == pytest.approx(hs, rel=1e-12)
    # the thesis' eigenvalue formula without the (pi rho)^(-1/2) factor fails the trace identity
    assert lam.sum().item() / math.prod((math.pi * r) ** -0.5 for r in rho) != pytest.approx(trace, rel=1e-3)
    # the top-M products found by pruned merging are exactly the M largest of the full grid
    top = gaussian_kernel_log_eigenvalues(alpha, rho, sigma, 3, total=500)
    grid = torch.sort(lam.log(), descending=True).values[:500]
    torch.testing.assert_close(top, grid, rtol=0, atol=1e-12)


def test_hs_closed_form_by_quadrature():
    """The closed form used above for int int L^2 is itself checked by 2-D quadrature (d = 1)."""
    rho, sigma = 0.7, 1.3
    x = torch.linspace(-7, 7, 1401, dtype=torch.float64)
    L = matrix_L(x[:, None], 1.0, rho, sigma)
    h = (x[1] - x[0]).item()
    assert (L ** 2).sum().item() * h * h == pytest.approx(1 / (math.pi * rho * math.sqrt(1 + 2 * rho / sigma)),
                                                          rel=1e-9)


def test_mercer_expansion_1d():
    rho, sigma, n = 0.8, 0.5, 60
    lam = gaussian_kernel_eigenvalues(1.0, rho, sigma, 1, total=n)
    first, r = one_dim_constants(rho, sigma)
    torch.testing.assert_close(lam, first * r ** torch.arange(n, dtype=torch.float64), rtol=1e-12, atol=0)
    # orthonormal eigenfunctions in L^2(dx) (trapezoid/Riemann sum on a fine grid)
    x = torch.linspace(-9, 9, 3601, dtype=torch.float64)
    psi = gaussian_kernel_eigenfunctions_1d(x, rho, sigma, 12)
    gram = psi.T @ psi * (x[1] - x[0])
    torch.testing.assert_close(gram, torch.eye(12, dtype=torch.float64), rtol=0, atol=1e-9)
    # sum lambda_n psi_n(x) psi_n(y) = L(x, y)
    pts = torch.tensor([-1.7, -0.4, 0.0, 0.3, 1.1, 2.2], dtype=torch.float64)
    psi = gaussian_kernel_eigenfunctions_1d(pts, rho, sigma, n)
    approx = (psi * lam) @ psi.T
    torch.testing.assert_close(approx, matrix_L(pts[:, None], 1.0, rho, sigma), rtol=1e-10, atol=1e-14)


# ----------------------------------------------------------------------------- the normaliser bound

def test_bound_brackets_exact_normalizer_in_1d():
    # d = 1: a geometric spectrum c r^(n-1) has e_k = c^k r^(k(k-1)/2) / prod_{i<=k} (1 - r^i)
    alpha, rho, sigma, k = 10.0, 1.0, 1.0, 8
    first, r = one_dim_constants(rho, sigma)
    exact = k * math.log(alpha * first) + k * (k - 1) / 2 * math.log(r) - sum(
        math.log1p(-r ** i) for i in range(1, k + 1))
    uppers, lowers = [], []
    for m in (1, 4, 8, 10, 14, 20, 40):
        lo, up = log_normalizer_bounds(k, alpha, rho, sigma, 1, truncation=m)
        assert lo <= exact + 1e-12 and exact <= up + 1e-12
        lowers.append(lo)
        uppers.append(up)
    assert all(u1 >= u2 - 1e-12 for u1, u2 in zip(uppers, uppers[1:]))  # non-increasing in M
    assert all(l1 <= l2 + 1e-12 for l1, l2 in zip(lowers, lowers[1:]))  # non-decreasing in M
    assert uppers[0] - exact > 0.1  # a short truncation is a loose (but valid) bound ...
    assert uppers[-1] == pytest.approx(exact, abs=1e-10)  # ... and it converges
    assert lowers[-1] == pytest.approx(exact, abs=1e-10)


def test_kdpp_density_integrates_to_one_in_1d():
    """int int det(L_{x,y}) dx dy = 2! e_2: exp(kdpp_log_prob(ordered=True)) integrates to one."""
    x = torch.linspace(-7, 7, 351, dtype=torch.float64)
    h = (x[1] - x[0]).item()
    pairs = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2, 1)
    lp = kdpp_log_prob(pairs, alpha=5.0, rho=0.9, sigma=0.6, truncation=200, ordered=True)
    assert lp.shape == (351 * 351,)
    assert lp.exp().sum().item() * h * h == pytest.approx(1.0, rel=1e-8)


def test_bound_in_the_thesis_setting():
    # D = 20, k = N = 100, alpha, rho, sigma = 1000, 1, 1: monotone in M, bounds ordered, narrow gap
    prev_lo, prev_up = -math.inf, math.inf
    for m in (100, 400, 1600, 4096):
        lo, up = log_normalizer_bounds(100, 1000.0, 1.0, 1.0, 20, truncation=m)
        assert lo <= up
        assert up <= prev_up + 1e-9 and lo >= prev_lo - 1e-9
        prev_lo, prev_up = lo, up
    # with M far below the millions of comparable eigenvalues, the bound is the tail term
    # tr^N / N! to within a small relative error: the spectrum is nearly flat
    pure_tail = 100 * log_trace(1000.0, 1.0, 20) - math.lgamma(101)
    assert abs(prev_up - pure_tail) < 1e-3 * abs(pure_tail)
    assert log_normalizer_bound(100, 1000.0, 1.0, 1.0, 20) == pytest.approx(prev_up)
    # low dimension: the gap closes as M grows
    lo, up = log_normalizer_bounds(30, 1.0, 1.0, 1.0, 2, truncation=4000)
    assert up - lo < 1e-8


# ----------------------------------------------------------------------------- log p(Z)

def test_log_prob_matches_direct_formula_and_gradient():
    torch.manual_seed(0)
    rho, sigma = torch.tensor([0.8, 1.0, 1.5]), torch.tensor([1.2, 0.6, 1.0])
    z = torch.randn(6, 3, dtype=torch.float64)
    lp = kdpp_log_prob(z, 1000.0, rho, sigma, truncation=512)
    direct = torch.linalg.slogdet(matrix_L(z, 1000.0, rho, sigma))[1] - log_normalizer_bound(
        6, 1000.0, rho, sigma, 3, truncation=512)
    assert lp.shape == ()
    assert lp.item() == pytest.approx(direct.item(), rel=1e-10)
    zz = z.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: kdpp_log_prob(v, 1000.0, rho, sigma, truncation=512), (zz,),
                                    eps=1e-6, atol=1e-6)
    # the class gives the same value; ordered=True subtracts log N!
    prior = KDPPPrior(1000.0, rho, sigma, truncation=512)
    assert prior.log_prob(z).item() == pytest.approx(lp.item(), rel=1e-12)
    ordered = KDPPPrior(1000.0, rho, sigma, truncation=512, ordered=True).log_prob(z)
    assert ordered.item() == pytest.approx(lp.item() - math.lgamma(7), rel=1e-12)


def test_alpha_cancels_from_the_kdpp():
    z = torch.randn(5, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    a = kdpp_log_prob(z, alpha=1.0, truncation=256)
    b = kdpp_log_prob(z, alpha=1000.0, truncation=256)
    assert a.item() == pytest.approx(b.item(), rel=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_prefers_spread_out_latents(dtype):
    g = torch.Generator().manual_seed(0)
    n, d = 10, 2
    ang = torch.arange(n, dtype=dtype) * (2 * math.pi / n)
    spread = 2.0 * torch.stack([ang.cos(), ang.sin()], -1)  # 10 points on a circle of radius 2
    clumped = spread[:1] + 1e-3 * torch.randn(n, d, generator=g, dtype=dtype)  # near one of them
    assert kdpp_log_prob(spread).item() > kdpp_log_prob(clumped).item() + 20
    # the thesis setting: N = 100 standard-normal latents in D = 20 vs the same shrunk to a small ball
    # (the clump's centre has the mean squared norm of the latents, so the quality q is the same on
    # average and the difference comes from the diversity term det(K_Z))
    z = torch.randn(100, 20, generator=g, dtype=dtype)
    centre = z[0] / z[0].norm() * (z * z).sum(-1).mean().sqrt()
    near = centre + 1e-2 * (z - z.mean(0))
    lp_z, lp_near = kdpp_log_prob(z), kdpp_log_prob(near)
    assert lp_z.dtype == dtype and torch.isfinite(lp_z) and torch.isfinite(lp_near)
    assert lp_z.item() > lp_near.item()
    if dtype != torch.float64:
        return
    # the gradient pushes clumped latents apart: one ascent step raises the smallest distance
    c = clumped.clone().requires_grad_(True)
    grad, = torch.autograd.grad(kdpp_log_prob(c), c)
    assert torch.isfinite(grad).all()
    moved = (clumped + 1e-6 * grad / grad.norm()).detach()
    assert torch.pdist(moved).min() > torch.pdist(clumped).min()


def test_default_prior_float32_batch_and_speed():
    import time
    prior = KDPPPrior()
    z = torch.randn(100, 20, dtype=torch.float32, requires_grad=True)
    t0 = time.perf_counter()
    lp = prior.log_prob(z)
    lp.backward()
    first = time.perf_counter() - t0
    assert lp.dtype == torch.float32 and torch.isfinite(lp) and torch.isfinite(z.grad).all()
    t0 = time.perf_counter()
    prior.log_prob(z.detach())
    assert time.perf_counter() - t0 < 0.5  # the normaliser is cached: one 100 x 100 Cholesky
    assert first < 10.0
    # a batch of minibatches
    zb = torch.randn(3, 100, 20)
    lpb = prior.log_prob(zb)
    assert lpb.shape == (3,)
    assert lpb[1].item() == pytest.approx(prior.log_prob(zb[1]).item(), rel=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    z = torch.randn(50, 20, dtype=torch.float64)
    cpu = kdpp_log_prob(z)
    zc = z.cuda().requires_grad_(True)
    gpu = kdpp_log_prob(zc)
    gpu.backward()
    assert gpu.device.type == "cuda"
    assert gpu.item() == pytest.approx(cpu.item(), rel=1e-10)
    assert torch.isfinite(zc.grad).all()


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("kwargs, option", [
    (dict(alpha=0.0), "method.dpp_alpha"),
    (dict(alpha=-5.0), "method.dpp_alpha"),
    (dict(rho=-1.0), "method.dpp_rho"),
    (dict(rho=[1.0, 2.0, 3.0]), "method.dpp_rho"),  # latent size is 2
    (dict(sigma=float("nan")), "method.dpp_sigma"),
    (dict(sigma=torch.tensor([1.0, 0.0])), "method.dpp_sigma"),
    (dict(truncation=0), "method.dpp_truncation"),
    (dict(jitter=-1e-3), "method.dpp_jitter"),
])
def test_bad_parameters_raise(kwargs, option):
    z = torch.randn(4, 2)
    with pytest.raises(BayesxError, match=option.replace(".", r"\.")) as info:
        kdpp_log_prob(z, **kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(BayesxError, match=option.replace(".", r"\.")):
        KDPPPrior(**kwargs).log_prob(z)


def test_bad_latents_raise():
    with pytest.raises(BayesxError, match="N >= 1"):
        kdpp_log_prob(torch.zeros(0, 3))
    with pytest.raises(BayesxError, match="shape"):
        kdpp_log_prob(torch.zeros(5))
    with pytest.raises(BayesxError, match="floating-point"):
        kdpp_log_prob(torch.zeros(3, 2, dtype=torch.int64))
    with pytest.raises(BayesxError, match="NaN"):
        kdpp_log_prob(torch.full((3, 2), float("nan")))
    with pytest.raises(BayesxError):
        log_elementary_symmetric(torch.zeros(3), -1)
    with pytest.raises(BayesxError, match="total truncation"):
        gaussian_kernel_eigenvalues(1.0, 1.0, 1.0, 20, n_per_dim=3)
    assert dpp.DEFAULT_TRUNCATION >= 100
