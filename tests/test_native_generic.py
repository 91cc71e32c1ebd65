"""The native kernels are density-agnostic: a density the package has never seen, written in C against
density.h (a Gaussian with a diagonal precision, not a logistic form), compiled with the package's own
leapfrog.h and nuts.h, moves under both kernels exactly as the mathematics says.

- Leapfrog: the C trajectory equals the leapfrog recurrence computed here in numpy, step by step, in
  single chains and in pairs (the pair path of log_prob_grad2 is absent, so it must fall back to one chain
  per task), and H at both ends is reported correctly.
- NUTS: 4,000 transitions on N(0, diag(1 / prec)) give the right means and variances within Monte-Carlo
  error (z-scores against the draws' own ESS); negative control: the same draws judged against the
  variances of a density twice as wide fail.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

from bayesx.native import build
from bayesx.native import logistic as native

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler: the native kernels could not be built")

GAUSSIAN_C = r"""
#include "DIR/common.h"
#define REAL double
#define SUFFIX f64
#define EXP exp
#define LOG log
#include "DIR/density.h"
#include "DIR/nuts.h"
#include "DIR/leapfrog.h"

/* log pi(u) = -sum prec_j u_j^2 / 2: no scratch, no pair evaluation */
static double gauss(const void *model, int k, const double *u, double *g, double *scratch, int want) {
    const double *prec = model;
    double lp = 0;
    for (int j = 0; j < k; j++) { g[j] = -prec[j] * u[j]; lp -= 0.5 * prec[j] * u[j] * u[j]; }
    return lp;
}

void gauss_leapfrog(int group, int chains, int k, const double *prec, int steps, const double *inv_mass,
                    const double *eps, double *u, double *p, double *g, double *out, double *work) {
    const DENSITY density = {gauss, NULL, prec, 0};
    leapfrog_chains_f64(1, group, chains, k, &density, steps, inv_mass, 0, eps, u, p, g, 0, out, work);
}

void gauss_nuts(int chains, int k, const double *prec, const double *inv_mass, double eps, int max_depth,
                const uint64_t *seeds, double *u, const double *p, double *g, double *lp, double *info, int *failed) {
    const DENSITY density = {gauss, NULL, prec, 0};
    nuts_chains_f64(1, 1, chains, k, &density, inv_mass, 0, eps, max_depth, seeds, u, p, g, lp, info, failed);
}
"""


@pytest.fixture(scope="module")
def gaussian_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generic")
    source = folder / "gaussian.c"
    source.write_text(GAUSSIAN_C.replace("DIR", str(build.SOURCE_DIR)))
    target = folder / "gaussian.so"
    build.build(build._compiler(), source, target)
    return ctypes.CDLL(str(target))


def ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


PREC = np.array([1.0, 4.0, 0.25, 9.0])


@needs_native
@pytest.mark.parametrize("group", [1, 2])
def test_leapfrog_on_a_density_it_has_never_seen_is_the_leapfrog_recurrence(gaussian_library, group):
    rng = np.random.default_rng(0)
    chains, k, steps = 3, PREC.size, 12
    u0, p0 = rng.normal(size=(chains, k)), rng.normal(size=(chains, k))
    inv_mass = np.array([1.0, 0.5, 2.0, 1.0])
    eps = np.array([0.05, 0.1, 0.2])
    u, p, g = u0.copy(), p0.copy(), np.zeros((chains, k))
    out, work = np.zeros((4, chains)), np.zeros(2 * k)
    gaussian_library.gauss_leapfrog(group, chains, k, ptr(PREC), steps, ptr(inv_mass), ptr(eps), ptr(u), ptr(p), ptr(g),
                                    ptr(out), ptr(work))
    for c in range(chains):
        q, m, e = u0[c].copy(), p0[c].copy(), eps[c]
        m += 0.5 * e * (-PREC * q)
        for s in range(steps):
            q += e * inv_mass * m
            m += (0.5 if s == steps - 1 else 1.0) * e * (-PREC * q)
        np.testing.assert_allclose(u[c], q, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(p[c], m, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g[c], -PREC * q, rtol=1e-12, atol=1e-12)
        start_h = 0.5 * (PREC * u0[c] ** 2).sum() + 0.5 * (inv_mass * p0[c] ** 2).sum()
        end_h = 0.5 * (PREC * q ** 2).sum() + 0.5 * (inv_mass * m ** 2).sum()
        np.testing.assert_allclose(out[:, c], [-0.5 * (PREC * u0[c] ** 2).sum(), -0.5 * (PREC * q ** 2).sum(),
                                               start_h, end_h], rtol=1e-12)


@needs_native
def test_nuts_on_a_density_it_has_never_seen_has_the_right_moments(gaussian_library):
    from bayesx.diagnostics.convergence import ess_per_coordinate
    from bayesx.native.calls import info_rows

    rng = np.random.default_rng(1)
    chains, k, draws = 4, PREC.size, 4000
    u = rng.normal(size=(chains, k))
    g, lp = -PREC * u, -0.5 * (PREC * u * u).sum(1)
    inv_mass = np.ones(k)
    info, failed = np.zeros((info_rows(k), chains)), ctypes.c_int(0)  # nuts.h writes every row
    kept = np.zeros((chains, draws, k))
    for t in range(draws):
        p = rng.normal(size=(chains, k))
        seeds = rng.integers(0, 2**63, size=chains, dtype=np.uint64)
        gaussian_library.gauss_nuts(chains, k, ptr(PREC), ptr(inv_mass), ctypes.c_double(0.4), 8, ptr(seeds), ptr(u),
                                    ptr(p), ptr(g), ptr(lp), ptr(info), ctypes.byref(failed))
        kept[:, t] = u
    assert failed.value == 0
    ess = ess_per_coordinate(torch.as_tensor(kept))
    flat = kept.reshape(-1, k)
    var = 1.0 / PREC
    z_mean = flat.mean(0) / np.sqrt(var / ess)
    z_var = (flat.var(0) - var) / np.sqrt(2 * var ** 2 / ess)
    assert np.abs(z_mean).max() < 4.5 and np.abs(z_var).max() < 4.5, (z_mean, z_var)
    wrong = 2.0 * var  # negative control: a density twice as wide
    assert np.abs((flat.var(0) - wrong) / np.sqrt(2 * wrong ** 2 / ess)).max() > 10
