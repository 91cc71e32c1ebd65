"""Improper or degenerate posteriors (issue 37, cases 4 and 5), each with a control through the same code path
that does not trip the check:

- a density that does not depend on some coordinates (model.dim too large, or constant): one line before the
  run, exit 2, nothing recorded;
- a density flat at every scale the chains reach (the step-size search runs away): the run FAILED, one line;
- a log density of +inf at a proposed point: the run FAILED, one line naming the point;
- a log density that is NaN in part of the space: the run FINISHED, its divergences from the NaN counted apart
  and named as the density's, not as a step size's;
- a metric that is not a number is not logged as one, and the diagnostics say so without numpy's warnings.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import all_runs, assert_rejected, call, error_line, isolated_store, run_ok

from bayesx.diagnostics import convergence
from bayesx.kernels import backend, nuts
from bayesx.kernels.metric import identity_metric
from bayesx.native import logistic as native
from bayesx.targets.custom import CustomModel

FAST = ["progress=false", "plots.n_coords=0", "reference.enabled=false", "device.compile=never", "n_chains=2",
        "method.num_warmup=60", "method.num_draws=60"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "improper") as (root, uri):
        yield root, uri


def density_file(folder: Path, name: str, body: str) -> str:
    """A user's density file holding ``log_density(theta)`` returning ``body``; its model.log_density value."""
    path = folder / f"{name}.py"
    path.write_text(f"import torch\n\ndef log_density(theta):\n    return {body}\n")
    return f"model.log_density={path}:log_density"


def failed_run(uri: str, argv: list[str], *needles: str):
    """A run that failed once under way: one error line with every needle, exit 1, recorded FAILED."""
    code, out, err = call(argv)
    line = error_line(err)
    assert code == 1 and "Traceback" not in out, (code, err)
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("improper posterior likely")
    return line


# --- a coordinate the density does not depend on: refused before the run -------------------------------------
@pytest.mark.parametrize("method", ["nuts", "vi"])
def test_a_constant_density_is_refused_before_the_run(store, tmp_path, method):
    _, uri = store
    flat = density_file(tmp_path, "flat", "0.0 * theta.sum(-1)")
    assert_rejected(["run", "model=custom", flat, "model.dim=3", f"method={method}", *FAST[:4]], uri,
                    "does not depend on theta", "improper", "add a prior")


def test_a_dimension_larger_than_the_function_uses_is_refused_naming_the_coordinates(store, tmp_path):
    _, uri = store
    five = density_file(tmp_path, "five", "-0.5 * (theta[..., :5] ** 2).sum(-1)")
    line = assert_rejected(["run", "model=custom", five, "model.dim=8", "method=nuts", *FAST], uri,
                           "does not depend on theta[5], theta[6], theta[7]", "set model.dim=5", "add a prior")
    assert "theta[4]" not in line
    run_ok(uri, ["run", "model=custom", five, "model.dim=5", "method=nuts", *FAST])  # control: the right dim


def test_a_coordinate_flat_only_near_the_start_or_named_is_told_apart(tmp_path):
    """Controls: a coordinate whose gradient is 0 at every probe (a plateau around the start) but that the density
    depends on beyond it is not refused; an unused coordinate in the middle is named by its param_name."""
    plateau = density_file(tmp_path, "plateau", "-0.5 * theta[..., 0] ** 2 - 10 * torch.relu(theta[..., 1].abs() - 1)")
    target = CustomModel(log_density=plateau.split("=", 1)[1], dim=2, init_scale=1.0)
    grad = target.log_prob_and_grad(target.initial_point(4, torch.Generator().manual_seed(0)))[1]
    assert bool((grad[:, 1] == 0).all())  # the case the check must not take for an unused coordinate
    middle = density_file(tmp_path, "middle", "-0.5 * (theta[..., 0] ** 2 + theta[..., 2] ** 2)")
    from bayesx.errors import BayesxError
    with pytest.raises(BayesxError, match=r"does not depend on b \(.*\): else add a prior on it"):
        CustomModel(log_density=middle.split("=", 1)[1], dim=3, param_names=("a", "b", "c"))


# --- a step size that runs away: the run FAILED -----------------------------------------------------------
def test_a_density_flat_at_every_scale_fails_the_run_in_one_line(store, tmp_path):
    _, uri = store
    nearly_flat = density_file(tmp_path, "nearly_flat", "1e-12 * torch.tanh(theta).sum(-1)")
    failed_run(uri, ["run", "model=custom", nearly_flat, "model.dim=2", "method=nuts", *FAST],
               "improper posterior likely", "step-size search accepted leapfrog steps of every size", "proper prior",
               "(during warm-up)")
    proper = density_file(tmp_path, "proper", "1e-12 * torch.tanh(theta).sum(-1) - 0.5 * (theta ** 2).sum(-1)")
    run = run_ok(uri, ["run", "model=custom", proper, "model.dim=2", "method=nuts", *FAST])
    assert 0.1 < run.data.metrics["step_size"] < 10


