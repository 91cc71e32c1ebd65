"""Samplers against Gaussian targets with known moments, with Monte-Carlo-error-aware z-scores.

For every coordinate j the posterior-mean estimate is compared with the truth through
z = (mean_hat - mu_j) / MCSE, MCSE = sd_j / sqrt(ESS_j) (ArviZ bulk ESS), and the second moment
through the same z-score of the draws of (x_j - mu_j)^2. With a handful of coordinates and fixed
seeds, |z| < 4.5 fails a wrong sampler (a biased variance gives |z| in the tens) but not chance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesx.methods.base import RunInputs
from bayesx.diagnostics.convergence import ess_per_coordinate
from bayesx.kernels import backend, hmc, nuts
from method_helpers import prepared
from bayesx.kernels.integrators import PhaseState, leapfrog, leapfrog_trajectory
from bayesx.kernels.metric import identity_metric, make_metric
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.mcmc.rwm import RWM
from bayesx.targets.gaussian import Gaussian

Z_MAX = 4.5


def moment_z_scores(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-scores of the first and second central moments of every coordinate."""
    sd = np.sqrt(np.diag(cov))
    ess_mean = ess_per_coordinate(draws)
    z_mean = (draws.reshape(-1, draws.shape[-1]).mean(0) - mean) / (sd / np.sqrt(ess_mean))
    sq = (draws - mean) ** 2
    ess_sq = ess_per_coordinate(sq)
    flat = sq.reshape(-1, sq.shape[-1])
    z_var = (flat.mean(0) - np.diag(cov)) / (flat.std(0) / np.sqrt(ess_sq))
    return z_mean, z_var


def run(method, target, seed=1, n_chains=4):
    gen = torch.Generator().manual_seed(seed)
    result = method.sample(target, RunInputs(target.initial_point(n_chains, gen), gen, progress=False))
    return result.draws.numpy(), result


