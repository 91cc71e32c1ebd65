"""model=custom: a user's log density, run by the CLI like any target. The examples are checked
against published posteriors (eight schools) and an independent importance-sampling estimate
(Poisson regression), with a negative control (the eight-schools Jacobian counted twice)."""

from __future__ import annotations

from pathlib import Path

import arviz as az
import numpy as np
import pytest
import torch
from cli_helpers import assert_rejected, empty_store, isolated_store, run_ok
from mlflow.tracking import MlflowClient

from bayesx.targets.custom import CustomModel

ROOT = Path(__file__).resolve().parents[1]
EIGHT = f"{ROOT}/examples/eight_schools.py:log_density"
POISSON = f"{ROOT}/examples/poisson_linnerud.py:log_density"
NAMES = "model.param_names=[mu,log_tau,eta1,eta2,eta3,eta4,eta5,eta6,eta7,eta8]"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "custom") as (root, uri):
        yield root, uri


def draws_of(uri: str, run) -> np.ndarray:
    path = MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "draws.nc")
    return az.from_netcdf(path).posterior["theta"].values


def mean_and_mcse(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(np.ravel(az.mcse(x, method="mean"))[0])


@pytest.mark.slow
def test_eight_schools_matches_the_published_posterior_and_the_control_does_not(store):
    """Published (non-centred, BDA sec. 5.5; Stan and PyMC case studies): mu 4.4 (sd 3.3), tau 3.6 (sd 3.2).
    Tolerance: 4 MCSE plus 0.15 for the rounding of the published values."""
    _, uri = store
    run = run_ok(uri, ["run", "model=custom", f"model.log_density={EIGHT}", "model.dim=10", NAMES, "method=nuts",
                       "method.target_accept=0.9", "method.num_warmup=400", "method.num_draws=600", "progress=false",
                       "plots.n_coords=2"])
    draws = draws_of(uri, run)
    mu, mu_se = mean_and_mcse(draws[..., 0])
    tau, tau_se = mean_and_mcse(np.exp(draws[..., 1]))
    assert abs(mu - 4.4) < 4 * mu_se + 0.15, (mu, mu_se)
    assert abs(tau - 3.6) < 4 * tau_se + 0.15, (tau, tau_se)
    assert abs(draws[..., 0].std() - 3.3) < 0.3
    assert run.data.tags["target.param_names"].startswith("mu,log_tau,eta1")
    idata = az.from_netcdf(MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "draws.nc"))
    assert list(idata.posterior["theta"].coords["theta_dim"].values[:2]) == ["mu", "log_tau"]

    control = run_ok(uri, ["run", "model=custom", "model.log_density=custom_models:eight_schools_jacobian_twice",
                           "model.dim=10", "method=nuts", "method.target_accept=0.9", "method.num_warmup=300",
                           "method.num_draws=400", "method.init=prior", "progress=false", "plots.n_coords=0"])
    wrong_tau, wrong_se = mean_and_mcse(np.exp(draws_of(uri, control)[..., 1]))
    assert abs(wrong_tau - 3.6) > 4 * wrong_se + 0.15, (wrong_tau, wrong_se)


