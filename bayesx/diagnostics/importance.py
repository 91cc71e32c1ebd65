"""Importance weights of a fitted approximation: ELBO, evidence and Pareto k-hat.

For draws z_i ~ q and log weights l_i = log p(z_i) - log q(z_i), with p the target's unnormalized
density and Z its normalizing constant:

    elbo_final      = mean_i l_i                    <= log Z (Jensen)
    log_evidence    = log mean_i exp(l_i)           (importance sampling, q as the proposal)
    log_evidence_se = sd_i(w_i) / (sqrt(n) mean_i w_i),  w_i = exp(l_i - max l)  (delta method)
    psis_khat       = the shape estimate of a generalized Pareto fit to the largest weights
                      (Pareto smoothed importance sampling, Vehtari, Simpson, Gelman, Yao and Gabry),
                      from ArviZ; k-hat > 0.7 means the weights' variance is effectively infinite.
    weights_ess_fraction = (sum w~)^2 / (n sum w~^2) of the Pareto-smoothed weights w~: the share of the n
                      draws that importance sampling effectively keeps (Kong, Liu and Wong 1994's ESS, from
                      the smoothed weights as Vehtari et al. do). It is 1 where q is the posterior.

k-hat looks only at the largest weights, so it cannot see a q that is too wide: its weights p/q are bounded
(k-hat small) but uneven. For q = N(0, s^2 I_d) and p = N(0, I_d) with s > 1 the ESS fraction is
(sqrt(2 - 1/s^2) / s)^d, 0.16 for s = 1.5 in 10 dimensions, while k-hat stays below 0.5. On posteriordb
(2026-11-26, results/posteriordb_approximations_all.md) full-rank VI's sds on gp_pois_regr are 0.60
reference sds off with k-hat 0.56 and an ESS fraction of 0.11-0.13; the fits within 0.15 sds keep 0.5-0.97.
Below ESS_FRACTION_LIMIT the family warns (bayesx.methods.vi.family).

Where k-hat is below 0.7 the Pareto-smoothed weights also estimate the posterior's moments, so comparing q's own
moments with them estimates the error of q's draws (``draw_checks``), per parameter a user reads (posteriordb:
the constrained ones): the mean shift |mean_q - mean_w| / sd_w and the sd ratio sd_q / sd_w, with weights w~_i
normalized to sum 1. Both differences are linear in (1/n - w~_i), so their Monte Carlo standard errors are
sqrt(sum_i (1/n - w~_i)^2) times the weighted sd of the per-draw term (a fixed-weights approximation); a
coordinate is flagged where the shift exceeds MOMENT_TOLERANCE (a quarter of a posterior sd, the Stein check's
tolerance) or the sd ratio lies outside [1 - MOMENT_TOLERANCE, 1 / (1 - MOMENT_TOLERANCE)], and either difference
is more than MOMENT_SE standard errors from zero. On posteriordb (2026-11-26, two seeds) the shift tracked the
reference mean errors of Laplace's draws (arK 0.35 for 0.39-0.42, sblri_blr 0.41-0.43 for 0.34-0.37,
logmesquite_logvas 0.75-0.78 for 0.81-0.88) and flagged full-rank VI on gp_pois_regr (0.26-0.27).

Weighted particles (AIS, SMC, multi-path Pathfinder) are turned into draws by multinomial resampling
(``resample``; multi-path Pathfinder resamples by the Pareto-smoothed weights, ``pareto_smoothed``), with
the weights' effective sample size (sum w)^2 / sum w^2 (Kong, Liu and Wong 1994).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

from bayesx.diagnostics.lazy import arviz
from bayesx.diagnostics.stein import SD_TOLERANCE

KHAT_LIMIT = 0.7  # above this the weights' variance is effectively infinite (Vehtari et al.)
ESS_FRACTION_LIMIT = 0.25
"""Below this share of draws kept by importance sampling, q's own draws are unreliable even where k-hat is below
KHAT_LIMIT: chosen on the posteriordb study in the module docstring (Laplace, mean-field and full-rank VI, two seeds;
in sample), where every fit below it had sd errors of 0.45-0.96 reference sds and none above it more than 0.26. A
mean shift hides from it (a Gaussian q shifted by d sds keeps exp(-d^2) of the draws: 0.84 at d = 0.42, Laplace on
arK): the moment check of ``draw_checks`` finds those."""
MOMENT_TOLERANCE = SD_TOLERANCE
MOMENT_SE = 3.0


def psis_khat(log_weights: np.ndarray) -> float:
    """Pareto k-hat of the weights exp(log_weights) (NaN where it cannot be estimated)."""
    finite = np.asarray(log_weights, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size < 20:
        return float("nan")
    if np.ptp(finite) < 1e-9 * max(1.0, float(np.abs(finite).max())):
        return 0.0  # constant weights (q is the posterior up to its normalizer): no tail to fit (ArviZ would say inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(arviz().psislw(finite.copy(), reff=1.0)[1])


def pareto_smoothed(log_weights: np.ndarray) -> np.ndarray:
    """The log weights with their largest values replaced by the expected order statistics of the fitted
    generalized Pareto (PSIS; Vehtari et al.), normalized; NaN (a failed density) stays a zero weight.
    Fewer than 20 finite weights are returned as they are (too few to fit a tail)."""
    lw = np.nan_to_num(np.asarray(log_weights, dtype=np.float64).reshape(-1), nan=-np.inf)
    finite = np.isfinite(lw)
    if finite.sum() < 20:
        return lw
    smoothed = lw.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smoothed[finite] = arviz().psislw(lw[finite].copy(), reff=1.0)[0]
    return smoothed


def draw_checks(values: np.ndarray, log_weights: np.ndarray) -> dict[str, float]:
    """The checks of q's draws by their Pareto-smoothed weights (module docstring), smoothed once, for the draws'
    ``values`` (n, p) and log weights (n,): weights_ess_fraction over all n draws (a NaN log weight, a failed density,
    is a zero weight), and psis_mean_shift_max, psis_sd_ratio_min, psis_sd_ratio_max and psis_moments_flagged (how
    many coordinates are flagged) over the draws whose values and log weight are not NaN."""
    lw = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    smoothed = pareto_smoothed(lw)
    if not np.isfinite(smoothed).any():
        return {"weights_ess_fraction": float("nan")}
    w_all = np.exp(smoothed - smoothed.max())
    out = {"weights_ess_fraction": float(w_all.sum() ** 2 / (w_all * w_all).sum() / lw.size)}
    x = np.asarray(values, dtype=np.float64).reshape(lw.size, -1)
    keep = np.isfinite(x).all(1) & ~np.isnan(lw)
    x, w = x[keep], w_all[keep]
    if x.shape[0] < 20 or not w.sum() > 0:
        return out
    w = w / w.sum()
    spread = math.sqrt(float(((1.0 / len(w) - w) ** 2).sum()))  # times a term's sd: the difference's standard error
    mean_w = w @ x
    centred = x - mean_w
    var_w = w @ centred**2
    sd_w = np.sqrt(np.where(var_w > 0, var_w, np.nan))
    shift = np.abs(x.mean(0) - mean_w) / sd_w
    var_q = ((x - x.mean(0)) ** 2).mean(0)
    ratio = np.sqrt(var_q) / sd_w
    var_se = spread * np.sqrt(w @ (centred**2 - var_w) ** 2)
    low, high = 1.0 - MOMENT_TOLERANCE, 1.0 / (1.0 - MOMENT_TOLERANCE)
    flagged = (((shift > MOMENT_TOLERANCE) & (shift > MOMENT_SE * spread))
               | (((ratio < low) | (ratio > high)) & (np.abs(var_q - var_w) > MOMENT_SE * var_se)))
    return {**out, "psis_mean_shift_max": float(np.nanmax(shift)), "psis_sd_ratio_min": float(np.nanmin(ratio)),
            "psis_sd_ratio_max": float(np.nanmax(ratio)), "psis_moments_flagged": float(flagged.sum())}


def weight_summary(log_weights: np.ndarray) -> dict[str, float]:
    """elbo_final, log_evidence, log_evidence_se and psis_khat of log weights (n,); a NaN log
    weight (a density that failed) counts as a zero weight in the evidence and as NaN in the ELBO."""
    lw = np.asarray(log_weights, dtype=np.float64).reshape(-1)
    n = lw.size
    usable = np.nan_to_num(lw, nan=-np.inf)
    top = np.max(usable) if n else -np.inf
    if not np.isfinite(top):
        return {"elbo_final": float(np.mean(lw)) if n else float("nan"), "log_evidence": float("nan"),
                "log_evidence_se": float("nan"), "psis_khat": float("nan")}
    w = np.exp(usable - top)
    mean_w = w.mean()
    return {"elbo_final": float(np.mean(lw)),
            "log_evidence": float(top + math.log(mean_w)),
            "log_evidence_se": float(w.std(ddof=1) / (math.sqrt(n) * mean_w)) if n > 1 else float("nan"),
            "psis_khat": psis_khat(lw)}


def resample(draws: Tensor, log_weights: Tensor, n: int, gen: torch.Generator) -> tuple[Tensor, float]:
    """``n`` draws picked with replacement from ``draws`` (m, dim) with probabilities proportional to
    exp(log_weights) (m,), and the weights' ESS; a NaN log weight (a failed density) is a zero weight."""
    usable = torch.nan_to_num(log_weights.detach().double(), nan=-math.inf)
    w = torch.exp(usable - usable.max())
    ess = float(w.sum() ** 2 / (w * w).sum())
    pick = torch.multinomial(w.to(gen.device), n, replacement=True, generator=gen)
    return draws.detach()[pick.to(draws.device)], ess
