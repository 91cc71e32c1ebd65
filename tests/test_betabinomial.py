"""The rat-tumour beta-binomial target: its density against scipy's Beta functions where they are
accurate, stable where lgamma differences are not, and its quadrature truth converged."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import betaln

from bayesx.targets.betabinomial import BOX, BetaBinomial, rat_tumors
from bayesx.targets.toy import quadrature_truth


@pytest.fixture(scope="module")
def target():
    return BetaBinomial()


def reference_log_prob(u: float, v: float) -> float:
    y, n = rat_tumors()
    alpha = math.exp(v) / (1.0 + math.exp(-u))
    beta = math.exp(v) - alpha
    return float(sum(betaln(alpha + yj, beta + nj - yj) - betaln(alpha, beta) for yj, nj in zip(y, n))
                 + math.log(alpha) + math.log(beta) - 2.5 * v)


def test_the_data_are_tarones_71_groups():
    y, n = rat_tumors()
    assert len(y) == 71 and int(y.sum()) == 267 and int(n.sum()) == 1739


def test_log_prob_matches_the_beta_functions_and_stays_exact_in_the_tail(target):
    for u, v in [(-1.8, 2.5), (-2.5, 0.5), (-1.0, 5.0)]:
        assert float(target.log_prob(torch.tensor([u, v], dtype=torch.float64))) == pytest.approx(
            reference_log_prob(u, v), rel=1e-10)
    # far out the likelihood tends to a binomial with p = sigmoid(u): Y log p + F log(1 - p) - v / 2 + ...
    y, n = rat_tumors()
    u, v = -1.8, 40.0
    p = 1.0 / (1.0 + math.exp(-u))
    limit = y.sum() * math.log(p) + (n - y).sum() * math.log(1 - p) + math.log(p * (1 - p)) - 0.5 * v
    assert float(target.log_prob(torch.tensor([u, v], dtype=torch.float64))) == pytest.approx(limit, abs=1e-6)


def test_gradients_by_autograd_match_finite_differences(target):
    q = torch.tensor([[-1.7, 2.9]], dtype=torch.float64)
    _, grad = target.log_prob_and_grad(q)
    h = 1e-6
    for i in range(2):
        e = torch.zeros(1, 2, dtype=torch.float64)
        e[0, i] = h
        fd = (target.log_prob(q + e) - target.log_prob(q - e)) / (2 * h)
        assert float(grad[0, i]) == pytest.approx(float(fd), rel=1e-6)


def test_quadrature_truth_has_converged(target):
    coarse = quadrature_truth(target.log_prob, BOX, n=801)
    assert coarse.log_z == pytest.approx(target.truth.log_z, abs=1e-5)
    assert np.allclose(coarse.mean, target.truth.mean, atol=1e-4)
    # log(alpha / beta) is the logit of the mean tumour rate: near the pooled rate 267 / 1739
    assert abs(target.truth.mean[0] - math.log(267 / (1739 - 267))) < 0.15
