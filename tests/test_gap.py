"""GAP (Chen (2019) ch. 2) against known answers.

- The orthonormalization: the thesis' determinant-and-minor formula for <w_j, sqrt p> (Algorithms
  2.2, 2.3) equals the triangular solve GAP uses.
- The closed-form Gram matrix of the tangent vectors equals its Monte Carlo definition E[s s^T];
  dropping the second Isserlis term (the negative control) does not.
- On a Gaussian target (in the family) GAP recovers mean and covariance; on t(1) from the thesis'
  start and step sizes it reaches the exact Hellinger-optimal Gaussian N(0, 3.771) (quadrature),
  which the thesis reports as N(0.0005, 3.7468).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import assert_rejected, isolated_store, run_ok

from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.vi import gap
from bayesx.methods.vi.gap import GAP
from bayesx.settings import InvalidSetting
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.toy import Density


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_minors_formula_equals_the_triangular_solve():
    g = gen(0)
    x = torch.randn(6, 6, generator=g, dtype=torch.float64)
    gram = x @ x.T + 0.5 * torch.eye(6, dtype=torch.float64)
    a = torch.randn(6, generator=g, dtype=torch.float64)
    fast, noise = gap.orthonormal_coordinates(gram, a[None, :])  # one 'draw': the terms' mean is a
    thesis = []
    for j in range(1, 7):
        sub = gram[:j, :j].numpy()
        d_j, d_prev = np.linalg.det(sub), (np.linalg.det(gram[: j - 1, : j - 1].numpy()) if j > 1 else 1.0)
        total = 0.0
        for i in range(1, j + 1):  # M_ji: the minor of A_j without row j and column i
            minor = np.delete(np.delete(sub, j - 1, axis=0), i - 1, axis=1)
            total += (-1) ** (j + i) * (np.linalg.det(minor) if minor.size else 1.0) * float(a[i - 1])
        thesis.append(total / math.sqrt(d_prev * d_j))
    assert np.allclose(fast.numpy(), thesis, atol=1e-10)


@pytest.mark.parametrize("family", ["fullrank", "meanfield"])
def test_closed_form_gram_equals_its_monte_carlo_definition(family):
    g = gen(1)
    dim = 3
    mean = torch.randn(dim, generator=g, dtype=torch.float64)
    chol = torch.tril(torch.randn(dim, dim, generator=g, dtype=torch.float64)) + 2 * torch.eye(dim, dtype=torch.float64)
    if family == "meanfield":
        chol = torch.diag(chol.diagonal())
    rows, cols = gap.lower_indices(dim, family)
    n = 400000
    z = mean + torch.randn(n, dim, generator=g, dtype=torch.float64) @ chol.T
    m = gap.inverse_transpose(chol)
    s_mu, s_l = gap.scores(z, mean, chol, m, rows, cols)
    g_mu, g_l = gap.gram_blocks(m, rows, cols)
    mc_mu, mc_l = s_mu.T @ s_mu / n, s_l.T @ s_l / n
    assert torch.allclose(g_mu, mc_mu, atol=0.02 * float(g_mu.abs().max()))
    assert torch.allclose(g_l, mc_l, atol=0.03 * float(g_l.abs().max()))
    assert float((s_mu.T @ s_l / n).abs().max()) < 0.02 * float(g_l.abs().max())  # G_mu,L = 0
    mmt = (lambda m: m @ m.T)(torch.linalg.inv(chol).T)
    first_term_only = 0.25 * mmt[rows][:, rows] * (cols[:, None] == cols[None, :])
    assert not torch.allclose(first_term_only, mc_l, atol=0.03 * float(g_l.abs().max()))


def test_recovers_a_gaussian_target():
    target = Gaussian(dim=3, kind="correlated", rho=0.6, mean=[1.0, -1.0, 0.5])
    # the climb from the initial points (frame=none): with the Gaussian VI frame GAP starts at the answer, distance 0
    method = GAP(num_steps=1000, eps_mu=0.3, eps_l=0.3, n_mc=2000, frame="none")
    g = gen(1)
    result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
    chol = result.fitted["q_scale"]
    assert torch.allclose(result.fitted["q_mean"], target.mean, atol=0.05)
    assert torch.allclose(chol @ chol.T, target.cov, atol=0.06)
    distances = [d for _, d in result.traces["distance"]]
    assert np.median(distances[-200:]) < 0.5 * distances[0]


def exact_hellinger_variance() -> float:
    """argmax over s2 of int sqrt(t1(x) N(x; 0, s2)) dx, by quadrature and golden-section search."""
    x = np.linspace(-3000, 3000, 3000001)
    h = x[1] - x[0]
    p = 1.0 / (np.pi * (1 + x**2))

    def overlap(s2):
        return np.sum(np.sqrt(p * np.exp(-x**2 / (2 * s2)) / np.sqrt(2 * np.pi * s2))) * h

    lo, hi = 1.0, 10.0
    for _ in range(60):
        m1, m2 = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (m1, hi) if overlap(m1) < overlap(m2) else (lo, m2)
    return 0.5 * (lo + hi)


@pytest.mark.slow  # a statistical test of several seconds: with the slow suite (CI runs both)
def test_t1_reaches_the_hellinger_optimum():
    exact = exact_hellinger_variance()
    assert exact == pytest.approx(3.771, abs=0.005)
    method = GAP(init_mean=[10.0], init_sd=5.0, eps_mu=0.1, eps_l=5.0, num_steps=1000, n_mc=10000,
                 frame="none")  # the thesis' start and settings, without issue 34's Gaussian VI frame
    g = gen(0)
    result = method.infer(Density(name="t1"), RunInputs(None, g, progress=False))
    assert abs(float(result.fitted["q_mean"][0])) < 0.05
    assert float(result.fitted["q_scale"][0, 0]) ** 2 == pytest.approx(exact, rel=0.08)


@pytest.mark.slow  # eight fits of about 1.5 s
def test_t1_with_the_defaults_reaches_the_optimum_within_three_percent_on_every_seed():
    """Issue 34: method=gap model=density model.name=t1 with its defaults, seeds 0-3, each fitted variance within
    3% of the Hellinger optimum. Negative control: the thesis' estimator and constant steps (draws from q, this
    iteration's cosine, no decay, no Gaussian VI frame) miss by more on some seed."""
    exact = 3.771

    def variances(**options) -> list[float]:
        fits = []
        for seed in range(4):
            method, g = GAP(**options), gen(seed)
            target = Density(name="t1")
            result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
            fits.append(float(result.fitted["q_scale"][0, 0]) ** 2)
        return fits

    fits = variances()
    assert all(abs(v / exact - 1.0) < 0.03 for v in fits), fits
    thesis = variances(draws_from="q", cosine_smoothing=0.0, step_decay=None, frame="none")
    assert max(abs(v / exact - 1.0) for v in thesis) > 0.03, thesis