CASES = [
    ("isotropic", dict(dim=5, kind="isotropic")),
    ("correlated", dict(dim=5, kind="correlated", rho=0.9)),
    ("scaled", dict(dim=5, kind="scaled", condition=30.0)),
    ("condition-1e4", dict(dim=5, kind="rotated", condition=100.0)),  # sds 0.01..1 along a random rotation
]
SLOW_ON_PYTORCH = {("condition-1e4", "nuts-diag"), ("condition-1e4", "nuts-diag_grad")}
METHODS = [
    ("hmc-diag", lambda: HMC(num_warmup=400, num_draws=1500, num_steps=7, init="prior")),
    ("nuts-diag", lambda: NUTS(num_warmup=400, num_draws=1000, init="prior")),
    ("nuts-dense", lambda: NUTS(num_warmup=400, num_draws=1000, mass="dense", init="prior")),
    ("nuts-diag_grad", lambda: NUTS(num_warmup=400, num_draws=1000, mass="diag_grad", init="prior")),
    ("nuts-lowrank", lambda: NUTS(num_warmup=400, num_draws=1000, mass="lowrank", mass_rank=3, init="prior")),
    ("nuts-laplace", lambda: NUTS(num_warmup=300, num_draws=1000, mass="dense", init="laplace")),
    ("rwm-dense", lambda: RWM(num_warmup=1000, num_draws=6000, mass="dense", init="prior")),
]


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["native", "pytorch"])
@pytest.mark.parametrize("case,kwargs", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("name,make", METHODS, ids=[m[0] for m in METHODS])
def test_sampler_recovers_gaussian_moments(case, kwargs, name, make, kernels, monkeypatch):
    """Both implementations of every sampler: the Gaussian is a density the native kernels evaluate
    (HMC trajectories and NUTS trees in C), and BAYESX_NATIVE=0 runs the PyTorch reference."""
    if kernels == "pytorch" and (case, name) in SLOW_ON_PYTORCH:
        pytest.skip("a diagonal metric on the rotated Gaussian needs depth-7 trees: over a minute leaf by leaf in "
                    "Python; the native run of the same case and the PyTorch runs of the other metrics cover it")
    monkeypatch.setenv("BAYESX_NATIVE", "1" if kernels == "native" else "0")
    target = Gaussian(**kwargs)
    assert prepared(target).name == kernels
    draws, result = run(make(), target)
    z_mean, z_var = moment_z_scores(draws, target.mean.numpy(), target.cov.numpy())
    assert np.all(np.abs(z_mean) < Z_MAX), (name, case, z_mean)
    assert np.all(np.abs(z_var) < Z_MAX), (name, case, z_var)
    assert result.metrics["n_divergent"] == 0
    assert 0.1 < result.metrics["accept_rate"] <= 1.0


@pytest.mark.parametrize("mass", ["diag", "diag_grad", "lowrank"])
@pytest.mark.parametrize("case,kwargs", CASES, ids=[c[0] for c in CASES])
def test_chees_recovers_gaussian_moments_with_many_chains(case, kwargs, mass):
    from bayesx.methods.mcmc.chees import Chees

    target = Gaussian(**kwargs)
    draws, result = run(Chees(num_warmup=400, num_draws=300, mass=mass, mass_rank=3), target, n_chains=32)
    z_mean, z_var = moment_z_scores(draws, target.mean.numpy(), target.cov.numpy())
    assert np.all(np.abs(z_mean) < Z_MAX) and np.all(np.abs(z_var) < Z_MAX), (case, z_mean, z_var)
    assert result.metrics["n_divergent"] == 0 and 0.4 < result.metrics["accept_rate"] <= 1.0
    assert result.metrics["trajectory_length"] > result.metrics["step_size"]  # T grew from one step


def test_chees_gradient_metrics_learn_the_covariance_they_can_represent():
    """On the rotated Gaussian (condition 1e4) lowrank's metric whitens the posterior: the eigenvalues of
    M Sigma lie within a factor 10 of 1, and T settles near a quarter period of the whitened N(0, I)
    (pi / 2). The diagonal ones cannot (a spread of decades): the control that the check can fail."""
    from bayesx.methods.mcmc.chees import Chees

    target = Gaussian(dim=5, kind="rotated", condition=100.0)
    spread = {}
    for mass in ("diag", "diag_grad", "lowrank"):
        _, result = run(Chees(num_warmup=400, num_draws=20, mass=mass, mass_rank=3), target, n_chains=32)
        inv_mass = result.fitted["inverse_mass"]
        inv_mass = inv_mass if inv_mass.dim() == 2 else torch.diag(inv_mass)
        whiten = torch.linalg.inv(torch.linalg.cholesky(inv_mass))
        eig = torch.linalg.eigvalsh(whiten @ target.cov @ whiten.T)  # those of M Sigma
        spread[mass] = float(eig.max() / eig.min())
        if mass == "lowrank":
            assert 0.1 < float(eig.min()) and float(eig.max()) < 10.0, eig
            assert 0.5 < result.metrics["trajectory_length"] < 5.0, result.metrics
    assert spread["diag"] > 100 and spread["diag_grad"] > 100 and spread["lowrank"] < 20, spread


def test_chees_trajectory_length_follows_the_scale():
    """On N(0, s^2 I) with an identity metric the adapted T grows with s (ChEES's optimum is about
    pi s / 2 for a Gaussian: a quarter period); T at s = 4 is between 2x and 8x T at s = 1."""
    from bayesx.methods.mcmc.chees import Chees

    lengths = {}
    for sd in (1.0, 4.0):
        target = Gaussian(dim=5, cov=tuple(tuple(sd**2 * float(i == j) for j in range(5)) for i in range(5)))
        _, result = run(Chees(num_warmup=400, num_draws=50, mass="identity"), target, n_chains=32)
        lengths[sd] = result.metrics["trajectory_length"]
    assert 2.0 < lengths[4.0] / lengths[1.0] < 8.0, lengths


def test_chees_starts_from_the_given_trajectory_length():
    """init_trajectory_length sets T where warm-up starts: with no warm-up it is the T that samples."""
    from bayesx.methods.mcmc.chees import Chees

    target = Gaussian(dim=3)
    for start in (0.5, 2.0):
        _, result = run(Chees(num_warmup=0, num_draws=20, step_size=0.1, init_trajectory_length=start,
                              init="prior"), target, n_chains=4)
        assert result.metrics["trajectory_length"] == pytest.approx(start)
        assert result.metrics["leapfrog_steps_mean"] <= start / 0.1 + 1  # jittered: u T / eps steps, u <= 1


def test_chees_needs_two_chains():
    from bayesx.errors import BayesxError
    from bayesx.methods.mcmc.chees import Chees

    with pytest.raises(BayesxError, match="n_chains"):
        Chees().check(Gaussian(dim=2), 1)


@pytest.mark.slow
def test_nuts_with_a_wrong_u_turn_rule_is_caught(monkeypatch):
    """Negative control of NUTS's U-turn rule: a new subtree with a U-turn inside must be discarded (no
    draw from it, no merge). Merging it instead breaks detailed balance; on N(0, 1) with a fixed step
    of 1.2 the variance of the draws then comes out about 1.14 (z about 9 when measured), while the
    correct kernel's passes the same check."""
    monkeypatch.setenv("BAYESX_NATIVE", "0")  # the PyTorch tree, which the control patches
    target = Gaussian(dim=1)

    def variance_z(method):
        draws, _ = run(method, target)
        return moment_z_scores(draws, target.mean.numpy(), target.cov.numpy())[1][0]

    fixed = dict(num_warmup=0, num_draws=5000, step_size=1.2, adapt_step_size=False, mass="identity", init="prior")
    assert abs(variance_z(NUTS(**fixed))) < Z_MAX
    correct = nuts._build_subtree

    def merge_turned_subtrees(*args, **kwargs):
        sub = correct(*args, **kwargs)
        return sub._replace(valid=args[4] & ~sub.divergent)  # only divergences discard a subtree now

    monkeypatch.setattr(nuts, "_build_subtree", merge_turned_subtrees)
    assert abs(variance_z(NUTS(**fixed))) > Z_MAX


def test_z_score_check_detects_a_wrong_variance():
    """The moment check is not vacuous: draws with a 15% too large sd fail it."""
    target = Gaussian(dim=5, kind="correlated", rho=0.9)
    draws, _ = run(NUTS(num_warmup=300, num_draws=1000, mass="dense", init="prior"), target)
    _, z_var = moment_z_scores(draws * 1.15, target.mean.numpy(), target.cov.numpy())
    assert np.max(np.abs(z_var)) > Z_MAX


def gaussian_draws_and_gradients(cov: torch.Tensor, n: int = 400, chains: int = 4, seed: int = 0):
    """Exact draws of N(0, cov) as (chains, n, dim) and their gradients -cov^-1 q."""
    g = torch.Generator().manual_seed(seed)
    chol = torch.linalg.cholesky(cov)
    q = torch.randn(chains, n, cov.shape[0], generator=g, dtype=torch.float64) @ chol.T
    return q, -q @ torch.linalg.inv(cov)


def test_diag_grad_metric_is_the_variance_for_independent_coordinates():
    """sqrt(var q / var grad) = sigma^2 for N(0, diag sigma^2), already from a short window (400 x 4
    draws: within 10%); the draws-only estimate on the same draws is no closer."""
    from bayesx.adaptation.window import gradient_scaled_variance

    sd = torch.logspace(-2, 1, 6, dtype=torch.float64)
    q, grad = gaussian_draws_and_gradients(torch.diag(sd**2))
    estimate = gradient_scaled_variance(q, grad)
    assert torch.allclose(estimate, sd**2, rtol=0.1)
    # a gradient off by a factor 2 in one coordinate (a wrong density) shows up
    wrong = grad.clone()
    wrong[..., 0] *= 2.0
    assert not torch.allclose(gradient_scaled_variance(q, wrong), sd**2, rtol=0.1)


def test_lowrank_metric_recovers_a_few_strong_correlations():
    """A 40-d Gaussian, diagonal scales 0.1-10 times I + two directions with variance 50 and 0.02: the
    spread of the eigenvalues of S^-1 M^-1 (1 is a perfect metric) falls from about 1000 with
    diag_grad's diagonal (or even the true diagonal) to under 8 with the rank-4 correction (measured
    5.8; eigenvalues within [1/2, 2] are left alone by design)."""
    from bayesx.adaptation.window import gradient_scaled_variance, low_rank_inverse_mass

    dim = 40
    g = torch.Generator().manual_seed(3)
    basis, _ = torch.linalg.qr(torch.randn(dim, 2, generator=g, dtype=torch.float64))
    core = torch.eye(dim, dtype=torch.float64) + basis @ torch.diag(torch.tensor([49.0, -0.98], dtype=torch.float64)) @ basis.T
    scales = torch.logspace(-1, 1, dim, dtype=torch.float64)
    cov = scales[:, None] * core * scales[None, :]
    q, grad = gaussian_draws_and_gradients(cov, n=300)

    def spread(inv_mass):
        whitened = torch.linalg.eigvals(torch.linalg.solve(cov, inv_mass)).real
        return float(whitened.max() / whitened.min())
    assert spread(low_rank_inverse_mass(q, grad, rank=4)) < 8.0
    assert spread(torch.diag(gradient_scaled_variance(q, grad))) > 500.0


def test_gradient_metrics_need_a_gradient_sampler_and_a_rank_that_fits():
    from bayesx.settings import InvalidSetting

    target = Gaussian(dim=3, kind="isotropic")
    with pytest.raises(InvalidSetting, match="mass"):
        RWM(mass="diag_grad").check(target, 4)
    NUTS(mass="lowrank", mass_rank=5).check(target, 4)  # at most dim directions: the default 10 on a 3-d posterior
    from bayesx.adaptation.window import low_rank_inverse_mass

    g = torch.Generator().manual_seed(0)
    draws = torch.randn(4, 200, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.2],
                                                                                     dtype=torch.float64)
    inv_mass = low_rank_inverse_mass(draws, -draws / torch.tensor([1.0, 9.0, 0.04], dtype=torch.float64), rank=10)
    assert inv_mass.shape == (3, 3) and int(torch.linalg.cholesky_ex(inv_mass)[1]) == 0
    torch.testing.assert_close(inv_mass.diagonal(), torch.tensor([1.0, 9.0, 0.04], dtype=torch.float64), rtol=0.2,
                               atol=0)


