"""Stein's identity as a check on draws that come without a density of their own (SVGD's particles), where a
PSIS k-hat cannot be computed.

For a posterior density p on R^d that vanishes at infinity, integration by parts gives, for every coordinate k
and every constant c,

    E_p[d log p / dw_k] = 0,        E_p[(w_k - c) d log p / dw_k] = -1.

Gorham and Mackey (2015, "Measuring sample quality with Stein's method") build sample-quality measures on such
identities; the two linear ones are used here, per coordinate, on n draws w_i with their gradients g_i:

- **spread** s_k = -1/n sum_i (w_ik - mean_k) g_ik. Its expectation under p is 1. Where the posterior is close to
  N(0, I) in w (the whitened coordinates of a Gaussian VI fit, bayesx.methods.vi.frame) g = -w, so s_k is the
  draws' variance along k as a fraction of the posterior's: on posteriordb, SVGD's s_k matched its measured sd
  errors (s = 0.77 for an sd 12% short on arma11, 0.14-0.18 for diamonds' 100 particles in 26 dimensions, whose sds
  are 60% short). A coordinate is flagged where s_k is outside [SPREAD_LOW, SPREAD_HIGH] and further from 1 than
  SPREAD_SE of its standard errors (the draws taken as independent): heavy-tailed posteriors (a funnel) make s_k
  noisy even for exact draws, and there the standard error, not the bound, decides.
- **score z** z_k = mean_i g_ik / (sd_k(g) / sqrt n), which is about N(0, 1) for n independent exact draws. It finds
  draws whose location is off, and funnels the particles do not enter (SVGD on the centred eight schools: 9.7).

The study (2026-11-26, SVGD's defaults, seed 0, the 13 posteriordb posteriors; results/svgd_stein_check.md):
SVGD's smallest s_k was 0.14-0.35 where its sds were 0.64-2.7 reference sds off (diamonds, the non-centred eight
schools), 0.51 on logmesquite_logvas (0.36 off), 0.58-0.86 on the eight it fits within 0.25; the two it misses in
location have z = 9.7 (centred eight schools) and 6.0 (gp_pois_regr), the others <= 1.4. On 50 subsets of 100
reference draws per posterior (exact draws, the negative control) none was flagged on the 11 near-Gaussian
posteriors, 3 and 4 of 50 on the two heavy-tailed ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

SD_TOLERANCE = 0.25
SPREAD_LOW, SPREAD_HIGH = (1.0 - SD_TOLERANCE) ** 2, 1.0 / (1.0 - SD_TOLERANCE) ** 2
"""Spreads (variance ratios) outside these bounds are flagged: sds more than 25% short of the posterior's, or
longer by as much in ratio (0.5625 and 1.78). Chosen on the study above (one seed, in sample): it flags exactly
the five posteriors where SVGD's sd or mean errors exceed 0.25 reference sds."""
SPREAD_SE = 3.0
"""A flagged spread must also be this many standard errors from 1, so that noise alone rarely flags it."""
SCORE_Z = 4.5
"""|z_k| above this flags a location: for 26 coordinates of exact draws the chance is about 2e-4."""


def stein_checks(w: Tensor, grad: Tensor) -> dict[str, float]:
    """The module's statistics for draws ``w`` (n, d) and grad log p at them (n, d), as the run's metrics:
    stein_spread_min and stein_spread_max over the coordinates, stein_spread_flagged (how many coordinates are
    flagged) and stein_score_zmax."""
    n = w.shape[0]
    terms = -(w - w.mean(0)) * grad  # (n, d): their mean is the spread
    spread = terms.mean(0)
    spread_se = terms.std(0) / n ** 0.5
    outside = (spread < SPREAD_LOW) | (spread > SPREAD_HIGH)
    flagged = outside & ((spread - 1.0).abs() > SPREAD_SE * spread_se)
    score_z = grad.mean(0) / (grad.std(0) / n ** 0.5)
    return {"stein_spread_min": float(spread.min()), "stein_spread_max": float(spread.max()),
            "stein_spread_flagged": float(flagged.sum()), "stein_score_zmax": float(score_z.abs().max())}


def stein_warnings(metrics: dict[str, float]) -> list[str]:
    """Plain-language warnings from :func:`stein_checks`'s metrics (none where they are absent)."""
    out = []
    flagged = metrics.get("stein_spread_flagged", 0.0)
    if flagged > 0:
        out.append(f"the draws' spread fails Stein's identity along {flagged:.0f} coordinate(s): their variance there is "
                   f"{metrics['stein_spread_min']:.3g} to {metrics['stein_spread_max']:.3g} of the posterior's (outside "
                   f"[{SPREAD_LOW:.3g}, {SPREAD_HIGH:.3g}]), so their sds are unreliable; use more particles or an MCMC method")
    zmax = metrics.get("stein_score_zmax", 0.0)
    if zmax > SCORE_Z:
        out.append(f"stein_score_zmax = {zmax:.3g} > {SCORE_Z}: the mean gradient of log p over the draws is far from "
                   f"zero, so they are not where the posterior is (a funnel's neck they did not enter, or a location "
                   f"still moving); use an MCMC method")
    return out