def test_james_stein_keeps_a_large_signal_and_removes_pure_noise():
    big = torch.tensor([3.0, -4.0, 0.0, 0.0])  # |c|^2 = 25 against a summed variance of 1: kept but for 1/50
    torch.testing.assert_close(gap.james_stein(big, 1.0), big * (1.0 - 0.5 / 25.0))
    assert float(gap.james_stein(torch.full((10,), 0.1), 1.0).abs().max()) == 0.0  # |c|^2 = 0.1 < noise: no step
    one = torch.tensor([0.1])
    assert gap.james_stein(one, 1.0) is one  # k <= 2 (t(1), the mixtures): the thesis' step


@pytest.mark.slow  # four fits of about 7 s
def test_the_shrunk_step_stays_at_the_optimum_in_26_dimensions():
    """A 26-d correlated Gaussian (351 scale coordinates), started at its optimum by the Gaussian VI frame: with the
    James-Stein step (the default) GAP stays within 0.2 sds of the exact answer; the thesis' unshrunk step
    (the negative control) lets the Monte Carlo noise of c, divided by sqrt(1 - c_0^2) near the optimum, carry
    the scales off (on posteriordb's diamonds, 26-d, it ended 2-3 reference sds off or broke its Gram block)."""
    target = Gaussian(dim=26, kind="correlated")
    sd = target.cov.diagonal().sqrt()

    def sd_error(shrink: str, seed: int) -> float:
        method, g = GAP(num_steps=300, n_mc=1000, shrink=shrink), gen(seed)  # the draws of the earlier default
        result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
        assert result.error is None, result.error
        return float(((result.draws[0].std(0) - sd).abs() / sd).max())

    for seed in (0, 1):
        assert sd_error("james_stein", seed) < 0.2
        assert sd_error("none", seed) > 1.0


def test_a_basis_too_large_is_refused_before_the_run():
    with pytest.raises(InvalidSetting, match="family=fullrank needs a tangent basis of 15 covariance directions"):
        GAP(max_basis=10, family="fullrank").check(Gaussian(dim=5), 4)
    GAP(max_basis=10, family="meanfield").check(Gaussian(dim=5), 4)
    assert GAP(max_basis=10).family_for(Gaussian(dim=5)) == "meanfield"  # auto
    assert GAP(max_basis=15).family_for(Gaussian(dim=5)) == "fullrank"
    with pytest.raises(BayesxError, match=r"^method\.eps_l must be a number > 0"):
        GAP(eps_l=0.0)


def test_cli_records_a_gap_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "gap") as (_, uri):
        run = run_ok(uri, ["run", "method=gap", "model=density", "model.name=bimodal", "method.num_steps=200",
                           "method.n_mc=500", "method.eps_l=1.0", "progress=false", "plots.n_coords=0"])
    metrics = run.data.metrics
    assert run.data.tags["q_family"] == "fullrank" and run.data.tags["gap_normalizer"] == "exact"  # auto, dim 1
    assert math.isfinite(metrics["distance_final"]) and "log_evidence_err" in metrics


def test_cli_refuses_a_full_rank_basis_too_large(tmp_path_factory):
    with isolated_store(tmp_path_factory, "gap_big") as (_, uri):
        line = assert_rejected(["run", "method=gap", "method.family=fullrank", "data=digits", "progress=false"], uri,
                               "method.family=fullrank",
                               "2080", "method.family=meanfield")
    assert "\n" not in line
