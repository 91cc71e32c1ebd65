"""The batched ESS and R-hat (bayesx.diagnostics.convergence) against ArviZ's own, coordinate by coordinate, and the
record's computed_once memory: each per-coordinate diagnostic of the same draws computed once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bayesx.diagnostics import convergence as cv
from bayesx.diagnostics.summary import posterior_summary

RTOL = 1e-9


def ar1(rng, chains: int, draws: int, k: int, phi: float) -> np.ndarray:
    x = np.zeros((chains, draws, k))
    noise = rng.normal(size=(chains, draws, k))
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + noise[:, t]
    return x


def cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    edge = rng.normal(size=(4, 100, 6))
    edge[:, :, 2] = 1.0  # constant: ArviZ's ESS is the draw count, its R-hat NaN
    edge[0, 5, 3] = np.nan  # not finite: handed to ArviZ itself
    edge[1, 2, 4] = np.inf
    return {
        "iid": rng.normal(size=(4, 400, 30)),
        "slow": ar1(rng, 4, 300, 12, 0.95),  # a long positive sequence: Geyer's loops run far
        "very slow": ar1(rng, 3, 301, 8, 0.995),  # odd draw count
        "antithetic": ar1(rng, 2, 200, 8, -0.7),
        "chains apart": rng.normal(size=(4, 200, 8)) + 0.3 * np.arange(4)[:, None, None],
        "ties": rng.integers(0, 3, size=(4, 100, 8)).astype(float),
        "one chain": rng.normal(size=(1, 100, 5)),
        "few draws": rng.normal(size=(2, 3, 4)),
        "float32": rng.normal(size=(2, 100, 5)).astype(np.float32),
        "edge": edge,
    }


@pytest.mark.parametrize("name", list(cases()))
def test_batched_ess_and_rhat_equal_arviz_coordinate_by_coordinate(name):
    draws = cases()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in cv.BATCHED_ESS:
            expected = cv._arviz(np.asarray(draws, np.float64), method=method)
            np.testing.assert_allclose(cv.ess_per_coordinate(draws, method), expected, rtol=RTOL, equal_nan=True,
                                       err_msg=f"ess {method}")
        expected = cv._arviz(np.asarray(draws, np.float64), rhat=True)
        if draws.shape[0] < 2 or draws.shape[1] < 4:
            expected = np.full(draws.shape[-1], np.nan)  # ArviZ's answer: not defined
        np.testing.assert_allclose(cv.rhat_per_coordinate(draws), expected, rtol=RTOL, equal_nan=True)


def test_the_comparison_tells_near_computations_apart():
    """Negative control: the tolerance separates two of ArviZ's ESS that differ only in the rank transform (bulk:
    ranks then normal quantiles; mean: the values), and slowly mixing chains have far fewer effective draws."""
    draws = ar1(np.random.default_rng(3), 4, 300, 10, 0.95)
    bulk, mean = cv.ess_per_coordinate(draws, "bulk"), cv.ess_per_coordinate(draws, "mean")
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(bulk, mean, rtol=RTOL)
    assert bulk.max() < 0.1 * draws.shape[0] * draws.shape[1]


def test_a_record_computes_each_diagnostic_once(monkeypatch):
    draws = np.random.default_rng(0).normal(size=(4, 200, 20))
    calls = []
    real_ess, real_rhat = cv.batched_ess, cv.batched_rhat
    monkeypatch.setattr(cv, "batched_ess", lambda block, method: calls.append(method) or real_ess(block, method))
    monkeypatch.setattr(cv, "batched_rhat", lambda block: calls.append("rhat") or real_rhat(block))
    with cv.computed_once():
        metrics = cv.summarize(draws)
        table = posterior_summary(draws.copy(), [f"x{j}" for j in range(20)])  # equal values, another array
        lowest = cv.lowest_ess_coordinates(draws, 3)
    assert sorted(calls) == ["bulk", "rhat", "tail"]
    assert metrics["ess_bulk_min"] == table["ess_bulk"].min()
    assert lowest == list(np.argsort(table["ess_bulk"].to_numpy())[:3])
    calls.clear()
    cv.summarize(draws)  # outside the block every call computes
    assert sorted(calls) == ["bulk", "rhat", "tail"]
    changed = draws.copy()
    changed[0, 0, 0] += 1.0
    with cv.computed_once():
        first = cv.ess_per_coordinate(draws)
        second = cv.ess_per_coordinate(changed)  # other values: computed again
    assert first[0] != second[0]
