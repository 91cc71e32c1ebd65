"""GAP and SVGD in the whitened coordinates of a Gaussian VI fit (``frame: gaussian``, issue 34;
bayesx.methods.vi.frame), against a badly scaled, correlated Gaussian whose answer is known, with ``frame: none``
as the negative control (what the posteriordb suite showed: GAP 1251 and SVGD 1792 reference sds off); and GAP's
breakdowns as one-line FAILED runs naming GAP, the iteration and the fix."""

from __future__ import annotations

import pytest
import torch

from cli_helpers import assert_rejected, isolated_store

from bayesx.kernels.backend import on_pytorch
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.base import RunInputs
from bayesx.methods.vi import gap
from bayesx.methods.vi.frame import AffineFrame, IdentityFrame
from bayesx.methods.vi.gap import GAP
from bayesx.methods.vi.svgd import SVGD
from bayesx.settings import InvalidSetting
from bayesx.targets.gaussian import Gaussian

DIM = 10


@pytest.fixture(scope="module")
def badly_scaled() -> Gaussian:
    """10-d AR(1) correlation 0.95 with sds from 0.01 to 1 (covariance condition number 2.2e5), its mean at 3 +- 1:
    hundreds of sds from the initial points in its narrow directions."""
    index = torch.arange(DIM, dtype=torch.float64)
    sd = torch.logspace(-2, 0, DIM, dtype=torch.float64)
    cov = 0.95 ** (index[:, None] - index[None, :]).abs() * torch.outer(sd, sd)
    return Gaussian(cov=cov, mean=3.0 + torch.linspace(-1.0, 1.0, DIM, dtype=torch.float64))


def run(method, target, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))


def errors(result, target: Gaussian) -> tuple[float, float]:
    """(largest |mean error|, largest |sd error|) of the draws, in the target's sds."""
    draws, sd = result.draws[0], target.cov.diagonal().sqrt()
    return (float(((draws.mean(0) - target.mean).abs() / sd).max()),
            float(((draws.std(0) - sd).abs() / sd).max()))


def test_affine_frame_maps_density_gradient_and_gaussians():
    """log p_w(w) = log p(m + L w) + log|det L|, grad_w = L^T grad_z, N(mu, S S^T) -> N(m + L mu, L S (L S)^T);
    the identity frame changes nothing."""
    target = Gaussian(dim=3, kind="correlated", rho=0.6, mean=[1.0, -1.0, 0.5])
    scale = torch.tensor([[0.5, 0.0, 0.0], [0.3, 0.2, 0.0], [-1.0, 0.4, 2.0]], dtype=torch.float64)
    frame = AffineFrame(GaussianQ(torch.tensor([0.2, 0.1, -0.3], dtype=torch.float64), scale), grad_evals=7.0)
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = frame.to_target(w)
    torch.testing.assert_close(z, frame.gaussian.mean + w @ scale.T)
    density = on_pytorch(target)
    log_p, grad = frame.density_and_grad(density, w)
    log_p_z, grad_z = target.log_prob_and_grad(z)
    torch.testing.assert_close(log_p, log_p_z + float(torch.logdet(scale)))
    torch.testing.assert_close(frame.log_prob(target, w), log_p)
    torch.testing.assert_close(grad, (scale.T @ grad_z.T).T)
    q = frame.to_target_q(GaussianQ(torch.ones(3, dtype=torch.float64), torch.full((3,), 2.0, dtype=torch.float64)))
    torch.testing.assert_close(q.mean, frame.to_target(torch.ones(1, 3, dtype=torch.float64))[0])
    torch.testing.assert_close(q.covariance(), 4.0 * scale @ scale.T)
    identity = IdentityFrame()
    assert identity.to_target(w) is w and identity.grad_evals == 0.0 and identity.gaussian is None


