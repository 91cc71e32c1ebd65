"""Evaluation of trained VAEs: the test ELBO and the importance-sampling log-likelihood.

    test_elbo  mean over test images of the method's bound (one sample each)
    test_nll   -mean_i log (1/k) sum_j w_ij,  w_ij the method's importance weights for image i
               (the log-mean-exp is taken in log space; Zhang (2018) uses k = 1000)

The k samples are drawn in chunks so memory stays bounded: images are repeated ``chunk`` times
and passed through the bound as one batch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from bayesx.errors import BayesxError


def _batches(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def test_elbo(model, bound, x: Tensor, batch_size: int = 500) -> float:
    was_training = bound.training, model.training
    model.eval(), bound.eval()
    total = 0.0
    with torch.no_grad():
        for rows in _batches(x.shape[0], batch_size):
            total += float(bound.objective(model, x[rows]).sum())
    model.train(was_training[1]), bound.train(was_training[0])
    return total / x.shape[0]


def log_marginal_estimates(model, bound, x: Tensor, k: int, chunk: int = 100) -> Tensor:
    """log (1/k) sum_j w_j for each image of x (B,) from k importance samples."""
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise BayesxError(f"eval.k must be an integer >= 1 (importance samples per image), got {k!r}; set eval.k=1000")
    parts = []
    for start in range(0, k, chunk):
        m = min(chunk, k - start)
        repeated = x.repeat(m, *([1] * (x.dim() - 1)))  # (m * B, ...)
        parts.append(bound.log_weight(model, repeated).view(m, x.shape[0]).detach())
    log_w = torch.cat(parts, 0)
    return torch.logsumexp(log_w, 0) - math.log(k)


def test_nll(model, bound, x: Tensor, k: int = 1000, batch_size: int = 100, chunk: int = 100,
             progress=None) -> float:
    """-(1/n) sum_i log p_hat(x_i) with k importance samples per image."""
    was_training = bound.training, model.training
    model.eval(), bound.eval()
    total = 0.0
    with torch.no_grad():
        for rows in _batches(x.shape[0], batch_size):
            total -= float(log_marginal_estimates(model, bound, x[rows], k, chunk).sum())
            if progress is not None:
                progress.update(rows.stop - rows.start)
    model.train(was_training[1]), bound.train(was_training[0])
    return total / x.shape[0]
