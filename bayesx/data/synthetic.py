"""The synthetic logistic-regression data set of the "Deep MCMC" experiments.

``n_features`` standard normal features; the first ``n_correlated`` are equicorrelated with
correlation ``rho`` (built as ``sqrt(rho) * common + sqrt(1 - rho) * independent``), the rest are
independent. The true coefficients are drawn from Uniform[-beta_scale, beta_scale] (the paper does not
state the distribution; its author's thesis uses U[-1, 1], our default), and each label is
Bernoulli(sigmoid(x . beta)). Everything comes from one NumPy Generator seeded with ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from scipy.special import expit

from bayesx.data.classification import ClassificationData
from bayesx.settings import AtLeast, Between, InvalidSetting, Settings, takes


@dataclass(frozen=True)
class SyntheticSettings(Settings):
    seed: Annotated[int, AtLeast(0)] = 0
    n_features: Annotated[int, AtLeast(1)] = 500
    n_correlated: Annotated[int, AtLeast(0)] = 50
    rho: Annotated[float, Between(0.0, 1.0)] = 0.85  # 0 < rho < 1
    n_train: Annotated[int, AtLeast(1)] = 550
    n_test: Annotated[int, AtLeast(1)] = 150
    beta_scale: Annotated[float, AtLeast(0.0)] = 1.0  # true beta ~ U[-beta_scale, beta_scale]

    def check(self):
        if self.n_correlated > self.n_features:
            raise InvalidSetting("n_correlated", f"({self.n_correlated}) is larger than data.n_features "
                                 f"({self.n_features}); set it <= n_features")


def make_synthetic(seed: int = 0, n_features: int = 500, n_correlated: int = 50, rho: float = 0.85,
                   n_rows: int = 700, beta_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (x, y, beta) for ``n_rows`` rows: features (n, p), labels 0/1 (n,), true beta (p,)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_rows, n_features))
    common = rng.standard_normal((n_rows, 1))
    x[:, :n_correlated] = np.sqrt(rho) * common + np.sqrt(1.0 - rho) * x[:, :n_correlated]
    beta = rng.uniform(-beta_scale, beta_scale, size=n_features)
    y = (rng.random(n_rows) < expit(x @ beta)).astype(np.float64)
    return x, y, beta


@takes(SyntheticSettings, "data")
def load_synthetic(seed: int, n_features: int, n_correlated: int, rho: float, n_train: int, n_test: int,
                   beta_scale: float) -> ClassificationData:
    """Generate the synthetic set; the first ``n_train`` rows train, the next ``n_test`` test."""
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
