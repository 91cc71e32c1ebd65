"""Optimal-transport distances between two sets of draws, by POT (Flamary et al. 2021).

``sinkhorn_distance`` is the research journal's d_M(a, b) (sec. 3.5.2, eq. 238; Cuturi 2013): uniform
weights on the n and m draws, the cost M_ij = |a_i - b_j| (Euclidean), optionally divided by its
largest entry as POT's examples do, and the transport cost <P, M> of the entropy-regularized plan P
with regularization ``reg``, found by Sinkhorn's matrix scaling. Two independent samples of the same
distribution are not at distance 0: compare with that floor (``sinkhorn_floor``).
"""

from __future__ import annotations

import numpy as np


def sinkhorn_distance(a: np.ndarray, b: np.ndarray, reg: float = 0.01, normalize_cost: bool = True) -> float:
    import ot

    cost = ot.dist(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), metric="euclidean")
    if normalize_cost:
        cost = cost / cost.max()
    weights_a = np.full(cost.shape[0], 1.0 / cost.shape[0])
    weights_b = np.full(cost.shape[1], 1.0 / cost.shape[1])
    return float(ot.sinkhorn2(weights_a, weights_b, cost, reg, numItermax=10000))


def grid_sample(log_density, box: tuple[float, float, float, float], n: int, rng: np.random.Generator,
                resolution: int = 400) -> np.ndarray:
    """n draws from a 2-D density discretized on a grid over box = (x0, x1, y0, y1): a cell chosen with
    probability proportional to the density at its centre, then a uniform point in the cell (the
    journal's "grid-discretized ground truth")."""
    xs = np.linspace(box[0], box[1], resolution + 1)
    ys = np.linspace(box[2], box[3], resolution + 1)
    cx, cy = 0.5 * (xs[1:] + xs[:-1]), 0.5 * (ys[1:] + ys[:-1])
    gx, gy = np.meshgrid(cx, cy, indexing="ij")
    log_p = log_density(np.stack([gx.ravel(), gy.ravel()], axis=1))
    p = np.exp(log_p - log_p.max())
    cells = rng.choice(p.size, size=n, p=p / p.sum())
    dx, dy = xs[1] - xs[0], ys[1] - ys[0]
    i, j = np.unravel_index(cells, gx.shape)
    return np.stack([xs[i] + dx * rng.random(n), ys[j] + dy * rng.random(n)], axis=1)
