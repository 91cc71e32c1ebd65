"""MAMS (bayesx.kernels.mams, bayesx.adaptation.mams, method=mams) against exact answers.

- the velocity update: |u| = 1, and the closed form equals a fine Runge-Kutta solution of the isokinetic ODE
  du/dt = (g - (u.g) u) / (d - 1), dK/dt = u.g for a constant gradient;
- the integrators: reversible (forward, flip u, forward again: back at the start, kinetic changes cancel), and
  second order (the energy error of a trajectory of fixed length falls as eps^2; a first-order splitting, the
  control, falls as eps);
- the sampler: means and variances of ill-conditioned Gaussians (2-d, 100-d) within Monte Carlo error
  (z-scores against ArviZ's MCSE, as tests/test_kernels.py), and on a skewed non-Gaussian target (independent
  log-Gamma coordinates) the kernel agrees while two broken kernels, the same trajectories with the kinetic
  change dropped from W and without the Metropolis step, are biased far beyond Monte Carlo error;
- the command line: ``bayesx run method=mams model=logreg`` finishes with R-hat <= 1.01 and the family's
  metrics.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import polygamma, psi

from bayesx.diagnostics.convergence import ess_per_coordinate
from bayesx.kernels import mams
from bayesx.kernels.common import metropolis_accept
from bayesx.kernels.metric import make_metric
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.mams import MAMS
from bayesx.targets.gaussian import Gaussian
from method_helpers import prepared

Z_MAX = 4.5


@pytest.fixture(autouse=True)
def one_thread():
    """These problems are tiny; with two threads on two busy cores torch's thread pool wakes up slower than the
    work takes (measured 25x)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def moment_z_scores(draws: np.ndarray, mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-scores of the mean and the variance of every coordinate of draws (chains, n, dim), each against
    its MCSE: sd / sqrt(ESS) of the draws, and of (x - mean)^2 (ArviZ bulk ESS)."""
    flat = draws.reshape(-1, draws.shape[-1])
    z_mean = (flat.mean(0) - mean) / (np.sqrt(var) / np.sqrt(ess_per_coordinate(draws)))
    sq = (draws - mean) ** 2
    flat_sq = sq.reshape(-1, sq.shape[-1])
    z_var = (flat_sq.mean(0) - var) / (flat_sq.std(0) / np.sqrt(ess_per_coordinate(sq)))
    return z_mean, z_var


def typical_points(target: Gaussian, n: int, gen: torch.Generator) -> torch.Tensor:
    chol = torch.linalg.cholesky(target.cov)
    return target.mean + torch.randn(n, target.dim, generator=gen, dtype=torch.float64) @ chol.T


# --- the velocity update and the integrators ----------------------------------------------------------------
def isokinetic_ode(u: torch.Tensor, g: torch.Tensor, time: float, steps: int = 4000):
    """Classical RK4 on (u, K): du/dt = (g - (u.g) u) / (d - 1), dK/dt = u.g (rows)."""
    d = u.shape[-1]

    def rate(v):
        dot = (v * g).sum(-1, keepdim=True)
        return (g - dot * v) / (d - 1), dot.squeeze(-1)

    h, k = time / steps, torch.zeros(u.shape[0], dtype=u.dtype)
    for _ in range(steps):
        a, ka = rate(u)
        b, kb = rate(u + 0.5 * h * a)
        c, kc = rate(u + 0.5 * h * b)
        e, ke = rate(u + h * c)
        u = u + h / 6 * (a + 2 * b + 2 * c + e)
        k = k + h / 6 * (ka + 2 * kb + 2 * kc + ke)
    return u, k


@pytest.mark.parametrize("time", [0.01, 0.5, 3.0])
def test_velocity_update_keeps_unit_length_and_solves_the_isokinetic_ode(time):
    gen = torch.Generator().manual_seed(0)
    d = 7
    u = mams.unit_velocity((5, d), torch.float64, "cpu", gen)
    g = 3.0 * torch.randn(5, d, generator=gen, dtype=torch.float64)
    u_new, change = mams.velocity_update(u, g, time)
    assert torch.allclose(torch.linalg.vector_norm(u_new, dim=-1), torch.ones(5, dtype=torch.float64), atol=1e-13)
    u_ode, k_ode = isokinetic_ode(u, g, time)
    assert torch.allclose(u_new, u_ode, atol=1e-9), (u_new - u_ode).abs().max()
    assert torch.allclose(change, k_ode, atol=1e-8), (change - k_ode).abs().max()
    assert (change - k_ode).abs().max() < 1e-3 * k_ode.abs().max()  # and the change is not trivially 0
    # zero gradient: nothing moves
    same, none = mams.velocity_update(u, torch.zeros_like(g), time)
    assert torch.allclose(same, u) and torch.all(none.abs() < 1e-14)


@pytest.mark.parametrize("integrator", ["leapfrog", "mclachlan"])
def test_trajectory_reversed_by_a_velocity_flip_returns_to_its_start(integrator):
    target = Gaussian(dim=6, kind="rotated", condition=10.0)
    gen = torch.Generator().manual_seed(1)
    x = typical_points(target, 4, gen)
    metric = make_metric(torch.linspace(0.2, 1.5, 6, dtype=torch.float64))  # a diagonal preconditioner
    density = prepared(target, x)
    start = mams.init(x, density)
    u = mams.unit_velocity(x.shape, x.dtype, "cpu", gen)
    end = mams.integrate(start, u, 0.05, 25, metric, integrator, density)
    assert (end.position - x).abs().max() > 0.1  # it went somewhere
    back = mams.integrate(mams.MAMSState(end.position, end.log_prob, end.grad), -end.velocity, 0.05, 25, metric,
                          integrator, density)
    assert torch.allclose(back.position, x, atol=1e-10)
    assert torch.allclose(back.velocity, -u, atol=1e-10)
    assert torch.allclose(back.kinetic_change, -end.kinetic_change, atol=1e-10)
    w_forward = mams.energy_change(start, end)
    w_back = mams.energy_change(mams.MAMSState(end.position, end.log_prob, end.grad), back)
    assert torch.allclose(w_back, -w_forward, atol=1e-10)  # detailed balance: exp(-W) and exp(+W)


def energy_errors(integrator: str, steps_per_unit: list[int]) -> list[float]:
    target = Gaussian(dim=10, kind="rotated", condition=5.0)
    gen = torch.Generator().manual_seed(2)
    x = typical_points(target, 8, gen)
    density = prepared(target, x)
    start = mams.init(x, density)
    u = mams.unit_velocity(x.shape, x.dtype, "cpu", gen)
    metric = make_metric(torch.ones(10, dtype=torch.float64))
    out = []
    for n in steps_per_unit:  # trajectory time 1: n steps of 1 / n
        end = mams.integrate(start, u, 1.0 / n, n, metric, integrator, density)
        out.append(float(mams.energy_change(start, end).abs().mean()))
    return out


@pytest.mark.parametrize("integrator", ["leapfrog", "mclachlan"])
def test_energy_error_falls_as_the_step_size_squared(integrator, monkeypatch):
    errors = energy_errors(integrator, [20, 40, 80, 160])
    orders = [math.log2(a / b) for a, b in zip(errors, errors[1:])]
    assert all(1.8 < p < 2.2 for p in orders), (errors, orders)
    # control: a first-order splitting V(eps) X(eps) (not symmetric) falls as eps, and the test tells it apart
    monkeypatch.setitem(mams.INTEGRATORS, "euler", ((1.0, 1.0),))
    monkeypatch.setitem(mams.FINAL, "euler", 0.0)
    errors = energy_errors("euler", [20, 40, 80, 160])
    orders = [math.log2(a / b) for a, b in zip(errors, errors[1:])]
    assert all(0.8 < p < 1.2 for p in orders), (errors, orders)


def test_jittered_length_has_the_asked_mean():
    for mean in (1.0, 1.7, 5.0, 12.3):
        s = mams.rescale(mean)
        jitters = (np.arange(200_000) + 0.5) / 200_000
        n = np.ceil(jitters * s)
        assert abs(n.mean() - mean) < 1e-3 and n.min() >= 1


# --- the sampler on Gaussians -----------------------------------------------------------------------------
GAUSSIANS = [
    ("2d-rotated-identity", dict(dim=2, kind="rotated", condition=5.0), "identity", 400),  # condition 25: no metric
    ("2d-rotated-dense", dict(dim=2, kind="rotated", condition=30.0), "dense", 800),  # 900
    ("100d-scaled-diag", dict(dim=100, kind="scaled", condition=30.0), "diag", 800),  # variances over [1e-3, 1]
]


@pytest.mark.parametrize("name,kwargs,mass,num_draws", GAUSSIANS, ids=[g[0] for g in GAUSSIANS])
def test_mams_recovers_ill_conditioned_gaussian_moments(name, kwargs, mass, num_draws):
    """Without a metric (identity) the steps shrink with the smallest scale: a milder 2-d case, fewer draws."""
    target = Gaussian(**kwargs)
    gen = torch.Generator().manual_seed(3)
    method = MAMS(num_warmup=num_draws // 2, num_draws=num_draws, mass=mass, init="prior")
    out = method.sample(target, RunInputs(target.initial_point(4, gen), gen, progress=False))
    draws = out.draws.numpy()
    z_mean, z_var = moment_z_scores(draws, target.mean.numpy(), np.diag(target.cov.numpy()))
    assert np.all(np.abs(z_mean) < Z_MAX) and np.all(np.abs(z_var) < Z_MAX), (name, z_mean, z_var)
    assert out.metrics["n_divergent"] == 0 and 0.5 < out.metrics["accept_rate"] <= 1.0
    assert out.metrics["trajectory_length"] > 0 and out.metrics["integration_steps_mean"] >= 1
    assert out.metrics["n_grad_evals"] >= 2 * num_draws * 4  # McLachlan: two gradients a step, at least a step a draw


# --- a non-Gaussian target, with broken kernels as controls -------------------------------------------------
class LogGamma:
    """Independent coordinates x_i = log G_i, G_i ~ Gamma(a_i, 1): log p = sum a_i x_i - e^{x_i}, skewed, with
    E x_i = digamma(a_i) and Var x_i = trigamma(a_i)."""

    def __init__(self, shapes):
        self.shapes = torch.tensor(shapes, dtype=torch.float64)
        self.dim, self.dtype, self.device = len(shapes), torch.float64, torch.device("cpu")
        self.mean = psi(np.array(shapes))
        self.var = polygamma(1, np.array(shapes))

    def density_form(self):
        return None

    def autograd_log_prob(self):
        return None

    def log_prob(self, x):
        return (self.shapes * x - x.exp()).sum(-1)

    def log_prob_and_grad(self, x):
        return self.log_prob(x), self.shapes - x.exp()


def run_kernel(target, decide, chains=64, iterations=900, burn=100, step_size=1.8, length=2.5):
    """Chains of MAMS transitions with fixed eps and L (identity metric) where ``decide(start, end, gen)``
    gives the accepted rows; draws after ``burn`` (chains, n, dim)."""
    gen = torch.Generator().manual_seed(4)
    x = torch.tensor(target.mean, dtype=torch.float64).repeat(chains, 1)
    x = x + 0.3 * torch.randn(x.shape, generator=gen, dtype=torch.float64)
    density = prepared(target, x)
    state = mams.init(x, density)
    params = mams.MAMSParams(step_size, make_metric(torch.ones(target.dim, dtype=torch.float64)), length)
    kept, accepted = [], []
    for it in range(iterations):
        end, _ = mams.propose(state, density, params, gen)
        ok = decide(state, end, gen)
        accepted.append(float(ok.double().mean()))
        state = mams.MAMSState(torch.where(ok[:, None], end.position, state.position),
                               torch.where(ok, end.log_prob, state.log_prob),
                               torch.where(ok[:, None], end.grad, state.grad))
        if it >= burn:
            kept.append(state.position)
    return torch.stack(kept, 1).numpy(), float(np.mean(accepted))


def adjusted(start, end, gen):  # the kernel's own decision
    return metropolis_accept(-mams.energy_change(start, end), gen)[1]


def kinetic_dropped(start, end, gen):  # W without Delta K: Metropolis on the density alone
    return metropolis_accept(end.log_prob - start.log_prob, gen)[1]


def unadjusted(start, end, gen):  # microcanonical dynamics without the Metropolis step
    return torch.ones(start.position.shape[0], dtype=torch.bool)


def test_mams_is_exact_on_a_skewed_target_where_broken_kernels_are_biased():
    target = LogGamma([0.7, 1.5, 3.0, 8.0])
    draws, rate = run_kernel(target, adjusted)
    z_mean, z_var = moment_z_scores(draws, target.mean, target.var)
    assert np.all(np.abs(z_mean) < Z_MAX) and np.all(np.abs(z_var) < Z_MAX), (z_mean, z_var)
    assert 0.5 < rate < 0.9  # the step is large enough that the correction matters
    for broken in (kinetic_dropped, unadjusted):
        draws, _ = run_kernel(target, broken)
        z_mean, z_var = moment_z_scores(draws, target.mean, target.var)
        worst = max(np.abs(z_mean).max(), np.abs(z_var).max())
        assert worst > 2 * Z_MAX, (broken.__name__, z_mean, z_var)


def test_mams_needs_two_coordinates():
    from bayesx.errors import BayesxError

    with pytest.raises(BayesxError, match="d >= 2"):
        MAMS().check(Gaussian(dim=1), 4)


# --- the command line -----------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_mams_on_logistic_regression_finishes_with_converged_chains(tmp_path_factory):
    from cli_helpers import isolated_store, run_ok

    with isolated_store(tmp_path_factory, "mams", data_dir=False) as (root, uri):
        run = run_ok(uri, ["run", "method=mams", "model=logreg", "data=digits", "device.num_threads=1",
                           "method.num_warmup=300", "method.num_draws=500", "method.max_draws=3000",
                           "run_name=cli-mams"])
    metrics, tags = run.data.metrics, run.data.tags
    assert tags["method"] == "mams"
    assert metrics["rhat_max"] <= 1.01
    for name in ("ess_bulk_min", "accept_rate", "n_grad_evals", "step_size", "trajectory_length",
                 "integration_steps_mean", "ess_bulk_min_per_grad", "test_accuracy"):
        assert name in metrics and math.isfinite(metrics[name]), name
    assert 0.5 < metrics["accept_rate"] <= 1.0 and metrics["n_divergent"] == 0
