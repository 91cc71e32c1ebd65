"""The posteriors of the suite: bayesx's name for each, the posteriordb posterior it is, and its file.

Names are posteriordb's model names (``sblri_blr`` and ``sblrc_blr`` for the ``blr`` model on the ``sblri`` and
``sblrc`` data; ``nes1972`` ... ``nes2000`` for the ``nes`` model on each year's data). Each
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
    loop_steps: int = 0  # iterations of the torch density's Python loop over time (0: no loop)
    tier: int = 1  # 1: posteriordb's posteriors; 2: the second tier, where a run takes minutes (TIER2)
    kind: str = ""  # tier 2: the kind of model it stands for in the suite
    compared_on_log: tuple[str, ...] = ()  # constrained parameters (by name, without the index) whose reference errors
    # are taken on their logarithm: scales under half-Cauchy priors whose marginals keep a Cauchy tail, so that their
    # mean and sd do not exist and a sample's are set by its largest draw (Posterior.compared)


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
    # --- loops over time: the Stan program's loop is a Python loop in the torch density -----------------------
    "hmm_drive_0": SuiteEntry("bball_drive_event_0-hmm_drive_0", "hmm_drive_0", 6,
                              "two-state HMM over 416 steps (a Python loop), exponential emissions; transition "
                              "probabilities near 0 and 1, positive-ordered rates",
                              coordinates=("logit(theta1[1])", "logit(theta2[1])", "log(phi[1])", "log(phi[2]-phi[1])",
                                           "log(lambda[1])", "log(lambda[2]-lambda[1])"), loop_steps=415),
    "hmm_drive_1": SuiteEntry("bball_drive_event_1-hmm_drive_1", "hmm_drive_1", 6,
                              "two-state HMM over 416 steps (a Python loop), normal emissions; ordered means "
                              "with sds of 0.006-0.011, transition probabilities near 0 and 1",
                              coordinates=("logit(theta1[1])", "logit(theta2[1])", "phi[1]", "log(phi[2]-phi[1])",
                                           "lambda[1]", "log(lambda[2]-lambda[1])"), loop_steps=415),
    "lotka_volterra": SuiteEntry("hudson_lynx_hare-lotka_volterra", "lotka_volterra", 8,
                                 "predator-prey ODE by fixed-step RK4 (400 steps, a Python loop), lognormal errors; "
                                 "rates correlated -0.94, scales 0.004 to 3",
                                 coordinates=(*(f"log(theta[{i}])" for i in range(1, 5)), "log(z_init[1])",
                                              "log(z_init[2])", "log(sigma[1])", "log(sigma[2])"), loop_steps=400),
    "one_comp_mm_elim_abs": SuiteEntry("one_comp_mm_elim_abs-one_comp_mm_elim_abs", "one_comp_mm_elim_abs", 4,
                                       "pharmacokinetic ODE (Michaelis-Menten elimination) by fixed-step RK4 "
                                       "(400 steps, a Python loop); K_m and V_m correlated 0.95, a long tail",
                                       coordinates=("log(k_a)", "log(K_m)", "log(V_m)", "log(sigma)"), loop_steps=400),
    # --- a Gaussian process ---------------------------------------------------------------------------------
    "gp_regr": SuiteEntry("gp_pois_regr-gp_regr", "gp_regr", 3,
                          "Gaussian-process regression, marginal likelihood through the Cholesky of the kernel",
                          coordinates=("log(rho)", "log(alpha)", "log(sigma)")),
    # --- regressions (y ~ normal(X beta, sigma), flat priors unless stated) ---------------------------------
    "sblrc_blr": SuiteEntry("sblrc-blr", "sblrc_blr", 6, "linear regression, coefficients correlated 0.8"),
    "earn_height": SuiteEntry("earnings-earn_height", "earn_height", 3,
                              "earnings in dollars on uncentred height: sds 144 and 9,700, intercept and "
                              "slope correlated -0.998"),
    "log10earn_height": SuiteEntry("earnings-log10earn_height", "log10earn_height", 3,
                                   "log10 earnings on uncentred height, correlated -0.998"),
    "logearn_height": SuiteEntry("earnings-logearn_height", "logearn_height", 3,
                                 "log earnings on uncentred height, correlated -0.998"),
    "logearn_height_male": SuiteEntry("earnings-logearn_height_male", "logearn_height_male", 4,
                                      "log earnings on uncentred height and sex, correlated -0.998"),
    "logearn_logheight_male": SuiteEntry("earnings-logearn_logheight_male", "logearn_logheight_male", 4,
                                         "log earnings on log height (uncentred: correlation -0.9999) and sex"),
    "logearn_interaction": SuiteEntry("earnings-logearn_interaction", "logearn_interaction", 5,
                                      "log earnings, uncentred height-sex interaction, correlated -0.999"),
    "logearn_interaction_z": SuiteEntry("earnings-logearn_interaction_z", "logearn_interaction_z", 5,
                                        "log earnings, standardized height-sex interaction (well conditioned)"),
    "kidscore_momhs": SuiteEntry("kidiq-kidscore_momhs", "kidscore_momhs", 3, "regression on one binary predictor"),
    "kidscore_momiq": SuiteEntry("kidiq-kidscore_momiq", "kidscore_momiq", 3,
                                 "regression on uncentred IQ, correlated -0.99"),
    "kidscore_momhsiq": SuiteEntry("kidiq-kidscore_momhsiq", "kidscore_momhsiq", 4,
                                   "regression on uncentred IQ and a binary predictor, correlated -0.95"),
    "kidscore_interaction_c": SuiteEntry("kidiq_with_mom_work-kidscore_interaction_c", "kidscore_interaction_c", 5,
                                         "interaction of centred predictors (well conditioned)"),
    "kidscore_interaction_c2": SuiteEntry("kidiq_with_mom_work-kidscore_interaction_c2", "kidscore_interaction_c2", 5,
                                          "interaction of predictors centred on reference points"),
    "kidscore_interaction_z": SuiteEntry("kidiq_with_mom_work-kidscore_interaction_z", "kidscore_interaction_z", 5,
                                         "interaction of standardized predictors (well conditioned)"),
    "kidscore_mom_work": SuiteEntry("kidiq_with_mom_work-kidscore_mom_work", "kidscore_mom_work", 5,
                                    "regression on a four-level factor (indicators)"),
    "mesquite": SuiteEntry("mesquite-mesquite", "mesquite", 8,
                           "regression on raw plant measurements, N=46, flat priors, sds 30 to 220"),
    "logmesquite": SuiteEntry("mesquite-logmesquite", "logmesquite", 8, "log-log regression, N=46, flat priors"),
    "logmesquite_logva": SuiteEntry("mesquite-logmesquite_logva", "logmesquite_logva", 5,
                                    "log-log regression on canopy volume and area, correlated -0.96"),
    "logmesquite_logvash": SuiteEntry("mesquite-logmesquite_logvash", "logmesquite_logvash", 7,
                                      "log-log regression, N=46, correlated -0.95"),
    "logmesquite_logvolume": SuiteEntry("mesquite-logmesquite_logvolume", "logmesquite_logvolume", 3,
                                        "log-log regression on canopy volume"),
    **{f"nes{year}": SuiteEntry(f"nes{year}-nes", f"nes{year}", 10,
                                f"party identification on 8 predictors (age as a factor), National Election "
                                f"Study {year}", max_draws=4_000) for year in range(1972, 2001, 4)},
}

NAMES = tuple(SUITE)
"""The first tier: posteriordb's posteriors (the ``experiment=posteriordb`` sweep, docs/posteriordb.md's table)."""


def _tier2(name: str, dim: int, kind: str, shape: str, coordinates: tuple[str, ...], loop_steps: int = 0,
           compared_on_log: tuple[str, ...] = ()) -> SuiteEntry:
    return SuiteEntry(f"bayesx-tier2-{name}", f"tier2_{name}", dim, shape, coordinates=coordinates,
                      loop_steps=loop_steps, tier=2, kind=kind, compared_on_log=compared_on_log)


# The second tier: posteriors where a run takes minutes, written as users write them (tier2_models.py), transcribed
# again (tier2_xp.py), on data simulated by experiments/make_tier2.py (seeded); no published reference exists, so
# each reference is a long NumPyro NUTS run on the JAX transcription, how it was made and checked stored with it
# (``Posterior.info``; docs/models.md).
TIER2: dict[str, SuiteEntry] = {
    "sv_latent": _tier2("sv_latent", 203, "stochastic volatility with latent states",
                        "stochastic volatility, 200 latent log-volatilities (non-centred, a Python loop over time), "
                        "phi near 1", ("mu", "logit((phi+1)/2)", "log(sigma)", *_indexed("h_std", 200)),
                        loop_steps=199),
    "local_level": _tier2("local_level", 502, "latent states (linear Gaussian state space)",
                          "local-level model, 500 latent states as a random walk (a Python loop over time); the "
                          "states' posterior given the scales is Gaussian (Kalman smoother)",
                          ("log(sigma_eps)", "log(sigma_eta)", *_indexed("x", 500)), loop_steps=499),
    "hier_normal": _tier2("hier_normal", 604, "hierarchical, 600 groups",
                          "hierarchical normal regression, 600 groups of 1-12 observations (non-centred), 3,000 rows",
                          ("mu", "beta", "log(tau)", "log(sigma)", *_indexed("z", 600))),
    "hier_logistic": _tier2("hier_logistic", 505, "hierarchical GLM, 500 groups",
                            "hierarchical logistic regression, 500 groups (non-centred), 3 predictors, 5,000 rows",
                            ("mu", *_indexed("beta", 3), "log(tau)", *_indexed("z", 500))),
    "logistic_100k": _tier2("logistic_100k", 21, "GLM on 100,000 rows",
                            "logistic regression on 100,000 rows and 20 correlated predictors (the design made from "
                            "a seed at load time)", ("alpha", *_indexed("beta", 20))),
    "gp_latent_poisson": _tier2("gp_latent_poisson", 252, "latent Gaussian process, 250 latent values",
                                "latent Matern-3/2 Gaussian process (non-centred) under Poisson counts at 250 inputs",
                                ("mu", "log(alpha)", *_indexed("z", 250))),
    "horseshoe": _tier2("horseshoe", 444, "sparse regression (regularized horseshoe), 220 coefficients",
                        "regularized horseshoe, 220 coefficients on 100 rows (p > n), 8 of them non-zero: funnels "
                        "in (tau, lambda, z)",
                        ("beta0", "log(sigma)", "log(tau)", "log(caux)", *_indexed("z", 220),
                         *_indexed("log(lambda)", 220)), compared_on_log=("tau", "lambda")),
    "irt_2pl": _tier2("irt_2pl", 1042, "1,000+ dimensions",
                      "two-parameter item response, 1,000 students x 20 items: 1,042 parameters",
                      (*_indexed("theta", 1000), *_indexed("log(a)", 20), *_indexed("b", 20), "mu_b", "log(sigma_b)")),
}
TIER2_NAMES = tuple(TIER2)
ENTRIES: dict[str, SuiteEntry] = {**SUITE, **TIER2}
ALL_NAMES = tuple(ENTRIES)
