"""The published experiment's ingredients (Deep MCMC sec. 4.2, from the authors' public code).

    f(s)  = sum_k w_k phi(|s - c_k|; 0.05),  phi(r; sd) = exp(-r^2 / (2 sd^2)) / (sqrt(2 pi) sd)
            c = (0.3,0.3), (0.7,0.3), (0.7,0.7), (0.3,0.7);  w = 2, -3, 3, -2
    u0(s) = -1 on the rectangle 0.6 <= x <= 0.8, 0.2 <= y <= 0.4 and on the quarter ring
            0.5 <= |s - (0.8, 0.2)| <= 0.6, x <= 0.8, y >= 0.2; 0 elsewhere
    y     = O p(exp(u0)) + eta,  eta ~ N(0, sigma^2 I),  sigma = max|u0| / SNR,  SNR = 10
    sensors on the grid {0.2, 0.3, 0.4, 0.5, 0.6}^2 (25 points)

(The source's normalizing constant is that of a one-dimensional normal density, as in the
authors' code.)
"""

from __future__ import annotations

import numpy as np

PLUME_CENTRES = np.array([[0.3, 0.3], [0.7, 0.3], [0.7, 0.7], [0.3, 0.7]])
PLUME_WEIGHTS = np.array([2.0, -3.0, 3.0, -2.0])
PLUME_SD = 0.05
SENSOR_GRID = np.linspace(0.2, 0.6, 5)
SNR = 10.0


def source(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The source term f at points (x, y) of any matching shape."""
    x, y = np.asarray(x), np.asarray(y)
    total = np.zeros(np.broadcast(x, y).shape)
    for (cx, cy), weight in zip(PLUME_CENTRES, PLUME_WEIGHTS):
        r2 = (x - cx) ** 2 + (y - cy) ** 2
        total = total + weight * np.exp(-0.5 * r2 / PLUME_SD**2) / (np.sqrt(2.0 * np.pi) * PLUME_SD)
    return total


def true_field(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The true log-transmissivity u0: -1 on a rectangle and a quarter ring, 0 elsewhere."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    rectangle = (x >= 0.6) & (x <= 0.8) & (y >= 0.2) & (y <= 0.4)
    r2 = (x - 0.8) ** 2 + (y - 0.2) ** 2
    ring = (r2 >= 0.5**2) & (r2 <= 0.6**2) & (x <= 0.8) & (y >= 0.2)
    return np.where(rectangle | ring, -1.0, 0.0)


def sensor_points() -> np.ndarray:
    """(25, 2) observation locations, x varying fastest."""
    xx, yy = np.meshgrid(SENSOR_GRID, SENSOR_GRID)
    return np.column_stack([xx.ravel(), yy.ravel()])


def default_noise_sd(snr: float = SNR) -> float:
    """sigma = max|u0| / SNR (= 0.1 for SNR 10)."""
    return 1.0 / snr
