"""The data of the stochastic-volatility and mixture examples (examples/sv_returns.npz, examples/mixture_data.npz),
simulated with fixed seeds:

    python examples/make_sv_and_mixture.py
"""

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def returns(n: int = 150, mu: float = -1.0, phi: float = 0.95, sigma: float = 0.25, seed: int = 1) -> np.ndarray:
    """Daily returns with latent log-volatility h_t = mu + phi (h_{t-1} - mu) + sigma z_t, y_t ~ N(0, exp(h_t / 2))."""
    rng = np.random.default_rng(seed)
    h = np.empty(n)
    h[0] = mu + sigma / np.sqrt(1 - phi**2) * rng.standard_normal()
    for t in range(1, n):
        h[t] = mu + phi * (h[t - 1] - mu) + sigma * rng.standard_normal()
    return np.exp(h / 2) * rng.standard_normal(n)


def mixture(n: int = 300, seed: int = 2) -> np.ndarray:
    """Three normal components, weights 0.5, 0.3, 0.2, means -3, 0, 4, sds 1, 0.7, 1.5."""
    rng = np.random.default_rng(seed)
    component = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    return np.array([-3.0, 0.0, 4.0])[component] + np.array([1.0, 0.7, 1.5])[component] * rng.standard_normal(n)


if __name__ == "__main__":
    np.savez(HERE / "sv_returns.npz", y=returns())
    np.savez(HERE / "mixture_data.npz", x=mixture())
