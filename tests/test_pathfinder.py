"""Pathfinder (method=pathfinder, and MCMC's init=pathfinder) against known answers.

- The dense L-BFGS inverse-Hessian estimate satisfies the secant equation H y = s of its newest pair.
- On a Gaussian target the best Gaussian of one path is the target (L-BFGS on a quadratic), and the
  multi-path importance-resampled draws give the evidence within its standard error.
- PSIS k-hat flags a non-Gaussian posterior (banana) and not a Gaussian one: the negative control of
  the diagnostic that tells a user when not to trust a Pathfinder fit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import isolated_store, run_ok

from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.vi.pathfinder import Pathfinder
from bayesx.pathfinder import inverse_hessian, single_path
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.toy import Density


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def gaussian():
    return Gaussian(dim=5, kind="correlated", rho=0.8, mean=[1.0, 2.0, 3.0, 4.0, 5.0])


def test_inverse_hessian_meets_the_secant_equation():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    hessian = a @ a.T + np.eye(4)
    pairs = [(s, hessian @ s) for s in rng.normal(size=(3, 4))]
    h = inverse_hessian(pairs, 4)
    s, y = pairs[-1]
    assert np.allclose(h @ y, s)
    assert np.all(np.linalg.eigvalsh(h) > 0)


def test_one_path_finds_the_gaussian(gaussian):
    path = single_path(gaussian, torch.zeros(5, dtype=torch.float64), gen(0))
    assert torch.allclose(path.mean, gaussian.mean, atol=1e-4)
    assert torch.allclose(path.cov, gaussian.cov, atol=0.05)
    assert path.n_iterations >= 1 and path.elbo == pytest.approx(gaussian.log_normalizer(), abs=0.05)


def test_multi_path_evidence(gaussian):
    method = Pathfinder(n_paths=4, draws_per_path=500)
    g = gen(1)
    result = method.infer(gaussian, RunInputs(method.initial_points(gaussian, 4, g), g, progress=False))
    m = result.metrics
    assert abs(m["log_evidence"] - gaussian.log_normalizer()) < 4 * m["log_evidence_se"] + 0.02
    assert m["weights_ess"] > 500 and result.draws.shape == (1, 1000, 5)


def test_khat_flags_a_banana_and_not_a_gaussian(gaussian):
    def khat(target):
        method = Pathfinder(num_draws=2000)
        g = gen(2)
        return method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False)).metrics[
            "psis_khat"]

    assert khat(gaussian) < 0.5
    assert khat(Density(name="banana")) > 0.7


def test_nuts_starts_from_pathfinder(gaussian):
    g = gen(3)
    result = NUTS(num_warmup=200, num_draws=400, init="pathfinder").sample(
        gaussian, RunInputs(gaussian.initial_point(4, g), g, progress=False))
    assert "pathfinder_time_s" in result.timings
    ev = gaussian.evaluate(result.draws).metrics
    assert ev["posterior_mean_err_max"] < 0.2 and ev["posterior_sd_err_max"] < 0.2


def test_bad_options_are_one_line():
    with pytest.raises(BayesxError, match=r"^method\.n_paths must be an integer >= 1, got 0"):
        Pathfinder(n_paths=0)
    with pytest.raises(BayesxError, match=r"^method\.init must be one of prior, laplace, pathfinder"):
        NUTS(init="vi")


def test_cli_records_a_pathfinder_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "pathfinder") as (_, uri):
        run = run_ok(uri, ["run", "method=pathfinder", "model=gaussian", "model.dim=4", "method.n_paths=2",
                           "method.draws_per_path=300", "progress=false", "plots.n_coords=0"])
    metrics = run.data.metrics
    assert run.data.tags["family"] == "approximation"
    for key in ("log_evidence", "psis_khat", "lbfgs_iterations", "n_grad_evals", "log_evidence_err"):
        assert key in metrics and math.isfinite(metrics[key]), key
