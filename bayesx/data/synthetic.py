"""The synthetic logistic-regression data set of the "Deep MCMC" experiments.

``n_features`` standard normal features; the first ``n_correlated`` are equicorrelated with
correlation ``rho`` (built as ``sqrt(rho) * common + sqrt(1 - rho) * independent``), the rest are
independent. The true coefficients are drawn from Uniform[-beta_scale, beta_scale] (the paper does not
state the distribution; its author's thesis uses U[-1, 1], our default), and each label is
Bernoulli(sigmoid(x . beta)). Everything comes from one NumPy Generator seeded with ``seed``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from bayesx.data._checks import check_float, check_int, check_seed
from bayesx.data.classification import ClassificationData
from bayesx.errors import BayesxError


def make_synthetic(
    seed: int = 0,
    n_features: int = 500,
    n_correlated: int = 50,
    rho: float = 0.85,
    n_rows: int = 700,
    beta_scale: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (x, y, beta) for ``n_rows`` rows: features (n, p), labels 0/1 (n,), true beta (p,)."""
    seed = check_seed(seed)
    n_features = check_int(n_features, "data.n_features", minimum=1)
    n_correlated = check_int(n_correlated, "data.n_correlated", minimum=0)
    n_rows = check_int(n_rows, "data.n_rows", minimum=1)
    rho = check_float(rho, "data.rho")
    beta_scale = check_float(beta_scale, "data.beta_scale")
    if n_correlated > n_features:
        raise BayesxError(
            f"data.n_correlated ({n_correlated}) is larger than data.n_features ({n_features}); "
            "set data.n_correlated <= data.n_features"
        )
    if not 0.0 <= rho < 1.0:
        raise BayesxError(f"data.rho must satisfy 0 <= rho < 1, got {rho}; set data.rho to e.g. 0.85")
    if beta_scale < 0.0:
        raise BayesxError(f"data.beta_scale must be >= 0, got {beta_scale}; set data.beta_scale to e.g. 1.0")

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, n_features))
    common = rng.standard_normal((n_rows, 1))
    x[:, :n_correlated] = np.sqrt(rho) * common + np.sqrt(1.0 - rho) * x[:, :n_correlated]
    beta = rng.uniform(-beta_scale, beta_scale, size=n_features)
    y = (rng.random(n_rows) < expit(x @ beta)).astype(np.float64)
    return x, y, beta


def load_synthetic(
    seed: int = 0,
    n_features: int = 500,
    n_correlated: int = 50,
    rho: float = 0.85,
    n_train: int = 550,
    n_test: int = 150,
    beta_scale: float = 1.0,
) -> ClassificationData:
    """Generate the synthetic set; the first ``n_train`` rows train, the next ``n_test`` test."""
    n_train = check_int(n_train, "data.n_train", minimum=1)
    n_test = check_int(n_test, "data.n_test", minimum=1)
    x, y, _ = make_synthetic(
        seed=seed,
        n_features=n_features,
        n_correlated=n_correlated,
        rho=rho,
        n_rows=n_train + n_test,
        beta_scale=beta_scale,
    )
    description = (
        f"synthetic logistic regression: {n_features} N(0,1) features, the first {n_correlated} "
        f"equicorrelated (rho={rho}), beta ~ U[-{beta_scale}, {beta_scale}], seed={seed} "
        f"(n_train={n_train}, n_test={n_test})"
    )
    return ClassificationData(
        name="synthetic",
        x_train=x[:n_train],
        y_train=y[:n_train],
        x_test=x[n_train:],
        y_test=y[n_train:],
        description=description,
        source="generated",
    )
