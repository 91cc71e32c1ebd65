"""Sinkhorn distances (POT) and grid sampling of 2-D densities, against known answers."""

from __future__ import annotations

import numpy as np
import pytest

from bayesx.diagnostics.transport import grid_sample, sinkhorn_distance


def test_a_shift_costs_its_length_and_a_resample_costs_little():
    """Translating every point by 3 costs about 3 with the raw Euclidean cost (W1 of a shift is its
    length); an independent sample of the same law costs far less (the finite-sample floor)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(400, 2)), rng.normal(size=(400, 2))
    shifted = a + np.array([3.0, 0.0])
    raw = sinkhorn_distance(a, shifted, reg=0.05, normalize_cost=False)
    assert raw == pytest.approx(3.0, abs=0.1)
    assert sinkhorn_distance(a, b, reg=0.05, normalize_cost=False) < 0.5


def test_grid_sample_has_the_density_moments():
    rng = np.random.default_rng(1)

    def log_density(points):
        return -0.5 * (((points - np.array([1.0, -0.5])) / np.array([0.5, 1.0])) ** 2).sum(-1)

    draws = grid_sample(log_density, (-5, 5, -5, 5), 20000, rng)
    assert np.allclose(draws.mean(0), [1.0, -0.5], atol=0.03)
    assert np.allclose(draws.std(0), [0.5, 1.0], atol=0.03)