def test_hmc_with_wrong_acceptance_is_caught():
    """Accepting every proposal (no Metropolis correction) biases the variance; the test sees it."""
    target = Gaussian(dim=5, kind="isotropic")
    gen = torch.Generator().manual_seed(3)
    metric = identity_metric(5, False, torch.float64, torch.device("cpu"))
    density = prepared(target)
    state = hmc.init(target.initial_point(4, gen), density)
    draws = []
    for _ in range(3000):
        p0 = torch.randn(4, 5, generator=gen, dtype=torch.float64)
        end, _, _ = leapfrog_trajectory(PhaseState(state.position, p0, state.log_prob, state.grad), 1.5, 3, metric, density)
        state = hmc.HMCState(end.position, end.log_prob, end.grad)  # always accept: wrong
        draws.append(state.position.numpy())
    draws = np.stack(draws, 1)[:, 500:]
    _, z_var = moment_z_scores(draws, np.zeros(5), np.eye(5))
    assert np.max(np.abs(z_var)) > Z_MAX


def test_same_seed_same_draws_and_different_seed_differs():
    target = Gaussian(dim=3, kind="correlated")
    a, _ = run(NUTS(num_warmup=50, num_draws=50), target, seed=7)
    b, _ = run(NUTS(num_warmup=50, num_draws=50), target, seed=7)
    c, _ = run(NUTS(num_warmup=50, num_draws=50), target, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_leapfrog_is_reversible_and_conserves_energy():
    target = Gaussian(dim=4, kind="correlated", rho=0.5)
    metric = make_metric(torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    p = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    lp, g = target.log_prob_and_grad(q)
    start = PhaseState(q, p, lp, g)
    density = prepared(target)
    fused, h_start, h_end = leapfrog_trajectory(start, 0.05, 20, metric, density)
    stepped = start
    for _ in range(20):
        stepped = leapfrog(stepped, 0.05, metric, density)
    torch.testing.assert_close(fused.position, stepped.position)
    back, _, _ = leapfrog_trajectory(PhaseState(fused.position, -fused.momentum, fused.log_prob, fused.grad), 0.05, 20,
                                     metric, density)
    torch.testing.assert_close(back.position, q)
    torch.testing.assert_close(-back.momentum, p)
    h = lambda s: -s.log_prob + 0.5 * (s.momentum**2 * metric.inv_mass).sum(-1)  # noqa: E731
    torch.testing.assert_close(h_start, h(start))
    torch.testing.assert_close(h_end, h(fused))
    assert torch.max(torch.abs(h(fused) - h(start))) < 1e-2


def test_nuts_tree_depth_limit_and_accounting():
    """With a tiny step the trajectory cannot turn: every chain hits max_tree_depth, 2^d - 1 steps."""
    target = Gaussian(dim=3, kind="isotropic")
    gen = torch.Generator().manual_seed(0)
    density = prepared(target)
    state = nuts.init(target.initial_point(3, gen), density)
    params = nuts.NUTSParams(1e-4, identity_metric(3, False, torch.float64, torch.device("cpu")), 4)
    _, info = nuts.step(state, density, params, gen)
    assert info.tree_depth.tolist() == [4, 4, 4]
    assert info.n_grad_evals.tolist() == [15, 15, 15]
    assert torch.all(info.accept_prob > 0.99)


def test_nuts_flags_divergence_on_a_huge_step():
    target = Gaussian(dim=3, kind="scaled", condition=1000.0)
    gen = torch.Generator().manual_seed(0)
    density = prepared(target)
    state = nuts.init(target.initial_point(4, gen), density)
    params = nuts.NUTSParams(5.0, identity_metric(3, False, torch.float64, torch.device("cpu")), 6)
    new, info = nuts.step(state, density, params, gen)
    assert bool(info.divergent.all())
    assert torch.all(torch.isfinite(new.position))


def test_mass_auto_is_dense_on_small_targets_and_diagonal_on_large_ones():
    """NUTS's default metric: dense up to DENSE_UP_TO coordinates, gradient-based diagonal above, and the
    resolved form is recorded as the run's tag; a sampler without gradients gets Stan's diagonal."""
    from bayesx.methods.mcmc.sampler import DENSE_UP_TO

    nuts = NUTS(mass="auto", num_warmup=60, num_draws=20)
    assert nuts.mass_form(DENSE_UP_TO) == "dense" and nuts.mass_form(DENSE_UP_TO + 1) == "diag_grad"
    assert RWM(mass="auto").mass_form(DENSE_UP_TO + 1) == "diag"
    assert NUTS(mass="diag").mass_form(3) == "diag"
    target = Gaussian(dim=3, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    result = nuts.infer(target, RunInputs(target.initial_point(2, g), g, progress=False))
    assert result.tags["mass"] == "dense" and result.fitted["inverse_mass"].shape == (3, 3)


def test_health_warnings_show_the_digits_that_made_them_fire():
    """R-hat 1.014 is above 1.01: the warning says 1.014, not "1.01 > 1.01"; k-hat likewise."""
    from bayesx.diagnostics.convergence import shown_against
    from bayesx.methods.vi.gaussian import GaussianVI

    assert shown_against(1.014, 1.01) == "1.014" and shown_against(1.97, 1.01) == "1.97"
    assert shown_against(0.7004, 0.7) == "0.7004"
    assert NUTS().warnings({"rhat_max": 1.014})[0].startswith("rhat_max = 1.014 > 1.01:")
    assert GaussianVI().warnings({"psis_khat": 0.703})[0].startswith("psis_khat = 0.703 > 0.7:")
    assert NUTS().warnings({"rhat_max": 1.009}) == []  # negative control: below the limit, no warning


def test_a_funnels_neck_is_no_mode_and_the_chains_start_from_the_initial_points():
    """The centred eight schools: log pi grows like -7 log tau as tau -> 0 with the thetas equal, so the Laplace
    start's mode search ends in the funnel's neck, where the Hessian is singular (condition number about 3e16);
    no Gaussian there is a start, so the chains start from the initial points with a unit metric, as init=prior,
    and the run says why in a warning. Control: the non-centred eight schools' mode gives no such warning."""
    from bayesx.targets.posteriordb.target import PosteriorDB

    g = torch.Generator().manual_seed(0)
    for name, expect_warning in (("eight_schools_centered", True), ("eight_schools_noncentered", False)):
        target = PosteriorDB(name=name)
        result = NUTS(num_warmup=5, num_draws=5, init="laplace").infer(
            target, RunInputs(target.initial_point(4, g), g, progress=False))
        assert result.draws.shape == (4, 5, 10) and result.error is None
        warned = [w for w in result.warnings if "ended in a funnel's neck or at the edge" in w]
        assert bool(warned) == expect_warning, result.warnings
        if expect_warning:
            assert "funnel's neck" in warned[0] and "started from the initial points instead" in warned[0]
            assert result.tags["init"] == "prior (no mode)"


def test_a_mode_at_the_edge_of_the_support_starts_from_the_initial_points():
    """A density that keeps rising towards a cliff at q_0 = 5: the Laplace start's mode search steps back from the
    cliff (optimize.CLIFF) and ends at the edge, where a small Gaussian has half its mass outside the support
    (optimize.in_a_neck): the chains start from the initial points, with a warning that says why."""
    from bayesx.targets.base import TargetBase

    class CutOff(TargetBase):
        dim, dtype, device = 2, torch.float64, torch.device("cpu")

        def log_prob(self, q):
            lp = 1e-3 * q[..., 0] - 0.5 * q[..., 1] ** 2
            return torch.where(q[..., 0] < 5.0, lp, torch.full_like(lp, -float("inf")))

    target, g = CutOff(), torch.Generator().manual_seed(0)
    result = NUTS(num_warmup=5, num_draws=5, init="laplace").infer(target, RunInputs(target.initial_point(16, g), g,
                                                                                      progress=False))
    assert result.draws.shape == (16, 5, 2) and result.tags["init"] == "prior (no mode)"
    assert any("at the edge of the support" in w and "initial points instead" in w for w in result.warnings)


def test_rounds_of_the_mode_search_go_on_until_one_rises_by_less_than_a_nat(monkeypatch):
    """bayesx.methods.common.optimize.climb: torch's L-BFGS can stop short of the mode (arma11: after 30 gradients, 291 nats below
    it), so the search goes on in rounds until one rises by less than RUNAWAY; four rounds that all rise ran away.
    From a Gaussian's mode one more round rises by nothing (further_rise, unpatched)."""
    from bayesx.methods.common import optimize
    from bayesx.targets.base import TargetBase

    class Gaussian(TargetBase):
        dim, dtype, device = 2, torch.float64, torch.device("cpu")

        def log_prob(self, q):
            return -0.5 * (q ** 2).sum(-1)

    _, rise, _ = optimize.further_rise(backend.on_pytorch(Gaussian()), torch.zeros(1, 2, dtype=torch.float64), 100)
    assert abs(rise) < 1e-9
    start = torch.zeros(1, 2, dtype=torch.float64)
    for rises, ran_away, rounds in (([291.0, 0.2], False, 2), ([5.0] * 4, True, 4), ([float("inf")], True, 1),
                                    ([-float("inf")], False, 1)):
        sequence = iter(rises)
        monkeypatch.setattr(optimize, "further_rise", lambda density, point, max_iter: (point + 1, next(sequence), 10))
        climbed = optimize.climb(backend.on_pytorch(Gaussian()), start, 100)
        assert (climbed.ran_away, climbed.calls) == (ran_away, 10 * rounds)
        assert (climbed.point is start) == (rises[0] == -float("inf"))
