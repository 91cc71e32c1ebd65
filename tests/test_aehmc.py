"""AE-HMC: the auto-encoders, the latent Hamiltonian against autograd and brute-force Jacobians,
reversibility, and exactness when the auto-encoder is invertible (latent_dim = D)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesx.kernels import backend
from bayesx.methods.base import RunInputs
from bayesx.data.digits import load_digits
from bayesx.diagnostics import convergence
from bayesx.errors import BayesxError
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.mcmc.aehmc import AEHMC, LatentSampler
from bayesx.nn.autoencoder import (
    AutoEncoder,
    TrainSettings,
    fit_pca,
    initialize,
    pca_error_curve,
    relative_error,
    split,
    train_autoencoder,
)
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.logreg import LogisticRegression


pytestmark = pytest.mark.usefixtures("float64_by_default")  # tests/conftest.py


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def random_tanh_space(target, dim, latent_dim, seed=0):
    g = gen(seed)
    ae = AutoEncoder(dim, latent_dim, "tanh", hidden=5)
    initialize(ae, g)
    ae.requires_grad_(False)
    mean = torch.randn(dim, generator=g)
    scale = 0.5 + torch.rand(dim, generator=g)
    return latent.LatentSpace(target, ae, mean, scale)


@pytest.fixture(scope="module")
def logreg():
    return LogisticRegression(load_digits())


# --- auto-encoders ------------------------------------------------------------------------------------
def test_maps_are_odd_so_the_latent_kinetic_energy_is_even():
    ae = AutoEncoder(6, 2, "tanh", hidden=4)
    initialize(ae, gen())
    x = torch.randn(5, 6, generator=gen(1))
    assert torch.allclose(ae.encode(-x), -ae.encode(x))
    assert torch.allclose(ae.decode(-ae.encode(x)), -ae.decode(ae.encode(x)))


def test_pca_error_curve_matches_the_fitted_projection():
    g = gen()
    x = torch.randn(300, 8, generator=g) @ torch.diag(torch.tensor([5.0, 3, 2, 1, .5, .3, .2, .1]))
    x_train, x_val = split(x, 0.25, g)
    curve = pca_error_curve(x_train, x_val)
    for d in (1, 3, 8):
        assert curve[d - 1] == pytest.approx(relative_error(fit_pca(x_train, d), x_val), abs=1e-10)
    assert curve[-1] == pytest.approx(0.0, abs=1e-10)


def test_linear_autoencoder_learns_the_principal_subspace():
    g = gen()
    basis = torch.linalg.qr(torch.randn(20, 3, generator=g))[0]
    x = torch.randn(600, 3, generator=g) @ basis.T * 3 + 0.05 * torch.randn(600, 20, generator=g)
    x_train, x_val = split(x, 0.2, g)
    ae, report = train_autoencoder(x_train, x_val, 3, "linear", TrainSettings(max_epochs=400, lr=1e-2), g)
    best = relative_error(fit_pca(x_train, 3), x_val)
    assert report.recon_err < best + 0.01
    assert report.epochs <= 400 and len(report.val_loss) == report.epochs


def test_training_that_diverges_is_a_clear_error():
    g = gen()
    x = torch.randn(100, 5, generator=g)
    with pytest.raises(BayesxError, match="diverged .*lower method.train.lr"):
        train_autoencoder(x[:80], x[80:], 2, "linear", TrainSettings(lr=1e200), g)


# --- the latent Hamiltonian -----------------------------------------------------------------------------
def test_restricted_logreg_matches_the_full_model(logreg):
    g = gen()
    basis = torch.randn(logreg.dim, 4, generator=g) * 0.1
    offset = torch.randn(logreg.dim, generator=g) * 0.1
    restricted = logreg.restrict(offset, basis)
    u = torch.randn(3, 4, generator=g)
    lp, grad = restricted.log_prob_and_grad(u)
    q = offset + u @ basis.T
    full_lp, full_grad = logreg.log_prob_and_grad(q)
    assert torch.allclose(lp, full_lp) and torch.allclose(grad, full_grad @ basis)
    assert torch.allclose(restricted.potential_grad(u), -grad)


def test_latent_potential_and_kinetic_gradients_match_autograd(logreg):
    space = random_tanh_space(logreg, logreg.dim, 3)
    z = torch.randn(4, 3, generator=gen(2)).requires_grad_(True)
    potential = -logreg.log_prob(space.decode_position(z))
    (auto_grad,) = torch.autograd.grad(potential.sum(), z)
    u, grad = space.potential_and_grad(z.detach(), backend.on_pytorch(space.restricted))
    assert torch.allclose(u, potential.detach()) and torch.allclose(grad, auto_grad)
    assert torch.allclose(space.potential_grad(z.detach()), auto_grad)

    p = torch.randn(4, 3, generator=gen(3)).requires_grad_(True)
    pv = space.decode_momentum(p)
    kinetic = 0.5 * (pv * pv * space.scale**2).sum(-1)  # K(p_v) = p_v^T M^-1 p_v / 2, M^-1 = diag(s^2)
    (auto_grad,) = torch.autograd.grad(kinetic.sum(), p)
    assert torch.allclose(space.kinetic(p.detach()), kinetic.detach())
    z = torch.zeros(4, 3)
    assert torch.allclose(space.drift(z, p.detach(), 1.0), auto_grad)  # drift = z + eps grad K_h(p)


def test_latent_gradient_matches_finite_differences(logreg):
    space = random_tanh_space(logreg, logreg.dim, 3, seed=4)
    z = torch.randn(1, 3, generator=gen(5))
    restricted = backend.on_pytorch(space.restricted)
    _, grad = space.potential_and_grad(z, restricted)
    h = 1e-6
    for i in range(3):
        e = torch.zeros_like(z)
        e[0, i] = h
        fd = (space.potential_and_grad(z + e, restricted)[0]
              - space.potential_and_grad(z - e, restricted)[0]) / (2 * h)
        assert float(fd) == pytest.approx(float(grad[0, i]), rel=1e-5, abs=1e-6)


def brute_force_log_volume(space, q, p, z_end, p_end):
    """1/2 log of the four Gram determinants of Deep MCMC eq. 6, from autograd Jacobians of the full maps."""
    jac = torch.autograd.functional.jacobian
    dq = jac(lambda z: space.decode_position(z), z_end)  # (D, d): tall
    dp = jac(lambda z: space.decode_momentum(z), p_end)
    eq = jac(lambda x: space.encode_position(x)[0], q)  # (d, D): wide
    ep = jac(lambda x: space.encode_momentum(x)[0], p)
    logdets = [torch.logdet(dq.T @ dq), torch.logdet(dp.T @ dp), torch.logdet(eq @ eq.T), torch.logdet(ep @ ep.T)]
    return 0.5 * sum(logdets)


@pytest.mark.parametrize("arch", ["tanh", "linear"])
def test_log_volume_matches_brute_force_jacobians(arch):
    dim, d = 7, 3
    target = Gaussian(dim=dim)
    if arch == "tanh":
        space = random_tanh_space(target, dim, d, seed=6)
    else:
        ae = AutoEncoder(dim, d, "linear")
        initialize(ae, gen(6))
        with torch.no_grad():
            ae.dec_out.weight.add_(0.3 * torch.randn(dim, d, generator=gen(7)))  # not orthonormal
        space = latent.LatentSpace(target, ae.requires_grad_(False), torch.zeros(dim), 0.5 + torch.rand(dim, generator=gen(8)))
    g = gen(9)
    q, p = torch.randn(2, dim, generator=g), torch.randn(2, dim, generator=g)
    z_end, p_end = torch.randn(2, d, generator=g), torch.randn(2, d, generator=g)
    _, v_q = space.encode_position(q)
    _, v_p = space.encode_momentum(p)
    fast = space.log_volume(v_q, v_p, z_end, p_end)
    for c in range(2):
        assert float(fast[c]) == pytest.approx(float(brute_force_log_volume(space, q[c], p[c], z_end[c], p_end[c])),
                                               rel=1e-8, abs=1e-8)


def test_latent_leapfrog_is_reversible(logreg):
    space = random_tanh_space(logreg, logreg.dim, 3, seed=10)
    z0 = torch.randn(2, 3, generator=gen(11)) * 0.3
    p0 = torch.randn(2, 3, generator=gen(12))
    restricted = backend.on_pytorch(space.restricted)
    forward = latent.latent_leapfrog(space, restricted, z0, p0, 0.01, 20)
    back = latent.latent_leapfrog(space, restricted, forward.position, -forward.momentum, 0.01, 20, forward.potential, forward.grad)
    assert torch.allclose(back.position, z0, atol=1e-9) and torch.allclose(-back.momentum, p0, atol=1e-9)
    # the energies at the ends are the latent Hamiltonian U_h + K_h, and swap under reversal
    potential0, _ = space.potential_and_grad(z0, restricted)
    torch.testing.assert_close(forward.start_energy, potential0 + space.kinetic(p0))
    torch.testing.assert_close(back.start_energy, forward.end_energy)
    torch.testing.assert_close(back.end_energy, forward.start_energy, rtol=1e-9, atol=1e-9)


# --- exactness with an invertible auto-encoder ----------------------------------------------------------
def test_invertible_linear_autoencoder_reproduces_gaussian_moments():
    """latent_dim = D, encoder A (not orthogonal), decoder A^-1: psi = phi^-1, and AE-HMC with the
    volume correction must be exact. Moments are checked with z-scores against the MCSE."""
    dim = 4
    cov = torch.tensor([[2.0, 0.9, 0.3, 0.0], [0.9, 1.0, 0.2, 0.1], [0.3, 0.2, 0.5, -0.1], [0.0, 0.1, -0.1, 0.3]])
    mean = torch.tensor([1.0, -0.5, 0.0, 2.0])
    target = Gaussian(cov=cov, mean=mean)
    g = gen(13)
    a = torch.eye(dim) + 0.4 * torch.randn(dim, dim, generator=g)
    ae = AutoEncoder(dim, dim, "linear")
    with torch.no_grad():
        ae.enc_in.weight.copy_(a)
        ae.dec_out.weight.copy_(torch.linalg.inv(a))
    space = latent.LatentSpace(target, ae.requires_grad_(False), torch.zeros(dim), torch.tensor([1.5, 1.0, 0.7, 0.6]))
    assert float(space.constant_log_volume) == pytest.approx(0.0, abs=1e-10)
    sampler = LatentSampler(space, latent.LatentParams(0.0, 8, True, "original"), num_warmup=300, num_draws=3000)
    result = sampler.sample(target, RunInputs(target.initial_point(4, g), g, progress=False))
    draws = result.draws.numpy()
    flat = draws.reshape(-1, dim)
    summary = convergence.summarize(draws)
    assert summary["rhat_max"] < 1.01
    ess = convergence.ess_per_coordinate(draws, "bulk")
    sd = np.sqrt(np.diag(cov.numpy()))
    z_mean = (flat.mean(0) - mean.numpy()) / (sd / np.sqrt(ess))
    assert np.all(np.abs(z_mean) < 4.0), z_mean
    # the variance: its MCSE is about sd^2 sqrt(2 / ESS) for a Gaussian
    z_var = (flat.var(0) - sd**2) / (sd**2 * np.sqrt(2.0 / ess))
    assert np.all(np.abs(z_var) < 4.0), z_var


def test_negative_control_a_wrong_volume_term_is_caught():
    """The same check fails when the acceptance ratio carries a spurious volume factor."""
    dim = 2
    target = Gaussian(dim=dim)
    ae = AutoEncoder(dim, dim, "linear")
    with torch.no_grad():
        ae.enc_in.weight.copy_(torch.eye(dim))
        ae.dec_out.weight.copy_(torch.eye(dim))
    space = latent.LatentSpace(target, ae.requires_grad_(False), torch.zeros(dim), torch.ones(dim))

    class Skewed(latent.LatentSpace):
        def log_volume(self, v_q, v_p, z_end, p_end):  # favours proposals far from the origin
            return 2.0 * (z_end * z_end).sum(-1) - 2.0 * (v_q * v_q).sum(-1)

    space.__class__ = Skewed
    sampler = LatentSampler(space, latent.LatentParams(0.0, 5, True, "original"), num_warmup=200, num_draws=2000)
    g = gen(14)
    flat = sampler.sample(
        target, RunInputs(target.initial_point(4, g), g, progress=False)).draws.reshape(-1, dim).numpy()
    assert abs(flat.var(0).mean() - 1.0) > 0.3


# --- the method's own checks ------------------------------------------------------------------------------
def test_latent_dim_and_presample_checks(logreg):
    with pytest.raises(BayesxError, match="exceeds the target's dimension 64"):
        AEHMC(latent_dim=65).check(logreg, 4)
    with pytest.raises(BayesxError, match="too few pre-samples"):
        AEHMC(latent_dim=30, presample={"num_draws": 100}).check(logreg, 4)
    with pytest.raises(BayesxError, match="latent_dim must be an integer"):
        AEHMC(latent_dim=0)
    AEHMC(latent_dim="auto").check(logreg, 4)
    assert AEHMC().settings.resolved_latent_dim(500) == 50 and AEHMC().settings.resolved_latent_dim(64) == 6


def test_aehmc_end_to_end_on_digits_stays_accurate(logreg):
    g = gen(15)
    method = AEHMC(num_steps=20, num_warmup=100, num_draws=300,
                   presample={"num_warmup": 300, "num_draws": 400, "init": "laplace"})
    result = method.sample(logreg, RunInputs(logreg.initial_point(2, g), g, progress=False))
    assert result.draws.shape == (2, 300, 64)
    assert result.metrics["latent_dim"] == 6
    for key in ("presample_time_s", "train_time_s", "sampling_time_s", "warmup_time_s"):
        assert result.timings[key] > 0
    assert 0.3 < result.metrics["accept_rate"] <= 1.0
    assert logreg.evaluate(result.draws).metrics["test_accuracy"] >= 0.99
    assert math.isfinite(result.metrics["log_volume_mean"])