# --- +inf: the run FAILED naming the point -----------------------------------------------------------------
PLUS_INF = "torch.where(theta[..., 0] > 1.0, torch.full_like(theta[..., 0], {value}), -0.5 * (theta ** 2).sum(-1))"


def test_a_density_that_is_plus_infinite_somewhere_fails_the_run_naming_the_point(store, tmp_path):
    _, uri = store
    infinite = density_file(tmp_path, "infinite", PLUS_INF.format(value="float('inf')"))
    line = failed_run(uri, ["run", "model=custom", infinite, "model.dim=2", "method=nuts", *FAST],
                      "improper posterior likely: the log density is +inf at theta=[", "finite everywhere")
    assert float(line.split("theta=[")[1].split(",")[0]) > 1.0  # the point named is where the density is +inf
    assert "target_accept" not in line
    finite = density_file(tmp_path, "finite", PLUS_INF.format(value="-60.0"))  # control: the same step, finite
    run_ok(uri, ["run", "model=custom", finite, "model.dim=2", "method=nuts", *FAST])


# --- NaN in part of the space: divergences named as the density's ------------------------------------------
TRUNCATED = "-0.5 * (theta ** 2).sum(-1) + {outside}"


def test_divergences_at_a_nan_log_density_name_the_density_not_the_step_size(store, tmp_path):
    _, uri = store
    argv = ["run", "model=custom", "model.dim=2", "method=nuts", *FAST]
    undefined = density_file(tmp_path, "undefined", TRUNCATED.format(outside="0.0 * torch.log(theta[..., 0] + 1.5)"))
    run = run_ok(uri, [*argv, undefined])
    metrics, health = run.data.metrics, run.data.tags.get("health_warnings", "")
    assert metrics["n_divergent_nan"] > 0 and metrics["n_divergent_nan"] == metrics["n_divergent"]
    assert "met a NaN log density: the log density is NaN at" in health and "e.g. theta=[-" in health
    assert "constrain the parameter" in health and "target_accept" not in health
    # control: the same truncation by -inf (a density that says where it is zero): no NaN, the usual advice
    truncated = density_file(tmp_path, "truncated", TRUNCATED.format(
        outside="torch.where(theta[..., 0] > -1.5, 0.0, -float('inf'))"))
    run = run_ok(uri, [*argv, truncated])
    assert run.data.metrics["n_divergent_nan"] == 0 and "NaN" not in run.data.tags.get("health_warnings", "")


COMPILER = native.available() and shutil.which("g++")


@pytest.mark.parametrize("kernels", [backend.PYTORCH, pytest.param(backend.COMPILED, marks=[
    pytest.mark.slow, pytest.mark.skipif(not COMPILER, reason="no C/C++ compiler: densities cannot be compiled")])])
def test_the_nuts_tree_counts_nan_and_plus_inf_leaves_and_keeps_a_point(tmp_path, monkeypatch, kernels):
    """Kernel level, in PyTorch's trees and in the native ones (nuts.h, what a long model=custom run uses): the
    faults a transition reports are the leaves where the density is NaN or +inf."""
    spec = density_file(tmp_path, "both", "torch.where(theta[..., 1] > 1.0, torch.full_like(theta[..., 1], "
                                          "float('inf')), -0.5 * (theta ** 2).sum(-1) + 0.0 * torch.log(theta[..., 0]))")
    target = CustomModel(log_density=spec.split("=", 1)[1], dim=2, init=(0.5, 0.0), init_scale=0.1)
    gen = torch.Generator().manual_seed(0)
    start = target.initial_point(8, gen)
    if kernels == backend.COMPILED:
        monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path / "cache"))
    density = backend.prepare(target, backend.Workload(start, 10), "always" if kernels == backend.COMPILED else "never")
    assert density.name == kernels
    state = nuts.init(start, density)
    params = nuts.NUTSParams(0.5, identity_metric(2, False, torch.float64, torch.device("cpu")), 6)
    seen = {"nan": 0, "posinf": 0}
    for _ in range(20):
        state, info = nuts.step(state, density, params, gen)
        for kind in seen:
            seen[kind] += int((getattr(info.faults, kind) > 0).sum())
        faulty = (info.faults.nan + info.faults.posinf) > 0
        points = info.faults.position[faulty]  # each chain's last faulty leaf, of either kind
        assert bool(((points[:, 0] < 0) | (points[:, 1] > 1)).all()), points
        assert bool(torch.isnan(info.faults.position[~faulty]).all())
    assert seen["nan"] > 0 and seen["posinf"] > 0


