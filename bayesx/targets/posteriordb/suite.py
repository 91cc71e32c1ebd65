"""The posteriors of the suite: bayesx's name for each, the posteriordb posterior it is, and its file.

Names are posteriordb's model names (``sblri_blr`` for the ``blr`` model on the ``sblri`` data). Each
posterior's data and gold-standard reference draws are in ``data/<file>.npz`` (written by
experiments/vendor_posteriordb.py). ``eight_schools_centered`` has no reference of its own in
posteriordb; it is the same posterior of (theta, mu, tau) as ``eight_schools_noncentered`` in another
parametrization, so it shares that posterior's reference draws (file ``eight_schools``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SuiteEntry:
    posterior: str  # posteriordb's posterior name, <data>-<model>
    file: str  # data/<file>.npz
    dim: int  # unconstrained dimension
    shape: str  # what makes it hard, in a few words
    max_draws: int = 10_000  # reference draws kept (of posteriordb's 10,000)
    float64: bool = False  # keep the reference draws in float64 (where unconstraining them is ill-conditioned)
    coordinates: tuple[str, ...] | None = None  # names of the unconstrained coordinates; None: the constrained
    # names with the last (a positive scale) as log(...)


def _indexed(name: str, n: int) -> tuple[str, ...]:
    return tuple(f"{name}[{i}]" for i in range(1, n + 1))


SUITE: dict[str, SuiteEntry] = {
    "eight_schools_noncentered": SuiteEntry("eight_schools-eight_schools_noncentered", "eight_schools", 10,
                                            "hierarchical, non-centred",
                                            coordinates=(*_indexed("theta_trans", 8), "mu", "log(tau)")),
    "eight_schools_centered": SuiteEntry("eight_schools-eight_schools_noncentered", "eight_schools", 10,
                                         "hierarchical, centred: a funnel in (theta, log tau)"),
    "diamonds": SuiteEntry("diamonds-diamonds", "diamonds", 26, "regression, 24 strongly correlated predictors, N=5000",
                           max_draws=4_000),
    "arK": SuiteEntry("arK-arK", "arK", 7, "AR(5) time series, positive scale"),
    "arma11": SuiteEntry("arma-arma11", "arma11", 4, "ARMA(1,1) time series, recursive errors"),
    "garch11": SuiteEntry("garch-garch11", "garch11", 4, "GARCH(1,1), bounds depending on another parameter",
                          coordinates=("mu", "log(alpha0)", "logit(alpha1)", "logit(beta1/(1-alpha1))")),
    "gp_pois_regr": SuiteEntry("gp_pois_regr-gp_pois_regr", "gp_pois_regr", 13,
                               "Gaussian process, Poisson likelihood, Cholesky of the kernel", float64=True,
                               coordinates=("log(rho)", "log(alpha)", *_indexed("f_tilde", 11))),
    "low_dim_gauss_mix": SuiteEntry("low_dim_gauss_mix-low_dim_gauss_mix", "low_dim_gauss_mix", 5,
                                    "two-component normal mixture, ordered means",
                                    coordinates=("mu[1]", "log(mu[2]-mu[1])", "log(sigma[1])", "log(sigma[2])",
                                                 "logit(theta)")),
    "kidscore_interaction": SuiteEntry("kidiq-kidscore_interaction", "kidscore_interaction", 5,
                                       "regression with an interaction, strongly correlated"),
    "logmesquite_logvas": SuiteEntry("mesquite-logmesquite_logvas", "logmesquite_logvas", 8,
                                     "log-log regression, small N, flat priors"),
    "sblri_blr": SuiteEntry("sblri-blr", "sblri_blr", 6, "Bayesian linear regression"),
    "kilpisjarvi": SuiteEntry("kilpisjarvi_mod-kilpisjarvi", "kilpisjarvi", 3,
                              "linear trend on uncentred years: intercept and slope correlated near -1"),
    "hmm_example": SuiteEntry("hmm_example-hmm_example", "hmm_example", 4,
                              "two-state hidden Markov model, simplexes and positive ordered means",
                              coordinates=("logit(theta1[1])", "logit(theta2[1])", "log(mu[1])", "log(mu[2]-mu[1])")),
}

NAMES = tuple(SUITE)
