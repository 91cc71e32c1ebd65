"""The toy densities (``model=density``): their log normalizers and moments against independent
quadrature on a wide grid, and the runner's log_evidence_err on them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import isolated_store, run_ok

from bayesx.targets.toy import NAMES, Density


@pytest.mark.parametrize("name", ["t1", "bimodal", "far_bimodal", "ais_toy"])
def test_one_dimensional_truths_by_quadrature(name):
    target = Density(name=name)
    width = 4000.0 if name == "t1" else 60.0  # the Cauchy's tails need a wide grid (mass beyond 4000: 1.6e-4)
    x = torch.linspace(-width, width, 800001, dtype=torch.float64)[:, None]
    log_p = target.log_prob(x)
    h = 2 * width / 800000
    log_z = float(torch.logsumexp(log_p, 0)) + math.log(h)
    assert log_z == pytest.approx(target.log_normalizer(), abs=2e-4 if name == "t1" else 1e-8)
    if target.truth.mean is not None:
        p = torch.exp(log_p - log_z) * h
        mean = float((p * x[:, 0]).sum())
        sd = math.sqrt(float((p * (x[:, 0] - mean) ** 2).sum()))
        assert mean == pytest.approx(target.truth.mean[0], abs=1e-6)
        assert sd == pytest.approx(target.truth.sd[0], abs=1e-6)


@pytest.mark.parametrize("name", ["funnel", "banana"])
def test_closed_form_truths_by_simulation(name):
    """Exact draws from the generative form; their moments agree with the stated ones (z-scores)."""
    g = torch.Generator().manual_seed(0)
    n = 400000
    if name == "funnel":
        v = 3.0 * torch.randn(n, generator=g, dtype=torch.float64)
        x = torch.randn(n, 9, generator=g, dtype=torch.float64) * torch.exp(0.5 * v)[:, None]
        draws = torch.cat([v[:, None], x], 1)[:, :2]  # v and one x (the x_i share their law)
    else:
        x1 = 10.0 * torch.randn(n, generator=g, dtype=torch.float64)
        x2 = torch.randn(n, generator=g, dtype=torch.float64) - 0.1 * x1**2 + 10.0
        draws = torch.stack([x1, x2], 1)
    truth = Density(name=name).truth
    z_mean = (draws.mean(0).numpy() - truth.mean[:2]) / (truth.sd[:2] / math.sqrt(n))
    assert np.all(np.abs(z_mean) < 4.5), z_mean
    assert draws[:, 0].std().item() == pytest.approx(truth.sd[0], rel=0.01)
    if name == "banana":
        assert draws[:, 1].std().item() == pytest.approx(truth.sd[1], rel=0.02)
    target = Density(name=name)
    if name == "funnel":  # log p is the generative form's own log density, so Z = 1
        q = torch.cat([v[:5, None], x[:5]], 1)
        normal = torch.distributions.Normal
        expected = normal(0.0, 3.0).log_prob(v[:5]) + normal(0.0, torch.exp(0.5 * v[:5])[:, None]).log_prob(x[:5]).sum(1)
        assert torch.allclose(target.log_prob(q), expected)
    else:  # quadrature on a grid that holds the banana
        g1 = torch.linspace(-80.0, 80.0, 1601, dtype=torch.float64)
        g2 = torch.linspace(-700.0, 25.0, 7251, dtype=torch.float64)
        grid = torch.stack(torch.meshgrid(g1, g2, indexing="ij"), -1)
        log_z = float(torch.logsumexp(target.log_prob(grid), (0, 1))) + math.log(0.1 * 0.1)
        assert log_z == pytest.approx(target.log_normalizer(), abs=1e-4)


def test_energies_are_boxed_and_their_quadrature_converges():
    """U2-U4 are -inf off the box; U1 (a ring) is finite everywhere and its quadrature on the box
    misses nothing measurable (a grid on [-6, 6]^2 gives the same log Z)."""
    ring = Density(name="u1")
    outside = ring.log_prob(torch.tensor([[4.5, 0.0]], dtype=torch.float64)).item()
    assert math.isfinite(outside) and outside < -25
    axis = torch.linspace(-6.0, 6.0, 1201, dtype=torch.float64)
    wide = torch.logsumexp(ring.log_prob(torch.cartesian_prod(axis, axis)), 0) + 2 * math.log(0.01)
    assert float(wide) == pytest.approx(ring.truth.log_z, abs=1e-4)
    for name in ("u1", "u2", "u3", "u4"):
        target = Density(name=name)
        if name != "u1":
            assert target.log_prob(torch.tensor([[4.5, 0.0]], dtype=torch.float64)).item() == -math.inf
        from bayesx.targets.toy import _quadrature_truth

        coarse = _quadrature_truth(name, 401)
        assert coarse.log_z == pytest.approx(target.truth.log_z, abs=1e-3)
        assert np.allclose(coarse.mean, target.truth.mean, atol=1e-3)


def test_every_density_has_a_finite_gradient_at_its_initial_points():
    g = torch.Generator().manual_seed(1)
    for name in NAMES:
        target = Density(name=name)
        q = 0.5 * target.initial_point(8, g)
        lp, grad = target.log_prob_and_grad(q)
        assert torch.isfinite(lp).all() and torch.isfinite(grad).all(), name


def test_cli_reports_the_evidence_error(tmp_path_factory):
    with isolated_store(tmp_path_factory, "toy") as (_, uri):
        run = run_ok(uri, ["run", "method=ais", "model=density", "model.name=ais_toy", "method.n_samples=400",
                           "progress=false", "plots.n_coords=0"])
    metrics = run.data.metrics
    assert run.data.tags["data"] == "none" and run.data.tags["target.density"] == "ais_toy"
    assert abs(metrics["log_evidence_err"]) < 5 * metrics["log_evidence_se"] + 0.01
    assert "log_evidence_err" in run.data.tags["compare_metrics"]