# --- metrics that are not numbers -------------------------------------------------------------------------
def test_diagnostics_defined_nowhere_are_nan_without_numpy_warnings():
    stuck = np.zeros((2, 10, 3))  # chains that never left one point: R-hat is defined for no coordinate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = convergence.summarize(stuck)
    assert np.isnan(out["rhat_max"])
    moving = np.random.default_rng(0).normal(size=(2, 50, 3))
    moving[..., 1] = 0.0  # one stuck coordinate among moving ones is left out of the maximum, not made NaN
    assert np.isfinite(convergence.summarize(moving)["rhat_max"])


def test_a_metric_that_is_not_a_number_is_not_logged(store, tmp_path):
    """A run whose chains all start at one point and never move (step size 1e-300): its R-hat is not a number;
    it is left out of the store and named in a note. Control: the same run with a working step size logs it."""
    _, uri = store
    gaussian = density_file(tmp_path, "gaussian", "-0.5 * (theta ** 2).sum(-1)")
    argv = ["run", "model=custom", gaussian, "model.dim=2", "model.init=[1,1]", "model.init_scale=1e-300",
            "method=hmc", "method.init=prior", "method.adapt_step_size=false", "method.num_steps=1", *FAST,
            "method.num_warmup=0"]
    code, out, err = call([*argv, "method.step_size=1e-300"])
    assert code == 0 and "not logged, not a number: " in out and "rhat_max (nan)" in out, out + err
    assert "RuntimeWarning" not in err, err
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FINISHED" and "rhat_max" not in run.data.metrics
    assert "rhat_max" in run_ok(uri, [*argv, "method.step_size=0.5"]).data.metrics


# --- a ridge: the warm-up's covariance estimate stops being positive definite: the run FAILED ----------------
def test_a_covariance_estimate_that_is_not_positive_definite_names_an_improper_posterior():
    """The slow window's estimate (dense or diagonal) must be a finite positive definite covariance; one that is
    not is the draws' unbounded spread along a direction (a ridge), said in one line, never a LinAlgError."""
    from bayesx.adaptation.window import adapted_metric
    from bayesx.errors import DensityError

    for singular in (torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64),
                     torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]], dtype=torch.float64),
                     torch.tensor([1.0, 0.0], dtype=torch.float64)):
        with pytest.raises(DensityError, match="improper posterior likely: the warm-up's estimate"):
            adapted_metric(singular)
    with pytest.raises(DensityError, match="float32's precision"):
        adapted_metric(torch.tensor([[1.0, 1.0], [1.0, 1.0]]))
    for proper in (torch.tensor([[2.0, 0.9], [0.9, 1.0]], dtype=torch.float64), torch.tensor([1e-6, 1e6])):  # controls
        assert torch.equal(adapted_metric(proper).inv_mass, proper)


@pytest.mark.slow
def test_a_ridge_fails_the_run_in_one_line_not_an_internal_error(store, tmp_path):
    """log p = -(x0 - x1)^2 / 2 is improper along x0 + x1: the dense metric's warm-up sees the draws spread
    without bound (before this check: a LinAlgError reported as bayesx's own fault). About 2 minutes."""
    _, uri = store
    ridge = density_file(tmp_path, "ridge", "-0.5 * (theta[..., 0] - theta[..., 1]) ** 2")
    fast = [a for a in FAST if not a.startswith("method.num_")]
    failed_run(uri, ["run", "model=custom", ridge, "model.dim=2", "method=nuts", *fast, "method.num_warmup=1000",
                     "method.num_draws=20"], "improper posterior likely", "covariance", "(during warm-up)")


def test_a_step_size_search_that_collapses_fails_in_one_line_and_a_normal_one_passes():
    """A kernel whose acceptance does not rise as its step shrinks (a proposal that ignores the step size) halved
    the step to 0.0 in four windows and crashed dual averaging with 'math domain error' (found writing the toy
    sampler of tests/test_new_sampler.py); the search's end is now checked. Control: a search that ends near its
    guess is returned unchanged."""
    from bayesx.errors import DensityError
    from bayesx.methods.mcmc.health import check_step_size_search

    with pytest.raises(DensityError, match="shrank the step") as info:
        check_step_size_search(1e-79, 1e-61)
    assert "\n" not in str(info.value) and "method.adapt_step_size=false" in str(info.value)
    with pytest.raises(DensityError, match="shrank the step"):
        check_step_size_search(0.0, 1.0)
    assert check_step_size_search(0.3, 1.0) == 0.3 and check_step_size_search(1e-6, 1.0) == 1e-6
