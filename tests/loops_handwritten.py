"""A hand-written C hidden-Markov forward pass and its gradient: the yardstick for the loop-compiled C
(tests/test_compiled_loops.py).

The density is :func:`hmm_log_prob`'s: q (6,) -> two transition rows log_theta[j] = log_softmax(q[2j:2j+2]),
exponential-emission rates r_k = exp(q[4+k]) for each of two observed sequences (hmm_drive_0's u_t and v_t share
the rates here), the forward algorithm gamma_t[k] = logsumexp_j(gamma_(t-1)[j] + log_theta[j, k]) + e_t[k],
e_t[k] = 2 log r_k - r_k (u_t + v_t), log p = logsumexp_k gamma_(N-1)[k] - |q|^2 / 2. The gradient is the reverse
pass written by hand: with c_t[k] = gamma_t[k] - e_t[k] and the posterior weights
w_t[j, k] = exp(gamma_(t-1)[j] + log_theta[j, k] - c_t[k]), the adjoint gbar_(t-1)[j] = sum_k gbar_t[k] w_t[j, k]
runs backwards from gbar_(N-1) = softmax(gamma_(N-1)); log_theta's adjoint sums gbar_t[k] w_t[j, k] over t and
e_t's is gbar_t, each chained through log_softmax and exp. One exp and one log1p per state and step forward, two exps
per pair backward: what a careful C programmer writes.
"""

from __future__ import annotations

import torch

SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stddef.h>

static double lse2(double a, double b) {
    double m = a > b ? a : b, d = a > b ? b - a : a - b;
    return m + log1p(exp(d));
}

int hmm_density(const double *q, double *g, double *lp, double *gamma, const double *x, int64_t n) {
    double lt[2][2], sm[2][2], r[2], lr[2];
    for (int j = 0; j < 2; j++) {
        double l = lse2(q[2 * j], q[2 * j + 1]);
        for (int k = 0; k < 2; k++) { lt[j][k] = q[2 * j + k] - l; sm[j][k] = exp(lt[j][k]); }
    }
    for (int k = 0; k < 2; k++) { r[k] = exp(q[4 + k]); lr[k] = 2 * q[4 + k]; }
    for (int k = 0; k < 2; k++) gamma[k] = lr[k] - r[k] * x[0];
    for (int64_t t = 1; t < n; t++) {
        const double *p = gamma + 2 * (t - 1);
        double *c = gamma + 2 * t;
        for (int k = 0; k < 2; k++) c[k] = lse2(p[0] + lt[0][k], p[1] + lt[1][k]) + lr[k] - r[k] * x[t];
    }
    const double *last = gamma + 2 * (n - 1);
    double total = lse2(last[0], last[1]);
    double gb[2] = {exp(last[0] - total), exp(last[1] - total)}, ltb[2][2] = {{0, 0}, {0, 0}}, rb[2] = {0, 0};
    for (int64_t t = n - 1; t >= 1; t--) {
        const double *p = gamma + 2 * (t - 1), *c = gamma + 2 * t;
        double prev[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            double e = lr[k] - r[k] * x[t];
            rb[k] += gb[k] * (2 / r[k] - x[t]);
            double ck = c[k] - e;
            for (int j = 0; j < 2; j++) {
                double v = gb[k] * exp(p[j] + lt[j][k] - ck);
                prev[j] += v;
                ltb[j][k] += v;
            }
        }
        gb[0] = prev[0]; gb[1] = prev[1];
    }
    for (int k = 0; k < 2; k++) rb[k] += gb[k] * (2 / r[k] - x[0]);
    double sq = 0;
    for (int i = 0; i < 6; i++) sq += q[i] * q[i];
    for (int j = 0; j < 2; j++) {
        double s = ltb[j][0] + ltb[j][1];
        for (int k = 0; k < 2; k++) g[2 * j + k] = ltb[j][k] - sm[j][k] * s - q[2 * j + k];
    }
    for (int k = 0; k < 2; k++) g[4 + k] = rb[k] * r[k] - q[4 + k];
    *lp = total - 0.5 * sq;
    return 0;
}
"""


def hmm_log_prob(x: torch.Tensor):
    """The same density as plain PyTorch with a Python loop over time (the user's way): x = u + v, (N,)."""
    steps = x.shape[0]

    def log_prob(q):
        log_theta = torch.log_softmax(q[..., :4].reshape(*q.shape[:-1], 2, 2), -1)
        rate = torch.exp(q[..., 4:6])
        gamma = 2 * q[..., 4:6] - rate * x[0]
        for t in range(1, steps):
            gamma = torch.logsumexp(gamma[..., :, None] + log_theta, -2) + 2 * q[..., 4:6] - rate * x[t]
        return torch.logsumexp(gamma, -1) - 0.5 * (q * q).sum(-1)

    return log_prob