@pytest.mark.slow
def test_poisson_example_agrees_with_importance_sampling(store):
    """The per-point function (vectorised by vmap) under NUTS, against self-normalised importance
    sampling from a widened Gaussian fitted to the draws (200,000 proposals)."""
    _, uri = store
    run = run_ok(uri, ["run", "model=custom", f"model.log_density={POISSON}", "model.dim=4", "method=nuts",
                       "method.num_warmup=300", "method.num_draws=500", "progress=false", "plots.n_coords=0"])
    draws = draws_of(uri, run)
    flat = draws.reshape(-1, 4)
    target = CustomModel(log_density=POISSON, dim=4)
    gen = torch.Generator().manual_seed(0)
    mean, cov = torch.as_tensor(flat.mean(0)), torch.as_tensor(np.cov(flat.T)) * 2.25
    proposal = torch.distributions.MultivariateNormal(mean, cov)
    x = mean + torch.randn(200_000, 4, generator=gen, dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    log_w = target.log_prob(x) - proposal.log_prob(x)
    w = torch.softmax(log_w, 0)
    is_mean = (w[:, None] * x).sum(0).numpy()
    assert float(1 / (w**2).sum()) > 20_000  # the proposal covers the posterior
    for j in range(4):
        m, se = mean_and_mcse(draws[..., j])
        assert abs(m - is_mean[j]) < 4 * se + 0.01, (j, m, se, is_mean[j])


@pytest.mark.slow
@pytest.mark.parametrize("method, options", [
    ("laplace", []), ("vi", ["method.num_steps=300"]), ("pathfinder", []),
    ("smc", ["method.n_particles=200"]), ("hmc", ["method.num_warmup=200", "method.num_draws=200", "method.num_steps=10"]),
    ("rwm", ["method.num_warmup=200", "method.num_draws=200"]),
    ("chees", ["n_chains=8", "method.num_warmup=100", "method.num_draws=50"]),
    ("svgd", ["method.n_particles=50", "method.num_steps=100"]),
    ("ais", ["method.n_samples=100", "method.n_temps=20"]),
    ("flowvi", ["method.iterations=200", "method.n_layers=4"]),
    ("gap", ["method.num_steps=30"]),
    ("hamiltonian_vi", ["method.iterations=100", "method.init_step=0.01"]),  # 0.05 (default) diverges here
])
def test_other_methods_run_on_a_custom_model(store, method, options):
    _, uri = store
    run = run_ok(uri, ["run", "model=custom", f"model.log_density={POISSON}", "model.dim=4", f"method={method}",
                       *options, "progress=false", "plots.n_coords=0", "reference.enabled=false"])
    assert run.data.tags["model"] == "custom"


def test_data_file_reaches_the_function_and_unvmappable_functions_loop(tmp_path):
    (tmp_path / "d.csv").write_text("x,y\n1,0\n3,1\n")
    target = CustomModel(log_density="custom_models:gaussian_with_data", dim=2, data_file=str(tmp_path / "d.csv"))
    q = torch.tensor([[2.0, 2.0], [0.0, 2.0]], dtype=torch.float64)
    assert torch.allclose(target.log_prob(q), torch.tensor([0.0, -2.0], dtype=torch.float64))
    lp, grad = target.log_prob_and_grad(q)
    assert torch.allclose(grad, torch.tensor([[0.0, 0.0], [2.0, 0.0]], dtype=torch.float64))
    looped = CustomModel(log_density="custom_models:per_point_with_item", dim=3)
    q = torch.randn(5, 3, dtype=torch.float64)
    assert torch.allclose(looped.log_prob(q), -0.5 * (q**2).sum(-1))
    # the gradient agrees with finite differences
    lp, grad = looped.log_prob_and_grad(q)
    eps = 1e-6
    fd = torch.stack([(looped.log_prob(q + eps * e) - looped.log_prob(q - eps * e)) / (2 * eps)
                      for e in torch.eye(3, dtype=torch.float64)], -1)
    assert torch.allclose(grad, fd, atol=1e-6)


@pytest.mark.parametrize("options, needles", [
    ([], ["model.log_density must be set"]),
    ([f"model.log_density={EIGHT}"], ["model.dim must be set"]),
    ([f"model.log_density={ROOT}/examples/nope.py", "model.dim=2"], ["no file", "nope.py"]),
    (["model.log_density=no_such_module_xyz:f", "model.dim=2"], ["cannot import module 'no_such_module_xyz'"]),
    (["model.log_density=custom_models:missing", "model.dim=2"], ["has no function 'missing'"]),
    (["model.log_density=custom_models:vector_output", "model.dim=3"], ["returned shape (3,)", "one log density"]),
    (["model.log_density=custom_models:nan_at_origin", "model.dim=2"], ["is nan at the starting point", "model.init"]),
    (["model.log_density=custom_models:raises", "model.dim=2"], ["failed at the starting point", "ValueError: boom"]),
    (["model.log_density=custom_models:via_numpy", "model.dim=2"], ["method=nuts needs the gradient",
                                                                     "none autograd can compute", "numpy"]),
    (["model.log_density=custom_models:detached", "model.dim=2", "method.init=prior"],
     ["method=nuts needs the gradient", ".detach()"]),
    ([f"model.log_density={EIGHT}", "model.dim=10", "model.param_names=[a,b]"], ["model.param_names has 2 entries"]),
    ([f"model.log_density={EIGHT}", "model.dim=10", "model.data_file=missing.csv"], ["model.data_file: no file"]),
])
def test_bad_custom_models_are_one_line_errors(bad_env, options, needles):
    assert_rejected(["run", "model=custom", "method=nuts", *options, "progress=false"], bad_env, *needles)


def test_a_density_without_gradient_runs_under_a_method_without_gradients(store, tmp_path):
    """The control of the two cases above: the same numpy density is fine for random-walk Metropolis started
    from the prior's points (no mode search); with its default Laplace start rwm needs the gradient too."""
    root, uri = store
    run_ok(uri, ["run", "model=custom", "model.log_density=custom_models:via_numpy", "model.dim=2", "method=rwm",
                 "method.init=prior", "method.num_warmup=50", "method.num_draws=50", "progress=false",
                 "plots.n_coords=0", "reference.enabled=false"])
    bad = empty_store(tmp_path)
    assert_rejected(["run", "model=custom", "model.log_density=custom_models:via_numpy", "model.dim=2", "method=rwm",
                     "progress=false", f"tracking.uri={bad}"], bad, "method=rwm needs the gradient", "method.init=prior")


def test_a_per_point_function_indexing_theta_is_not_taken_for_a_batched_one():
    """theta[0] of a batch of dim points is a row: the probe uses a batch size other than dim, of distinct points, and checks one of them
    against a single-point call (with two points of dim 2 this function passed as batched and failed later)."""
    target = CustomModel(log_density="custom_models:first_coordinate_shifted", dim=2)
    q = torch.randn(4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = torch.stack([-0.5 * (p**2).sum() + torch.log1p(p[0] ** 2) for p in q])
    torch.testing.assert_close(target.log_prob(q), expected)


LATE_FAILURE = """
import torch
CALLS = [0]
def log_density(theta):
    CALLS[0] += 1
    if CALLS[0] > {after}:
        raise ValueError("lost the data file at call " + str(CALLS[0]))
    return -0.5 * (theta ** 2).sum()
"""


@pytest.mark.parametrize("method, after, where", [("nuts", 400, "at sampling iteration"), ("vi", 200, "")])
def test_a_density_that_fails_mid_run_ends_it_failed_in_one_line_with_what_it_had(store, tmp_path, method, after,
                                                                                   where):
    """A user's function that raises after some calls: one line naming the function, the error and the points,
    the run FAILED (not a traceback); a sampler keeps the draws it had. Control: the same file with a threshold
    beyond the run finishes."""
    from cli_helpers import all_runs, call, error_line

    _, uri = store
    argv = ["run", "model=custom", "model.dim=2", f"method={method}", "method.num_warmup=10", "method.num_draws=400",
            "progress=false", "plots.n_coords=0", "reference.enabled=false", "device.compile=never"]
    if method == "vi":
        argv.remove("method.num_warmup=10")
    failing = tmp_path / f"late_{method}.py"
    failing.write_text(LATE_FAILURE.format(after=after))
    code, out, err = call([*argv, f"model.log_density={failing}:log_density"])
    line = error_line(err)
    assert code == 1 and "Traceback" not in out  # a recorded run that failed
    for needle in ("late_", "raised ValueError: lost the data file", "the run stopped with what it had", where):
        assert needle in line, line
    run = max(all_runs(uri), key=lambda r: r.info.start_time)
    assert run.info.status == "FAILED" and run.data.tags.get("error", "").startswith("model.log_density")
    if method == "nuts":
        kept = int(line.split("; ")[-1].split(" draws kept")[0])
        assert kept > 0 and "draws.nc" in [a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(
            run.info.run_id)]
    fine = tmp_path / f"fine_{method}.py"
    fine.write_text(LATE_FAILURE.format(after=10**9))
    run_ok(uri, [*argv, f"model.log_density={fine}:log_density"])


# --- the reference posterior: its own run, cached by the content of the model's files ------------------
SMALL_REFERENCE = ["reference.num_warmup=60", "reference.num_draws=60", "reference.n_chains=2", "progress=false",
                   "plots.n_coords=0", "method=pathfinder", "model.dim=2"]
SHIFTED_GAUSSIAN = """
def log_density(theta, data):
    return -0.5 * ((theta - data["m"]) ** 2).sum(-1)
"""


def test_reference_is_its_own_run_keyed_by_file_contents_and_wall_times_add_up(store, tmp_path):
    import time

    from cli_helpers import all_runs

    _, uri = store
    density, data, renamed = tmp_path / "density.py", tmp_path / "data.csv", tmp_path / "renamed.csv"
    density.write_text(SHIFTED_GAUSSIAN)
    data.write_text("m\n1.0\n-1.0\n")
    renamed.write_text(data.read_text())
    model = ["model=custom", f"model.log_density={density}:log_density"]
    before = {r.info.run_id for r in all_runs(uri)}
    started = time.perf_counter()
    first = run_ok(uri, ["run", *model, f"model.data_file={data}", *SMALL_REFERENCE])
    elapsed = time.perf_counter() - started
    new = [r for r in all_runs(uri) if r.info.run_id not in before]
    assert len(new) == 2  # the pathfinder run and its reference
    reference = next(r for r in new if r.data.tags.get("role") == "reference")
    assert first.data.tags["reference_run_id"] == reference.info.run_id
    assert reference.info.end_time <= first.info.start_time  # closed before the run that uses it opened
    # every second of the command is in some run's wall_time_s (MLflow's first use of the store aside)
    recorded = sum(r.data.metrics["wall_time_s"] for r in new)
    assert elapsed < 1.5 * recorded + 5.0, (elapsed, recorded)

    # the same content under another path reuses it; another content does not (the negative control)
    again = run_ok(uri, ["run", *model, f"model.data_file={renamed}", *SMALL_REFERENCE])
    assert again.data.tags["reference_run_id"] == reference.info.run_id
    renamed.write_text("m\n1.0\n-2.0\n")
    edited = run_ok(uri, ["run", *model, f"model.data_file={renamed}", *SMALL_REFERENCE])
    assert edited.data.tags["reference_run_id"] != reference.info.run_id


def test_a_failed_reference_run_exits_as_a_failed_run(store, tmp_path):
    """The reference posterior is its own run, made before the approximation's opens: where the density fails in
    it, that run is recorded FAILED, so the command exits 1 (a recorded run failed), not 2 (refused before anything
    was recorded), and no approximation run opens."""
    from cli_helpers import all_runs, call, error_line

    _, uri = store
    failing = tmp_path / "late_reference.py"
    failing.write_text(LATE_FAILURE.format(after=300))
    before = {r.info.run_id for r in all_runs(uri)}
    code, _, err = call(["run", "model=custom", "model.dim=2", f"model.log_density={failing}:log_density",
                         "method=pathfinder", "reference.num_warmup=60", "reference.num_draws=60", "reference.n_chains=2",
                         "progress=false", "plots.n_coords=0", "device.compile=never"])
    assert code == 1 and error_line(err).startswith("bayesx: error: the NUTS reference posterior failed"), err
    runs = [r for r in all_runs(uri) if r.info.run_id not in before]
    assert [(r.data.tags.get("role"), r.info.status) for r in runs] == [("reference", "FAILED")]
