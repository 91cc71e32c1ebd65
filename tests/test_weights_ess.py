"""The importance weights' ESS fraction (bayesx.diagnostics.importance.draw_checks) and the family's warning on it.

k-hat reads only the largest weights p/q, so a q that is too wide (bounded weights) passes it. For q = N(0, s^2 I_d)
and p = N(0, I_d) the weights' ESS fraction is (sqrt(2 - 1/s^2) / s)^d: 0.16 for s = 1.5, d = 10 (flagged, sds 50%
off), 0.86 for s = 1.1 (the control, sds 10% off: not flagged), 1 for q = p.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bayesx.diagnostics.importance import ESS_FRACTION_LIMIT, KHAT_LIMIT, draw_checks
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, Fit
from bayesx.targets.gaussian import Gaussian


class FixedQ(Approximation):
    """An approximation whose 'fit' is N(0, s^2 I) whatever the target: wrong by construction for s != 1."""

    name = "fixed_q"

    def __init__(self, scale: float, **options):
        super().__init__(**options)
        self.scale = scale

    def approximate(self, target, inputs: RunInputs) -> Fit:
        out = Fit()
        out.approximation = GaussianQ(torch.zeros(target.dim, dtype=torch.float64),
                                      torch.full((target.dim,), self.scale, dtype=torch.float64))
        return out


def exact_fraction(scale: float, dim: int) -> float:
    return (math.sqrt(2.0 - 1.0 / scale**2) / scale) ** dim


def run(scale: float, dim: int = 10, seed: int = 0, num_draws: int = 1000):
    target = Gaussian(dim=dim)
    gen = torch.Generator().manual_seed(seed)
    method = FixedQ(scale, num_draws=num_draws)
    return method, method.infer(target, RunInputs(target.initial_point(1, gen), gen, progress=False))


@pytest.mark.parametrize("scale", [1.1, 1.3, 1.5])
def test_the_fraction_matches_the_gaussian_formula(scale):
    _, result = run(scale, num_draws=20000)
    assert result.metrics["weights_ess_fraction"] == pytest.approx(exact_fraction(scale, 10), rel=0.1)


def test_a_too_wide_q_passes_khat_but_is_flagged_and_near_exact_ones_are_not():
    method, wide = run(1.5)
    assert wide.metrics["psis_khat"] < 0.5  # k-hat cannot see it
    warnings = method.warnings(wide.metrics)
    assert warnings[0].startswith("weights_ess_fraction = 0.1")  # and the moments see sds about 1.5 times too wide
    assert len(warnings) == 2 and warnings[1].startswith("by the importance weights") and wide.metrics["psis_sd_ratio_max"] > 1.33
    for scale in (1.0, 1.1):  # controls: the posterior itself, and sds 10% too wide
        method, close = run(scale)
        assert close.metrics["weights_ess_fraction"] > 2 * ESS_FRACTION_LIMIT and method.warnings(close.metrics) == []


def test_khat_speaks_first_for_a_too_narrow_q():
    method, narrow = run(0.5)
    warnings = method.warnings(narrow.metrics)
    assert len(warnings) == 1 and warnings[0].startswith("psis_khat = ")


def test_failed_densities_count_as_zero_weights():
    lw = np.zeros(100)
    lw[:50] = np.nan
    values = np.random.default_rng(0).normal(size=(100, 2))
    assert draw_checks(values, lw)["weights_ess_fraction"] == pytest.approx(0.5)
    assert math.isnan(draw_checks(values, np.full(100, np.nan))["weights_ess_fraction"])


@pytest.mark.slow
@pytest.mark.parametrize("name, flagged", [("gp_pois_regr", True), ("arK", False)])
def test_fullrank_vi_on_posteriordb(name, flagged):
    """Full-rank VI's defaults on gp_pois_regr: k-hat about 0.56 with sds 0.60 reference sds off, and an ESS
    fraction of 0.11-0.13 (flagged); the control arK (errors <= 0.06) keeps about 0.95 of its draws."""
    from bayesx.methods.vi.gaussian import GaussianVI
    from bayesx.targets.posteriordb.target import PosteriorDB

    target = PosteriorDB(name=name)
    gen = torch.Generator().manual_seed(0)
    method = GaussianVI(family="fullrank")
    result = method.infer(target, RunInputs(method.initial_points(target, 4, gen), gen, progress=False))
    warned = any(w.startswith("weights_ess_fraction") for w in method.warnings(result.metrics))
    assert warned == flagged, result.metrics


# --- q's moments against the Pareto-smoothed weights' estimate -------------------------------------------------
class ShiftedQ(FixedQ):
    """N(shift, s^2 I): a q whose mean is off by ``shift`` posterior sds in every coordinate."""

    def __init__(self, scale: float, shift: float, **options):
        super().__init__(scale, **options)
        self.shift = shift

    def approximate(self, target, inputs: RunInputs) -> Fit:
        out = super().approximate(target, inputs)
        out.approximation = GaussianQ(out.approximation.mean + self.shift, out.approximation.scale)
        return out


def shifted(shift: float, scale: float = 1.0, dim: int = 3, seed: int = 0):
    target = Gaussian(dim=dim)
    gen = torch.Generator().manual_seed(seed)
    method = ShiftedQ(scale, shift)
    return method, method.infer(target, RunInputs(target.initial_point(1, gen), gen, progress=False))


def test_a_shifted_q_that_passes_khat_and_the_ess_is_flagged_by_its_moments():
    """A q 0.45 sds off in mean keeps exp(-3 x 0.45^2) = 0.54 of its draws in 3 dimensions (no ESS warning) with a
    small k-hat; the weights' moments see the shift. Controls: q = p, and a shift of 0.1 sds, are not flagged."""
    method, off = shifted(0.45)
    assert off.metrics["psis_khat"] < KHAT_LIMIT and off.metrics["weights_ess_fraction"] > ESS_FRACTION_LIMIT
    assert off.metrics["psis_mean_shift_max"] == pytest.approx(0.45, abs=0.1)
    warnings = method.warnings(off.metrics)
    assert len(warnings) == 1 and warnings[0].startswith("by the importance weights, q's draws are off along 3")
    for shift in (0.0, 0.1):
        method, close = shifted(shift)
        assert close.metrics["psis_moments_flagged"] == 0 and method.warnings(close.metrics) == []