def test_gap_with_defaults_fits_a_badly_scaled_posterior(badly_scaled):
    """Defaults (the frame): mean and sd within 0.25 sds (the Monte Carlo jitter of GAP's iterates: 1000 draws
    per iteration), k-hat below 0.7, the VI fit's gradients counted. Negative control: the same budget without
    the frame is far off, as on posteriordb's sblri_blr, and k-hat flags it."""
    framed = run(GAP(), badly_scaled)
    assert framed.error is None and framed.tags["frame"] == "full-rank Gaussian VI"
    mean_err, sd_err = errors(framed, badly_scaled)
    assert mean_err < 0.25 and sd_err < 0.25, (mean_err, sd_err)
    assert framed.metrics["psis_khat"] < 0.7 and framed.metrics["n_grad_evals"] > 1000
    bare = run(GAP(frame="none"), badly_scaled)
    assert bare.tags["frame"] == "none"
    if bare.error is None:  # without the frame GAP either breaks down (a one-line error) or ends far off
        assert errors(bare, badly_scaled)[0] > 10.0
        assert not bare.metrics["psis_khat"] < 0.7


def test_svgd_with_defaults_fits_a_badly_scaled_posterior(badly_scaled):
    """Defaults (the frame): the particles' mean within 0.15 sds. Their sds are about 0.66 of the target's on every
    coordinate: that is SVGD's own fixed point with 100 particles in 10 dimensions (the same on N(0, I), the
    variance collapse of Ba et al. 2022), not the frame's. SVGD has no density and no k-hat, but Stein's identity
    on the particles measures that collapse (its spread is the variance ratio, about 0.66^2) and the run says so.
    Negative control: the same budget without the frame ends more than 1 sd off in the mean."""
    framed = run(SVGD(), badly_scaled)
    assert framed.error is None and framed.tags["frame"] == "full-rank Gaussian VI"
    mean_err, sd_err = errors(framed, badly_scaled)
    assert mean_err < 0.15 and sd_err < 0.45, (mean_err, sd_err)
    assert framed.metrics["n_grad_evals"] > 1000 * 100
    assert abs(framed.metrics["stein_spread_min"] - (1.0 - sd_err) ** 2) < 0.1, (framed.metrics, sd_err)
    assert framed.metrics["stein_spread_flagged"] > 0
    assert any("Stein's identity" in line for line in SVGD().warnings(framed.metrics))
    bare = run(SVGD(frame="none"), badly_scaled)
    assert bare.tags["frame"] == "none" and errors(bare, badly_scaled)[0] > 1.0


def test_gap_init_mean_belongs_to_frame_none():
    with pytest.raises(InvalidSetting, match="init_mean is the start of method.frame=none"):
        GAP(init_mean=[0.0, 0.0]).check(Gaussian(dim=2), 4)
    GAP(init_mean=[0.0, 0.0], frame="none").check(Gaussian(dim=2), 4)


def test_a_gram_block_that_is_not_positive_definite_fails_the_run_in_one_line(monkeypatch, tmp_path_factory):
    """The Cholesky of GAP's Gram block failing (posteriordb's diamonds without the frame raised a raw
    torch LinAlgError) ends the run FAILED with one line naming GAP, the iteration and the fix."""
    real = gap.orthonormal_coordinates
    calls = {"n": 0}

    def breaks_on_the_fifth_call(gram, terms):
        calls["n"] += 1
        if calls["n"] == 5:  # the mean's and L's blocks are two calls per (not skipped) iteration
            torch.linalg.cholesky(-torch.eye(2, dtype=torch.float64))  # raises torch.linalg.LinAlgError
        return real(gram, terms)

    monkeypatch.setattr(gap, "orthonormal_coordinates", breaks_on_the_fifth_call)
    result = run(GAP(frame="none", num_steps=10, n_mc=50), Gaussian(dim=2))
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("GAP diverged at iteration ") and "the Gram matrix" in result.error
    assert "method.frame=gaussian" in result.error
    calls["n"] = 0
    with isolated_store(tmp_path_factory, "gap_fails") as (_, uri):
        line = assert_rejected(["run", "method=gap", "model=gaussian", "method.frame=none", "method.num_steps=10",
                                "method.n_mc=50", "reference.enabled=false", "plots.n_coords=0", "progress=false"],
                               uri, "GAP diverged at iteration", "the Gram matrix", may_fail_a_run=True)
    assert "Traceback" not in line


def test_a_step_that_makes_q_non_finite_fails_the_run_in_one_line():
    """A step of 1e300 throws q's parameters to infinity: one line naming GAP, the iteration and the fix."""
    result = run(GAP(frame="none", num_steps=10, n_mc=50, eps_mu=1e300, eps_l=1e300), Gaussian(dim=2))
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("GAP diverged at iteration ") and "lower method.eps_l" in result.error