def test_a_narrow_q_with_a_passing_khat_is_flagged_by_its_sd_ratio():
    """sds 20% short in one dimension: k-hat about 0.5, the draws' sd ratio about 0.8; 35% short: flagged."""
    method, short = shifted(0.0, scale=0.65, dim=1, seed=1)
    if short.metrics["psis_khat"] <= KHAT_LIMIT:  # else k-hat speaks first, which is right too
        assert short.metrics["psis_sd_ratio_min"] < 0.75 and short.metrics["psis_moments_flagged"] == 1


def test_moments_of_exact_draws_are_quiet_over_seeds():
    """The negative control at scale: q = p in 10 dimensions flags no coordinate in 50 seeds (3-SE gates)."""
    for seed in range(50):
        _, exact = shifted(0.0, dim=10, seed=seed)
        assert exact.metrics["psis_moments_flagged"] == 0, seed


@pytest.mark.slow
def test_laplace_mode_for_mean_shift_on_ark_is_found_and_full_rank_vi_is_not_flagged():
    """Laplace on posteriordb's arK: q = N(mode, H^-1) passes k-hat (about 0.3) and the ESS (about 0.8), but its
    means are 0.39-0.42 reference sds off (the mode is not the mean); the weights' moments estimate the shift at
    about 0.35 and warn. The control, full-rank VI on the same posterior (errors <= 0.06), is not flagged."""
    from bayesx.methods.vi.gaussian import GaussianVI
    from bayesx.methods.vi.laplace import Laplace
    from bayesx.targets.posteriordb.target import PosteriorDB

    target = PosteriorDB(name="arK")
    for method, flagged in ((Laplace(), True), (GaussianVI(family="fullrank"), False)):
        gen = torch.Generator().manual_seed(0)
        result = method.infer(target, RunInputs(method.initial_points(target, 4, gen), gen, progress=False))
        assert result.metrics["psis_khat"] < KHAT_LIMIT and result.metrics["weights_ess_fraction"] > ESS_FRACTION_LIMIT
        assert (result.metrics["psis_moments_flagged"] > 0) == flagged, result.metrics
        if flagged:
            assert 0.25 < result.metrics["psis_mean_shift_max"] < 0.5
