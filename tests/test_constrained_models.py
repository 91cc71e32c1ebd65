"""Models with named, constrained parameters (``model=custom model.params=...``): the posterior on the declared
parameters matches a gold standard within Monte Carlo error, and a wrong Jacobian is caught by the same check; the
command line reports the declared names, compiles the transforms, and refuses bad declarations in one line."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import arviz as az
from cli_helpers import assert_rejected, call, empty_store, isolated_store, run_ok
from mlflow.tracking import MlflowClient
from test_crash import killed_after_checkpoints

from bayesx.cli.gpu_check import compare_draws
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.targets import parameters
from bayesx.targets.custom import CustomModel

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "eight_schools_constrained.py"
REFERENCE = ROOT / "bayesx" / "targets" / "posteriordb" / "data" / "eight_schools.npz"
NONCENTERED = {"mu": "real", "tau": "positive", "eta": "real[8]"}
CENTERED = {"mu": "real", "tau": "positive", "theta": "real[8]"}


def _reference(form: str) -> np.ndarray:
    """posteriordb's gold standard (10,000 independent draws of theta[1..8], mu, tau) in the model's reported
    order: mu, tau, then eta (non-centred: eta = (theta - mu) / tau) or theta (centred)."""
    draws = np.load(REFERENCE)["reference"].astype(np.float64)
    theta, mu, tau = draws[:, :8], draws[:, 8], draws[:, 9]
    latent = (theta - mu[:, None]) / tau[:, None] if form == "noncentered" else theta
    return np.column_stack([mu, tau, latent])


def _nuts(form: str, seed: int = 0, target_accept: float = 0.9, draws: int = 1000) -> np.ndarray:
    target = CustomModel(log_density=f"{EXAMPLE}:{form}", params=NONCENTERED if form == "noncentered" else CENTERED)
    gen = torch.Generator().manual_seed(seed)
    result = NUTS(num_warmup=500, num_draws=draws, target_accept=target_accept).infer(
        target, RunInputs(target.initial_point(4, gen), gen, False))
    with torch.no_grad():
        return target.constrain(result.draws).numpy()


@pytest.fixture
def compiled_path(monkeypatch):
    """The compiled density, as a run takes it (the suite's default is PyTorch: tests/conftest.py)."""
    monkeypatch.setenv("BAYESX_COMPILE", "always")


@pytest.fixture
def positive_jacobian_twice(monkeypatch):
    """The control: the positive map's log-Jacobian counted twice (a proper but wrong posterior of tau)."""
    honest = parameters._MAPS["positive"]
    monkeypatch.setitem(parameters._MAPS, "positive", lambda p, x: (honest(p, x)[0], 2 * honest(p, x)[1]))


@pytest.mark.slow
def test_noncentred_eight_schools_matches_posteriordb_and_a_wrong_jacobian_does_not(request, compiled_path):
    reference = _reference("noncentered")[None]
    draws = _nuts("noncentered")
    agreed = compare_draws(draws, reference)
    assert agreed.passed, agreed.detail
    request.getfixturevalue("positive_jacobian_twice")
    wrong = compare_draws(_nuts("noncentered"), reference)
    assert not wrong.passed, f"the doubled Jacobian passed the check: {wrong.detail}"


@pytest.mark.slow
def test_centred_eight_schools_matches_posteriordb_and_a_wrong_jacobian_does_not(request, compiled_path):
    """The centred funnel at target_accept 0.99 (as the runner's divergence ladder climbs to) and 4,000 draws."""
    reference = _reference("centered")[None]
    agreed = compare_draws(_nuts("centered", target_accept=0.99, draws=4000), reference)
    assert agreed.passed, agreed.detail
    request.getfixturevalue("positive_jacobian_twice")
    wrong = compare_draws(_nuts("centered", target_accept=0.99, draws=4000), reference)
    assert not wrong.passed, f"the doubled Jacobian passed the check: {wrong.detail}"


def test_the_target_reports_the_declared_parameters_and_starts_from_constrained_values():
    target = CustomModel(log_density=f"{EXAMPLE}:noncentered", params=NONCENTERED,
                         init={"mu": 1.0, "tau": 2.0, "eta": [0.5] * 8}, init_scale=1e-9)
    assert target.dim == 10
    assert target.reported_names() == ["mu", "tau", *(f"eta[{i}]" for i in range(8))]
    assert target.parameter_shapes() == {"mu": (), "tau": (), "eta": (8,)}
    start = target.constrain(target.initial_point(2, torch.Generator().manual_seed(0)))
    torch.testing.assert_close(start, torch.tensor([[1.0, 2.0, *[0.5] * 8]] * 2, dtype=torch.float64))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "constrained") as (root, uri):
        yield root, uri


def test_a_run_reports_the_declared_names_on_the_compiled_path_and_in_its_draws_file(store, tmp_path):
    _, uri = store
    run = run_ok(uri, ["run", "model=custom", f"model.log_density={EXAMPLE}:noncentered",
                       "model.params={mu: real, tau: positive, eta: \"real[8]\"}", "method=nuts",
                       "method.num_warmup=200", "method.num_draws=200", "n_chains=2", "device.compile=always"])
    assert run.data.tags["kernels"] == "compiled", run.data.tags
    client = MlflowClient(tracking_uri=uri)
    summary = client.download_artifacts(run.info.run_id, "posterior_summary.csv", str(tmp_path))
    names = [line.split(",")[0] for line in Path(summary).read_text().splitlines()[1:]]
    assert names[:3] == ["mu", "tau", "eta[0]"], names
    idata = az.from_netcdf(client.download_artifacts(run.info.run_id, "draws.nc", str(tmp_path)))
    assert set(idata.posterior.data_vars) == {"mu", "tau", "eta"}
    draws = idata.posterior["tau"].shape[1]  # 200, or more where the run-length rules asked for more
    assert idata.posterior["eta"].shape == (2, draws, 8) and idata.posterior["tau"].shape == (2, draws)
    assert (idata.posterior["tau"].values > 0).all()
    table = az.summary(idata)
    assert {"mu", "tau", "eta[0]", "eta[7]"} <= set(table.index), table.index


@pytest.mark.slow
def test_an_approximations_run_plots_the_declared_parameters_against_the_reference(store, tmp_path):
    """method=vi on a model.params model: its reference run keeps the declared parameters' moments (tau's mean
    positive, as posteriordb's), and the run's marginals plot is made from them."""
    _, uri = store
    run = run_ok(uri, ["run", "model=custom", f"model.log_density={EXAMPLE}:noncentered",
                       "model.params={mu: real, tau: positive, eta: \"real[8]\"}", "method=vi",
                       "reference.num_warmup=200", "reference.num_draws=200", "reference.n_chains=2"])
    client = MlflowClient(tracking_uri=uri)
    assert "plots/marginals.png" in {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
    reference_id = run.data.tags["reference_run_id"]
    folder = client.download_artifacts(reference_id, "reference", str(tmp_path))
    with np.load(Path(folder) / "moments.npz") as saved:
        declared, sampled = saved["declared_mean"], saved["mean"]
    gold = _reference("noncentered").mean(0)
    assert declared[1] > 0 and sampled[1] < declared[1]  # tau, not log tau (E log tau < log E tau < E tau)
    assert abs(declared[1] - gold[1]) < 0.5 * _reference("noncentered").std(0)[1], (declared[1], gold[1])


@pytest.mark.parametrize("overrides, message", [
    (["model.params={tau: postive}"], "model.params.tau='postive' is not a support"),
    (["model.params={tau: positive}", "model.dim=3"], "model.dim=3, but model.params declares 1"),
    (["model.params={tau: positive}", "model.init=[1.0]"], "model.init with model.params is given by name"),
    (["model.params={tau: positive}", "model.init={tau: -2}"], "model.init.tau=-2.0 is outside its support"),
    (["model.dim=2", "model.init={tau: 1}"], "model.init by name needs model.params"),
])
def test_a_bad_declaration_is_refused_in_one_line_and_records_nothing(tmp_path, overrides, message):
    uri = empty_store(tmp_path)
    assert_rejected(["run", "model=custom", f"model.log_density={EXAMPLE}:noncentered", "method=nuts",
                     f"tracking.uri={uri}", *overrides], uri, message)


RESUMABLE = ["model=custom", f"model.log_density={EXAMPLE}:noncentered",
             "model.params={mu: real, tau: positive, eta: \"real[8]\"}", "method=hmc", "method.num_warmup=100",
             "method.num_draws=1500", "method.num_steps=10", "checkpoint_every=200", "seed=3", "progress=false",
             "plots.n_coords=0", "device.compile=always"]


@pytest.mark.slow
def test_a_killed_constrained_run_resumes_with_the_same_draws(tmp_path, monkeypatch):
    """SIGKILL after two checkpoints, then resume=<id>: the run ends FINISHED with the draws of the same command run
    without interruption, on the declared parameters."""
    run_id, client = killed_after_checkpoints(RESUMABLE, tmp_path, monkeypatch, seed=3)
    code, _, err = call(["run", *RESUMABLE, f"resume={run_id}"])
    assert code == 0, err
    resumed = client.get_run(run_id)
    assert resumed.info.status == "FINISHED" and int(resumed.data.tags["resumed_at_draw"]) >= 400
    code, _, err = call(["run", *RESUMABLE, "run_name=uninterrupted"])
    assert code == 0, err
    reference = next(r for r in client.search_runs([resumed.info.experiment_id])
                     if r.data.tags.get("mlflow.runName") == "uninterrupted")

    def draws(rid):
        posterior = az.from_netcdf(client.download_artifacts(rid, "draws.nc", str(tmp_path / rid))).posterior
        return {name: posterior[name].values for name in posterior.data_vars}

    ours, theirs = draws(run_id), draws(reference.info.run_id)
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-12, atol=1e-12)


EXAMPLES = ROOT / "examples"
EXAMPLE_REFERENCES = Path(__file__).resolve().parent / "models" / "example_references.npz"
LONGER = {  # name -> (the constrained form's options, the Pyro form's options, the map whose Jacobian is wrong, and
    # how many times it is counted: 300 points pin the mixture's weights down so far that a doubled Jacobian (a
    # Dirichlet(2, 2, 2) prior instead of (1, 1, 1)) moves them by less than the Monte Carlo error; counted 30 times
    # it pulls them towards 1/3)
    "sv": ({"log_density": f"{EXAMPLES / 'sv_constrained.py'}", "data_file": f"{EXAMPLES / 'sv_returns.npz'}",
            "params": {"mu": "real", "phi": "interval(-1, 1)", "sigma": "positive", "z": "real[150]"}},
           {"fn": f"{EXAMPLES / 'sv_pyro.py'}:model", "data_file": f"{EXAMPLES / 'sv_returns.npz'}"}, "positive", 2),
    "mixture": ({"log_density": f"{EXAMPLES / 'mixture_constrained.py'}",
                 "data_file": f"{EXAMPLES / 'mixture_data.npz'}",
                 "params": {"w": "simplex[3]", "loc": "ordered[3]", "scale": "positive[3]"}},
                {"fn": f"{EXAMPLES / 'mixture_pyro.py'}:model", "data_file": f"{EXAMPLES / 'mixture_data.npz'}"},
                "simplex", 30),
}


def _compiled_nuts(target, seed: int = 0) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    result = NUTS(num_warmup=500, num_draws=1000, target_accept=0.9).infer(
        target, RunInputs(target.initial_point(4, gen), gen, False))
    with torch.no_grad():
        return target.constrain(result.draws).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LONGER))
@pytest.mark.parametrize("form", ["constrained", "pyro"])
def test_the_longer_examples_match_an_independent_reference_and_a_wrong_jacobian_does_not(name, form, monkeypatch,
                                                                                          compiled_path):
    """Stochastic volatility (153 parameters, a Python loop over 150 returns) and the 3-component mixture, in both
    forms, against NumPyro NUTS on JAX transcriptions (experiments/make_example_references.py; 8 x 2,500 draws,
    R-hat <= 1.01); the control counts one map's log-Jacobian wrongly (sigma's twice for SV, the weights' 30 times for
    the mixture: LONGER)."""
    if not EXAMPLE_REFERENCES.exists():
        pytest.skip("no reference draws: python experiments/make_example_references.py (the bench extra)")
    pytest.importorskip("pyro")
    from bayesx.targets.pyro_model import PyroModel

    reference = np.load(EXAMPLE_REFERENCES)[name].astype(np.float64)[None]
    custom, pyro_options, wrong_map, times = LONGER[name]
    make = (lambda: CustomModel(**custom)) if form == "constrained" else (lambda: PyroModel(**pyro_options))
    agreed = compare_draws(_compiled_nuts(make()), reference)
    assert agreed.passed, agreed.detail
    honest = parameters._MAPS[wrong_map]
    monkeypatch.setitem(parameters._MAPS, wrong_map, lambda p, x: (honest(p, x)[0], times * honest(p, x)[1]))
    wrong = compare_draws(_compiled_nuts(make()), reference)
    assert not wrong.passed, f"the wrong Jacobian passed the check: {wrong.detail}"


@pytest.mark.parametrize("names, shapes", [
    (["theta[1]", "theta[2]", "mu", "tau"], {"theta": (2,), "mu": (), "tau": ()}),
    (["a", "b[0]", "b[1]", "b[2]"], {"a": (), "b": (3,)}),
    (["b[1]", "b[3]"], None),  # a gap
    (["b[1]", "a", "b[2]"], None),  # b split
    (["L[1,1]"], None),  # not a vector
])
def test_reported_names_spell_named_blocks_or_none(names, shapes):
    from bayesx.diagnostics.convergence import named_blocks

    assert named_blocks(names) == shapes


def test_posteriordb_targets_name_their_parameters_for_the_draws_file():
    from bayesx.targets.posteriordb.target import PosteriorDB

    target = PosteriorDB(name="eight_schools_noncentered")
    assert target.parameter_shapes() == {"theta": (8,), "mu": (), "tau": ()}
    assert sum(int(np.prod(s)) for s in target.parameter_shapes().values()) == len(target.reported_names())


def test_an_overflowed_point_is_a_rejected_proposal_and_a_failure_at_finite_values_still_stops():
    """A diverging trajectory's far end (tau = exp(1e200) = inf, mu + tau * eta = nan) makes torch.distributions'
    argument checks raise: that row's log density is -inf (the sampler rejects it, as Stan rejects a domain error)
    and the other rows are evaluated, with their gradients; the control: a function that raises at finite values
    still stops the run in one line."""
    from bayesx.errors import DensityError

    target = CustomModel(log_density=f"{EXAMPLE}:noncentered", params=NONCENTERED)
    q = torch.zeros(3, 10, dtype=torch.float64)
    q[1, 1] = 1e200  # log tau: tau overflows
    q[1, 0], q[1, 2] = 1e201, -1e200
    q.requires_grad_(True)
    lp = target.log_prob(q)
    assert lp[1] == -math.inf and torch.isfinite(lp[[0, 2]]).all()
    (grad,) = torch.autograd.grad(lp[[0, 2]].sum(), q)
    assert torch.isfinite(grad).all() and float(grad[[0, 2]].abs().sum()) > 0 and float(grad[1].abs().sum()) == 0
    with pytest.raises(DensityError, match="raised ValueError"):
        CustomModel(log_density=f"{ROOT / 'tests' / 'models' / 'raises_far_out.py'}:density", dim=2).log_prob(
            torch.tensor([[0.0, 0.0], [5.0, 0.0]], dtype=torch.float64))
    # a finite coordinate whose exp underflows to 0 (log sigma = -1e6: torch's Normal refuses the scale), as a
    # step-size search sent a local-level model there: rejected, the other row evaluated
    funnel = CustomModel(log_density=f"{ROOT / 'tests' / 'models' / 'random_walk_funnel.py'}:density", dim=502)
    points = torch.zeros(2, 502, dtype=torch.float64)
    points[1, 1] = -1.0e6
    lp = funnel.log_prob(points)
    assert lp[1] == -math.inf and torch.isfinite(lp[0])
    points[1, 1] = -300.0  # control: a far but representable scale is the function's to evaluate, and it does
    lp = funnel.log_prob(points)
    assert torch.isfinite(lp).all() and lp[1] > lp[0]  # the funnel's neck: higher with the states equal


def test_every_plot_shows_the_declared_parameters_against_the_references_moments_of_them():
    """The plots of a run on a model.params model are of the declared, constrained parameters by name (tau > 0,
    'tau' not 'unconstrained(tau)'): a sampler's, and an approximation's against the reference's moments of the
    declared parameters (Reference.on_declared). Controls: a reference saved without those moments keeps an
    approximation's plots on the sampled coordinates with the sampled moments; a target without named parameters
    keeps its coordinates."""
    from types import SimpleNamespace

    from bayesx.result import Result
    from bayesx.runner import plotted_draws, user_draws
    from bayesx.methods.reference import Reference, declared_moments

    target = CustomModel(log_density=f"{EXAMPLE}:noncentered", params=NONCENTERED)
    q = torch.randn(2, 5, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q[..., 1] = -3.0  # log tau: tau = e^-3 > 0
    result = Result(draws=q)
    sampler, approximation = SimpleNamespace(family="sampler"), SimpleNamespace(family="approximation")
    read = user_draws(sampler, target, result)
    drawn, (_, names), against = plotted_draws(sampler, target, result, read)
    assert names[:3] == ["mu", "tau", "eta[0]"] and np.allclose(drawn[..., 1], np.exp(-3.0)) and against is None

    moments = declared_moments(target, q)
    assert np.isclose(moments["declared_mean"][1], np.exp(-3.0)) and moments["declared_sd"][1] < 1e-12
    flat_q = q.reshape(-1, 10).numpy()
    reference = Reference(flat_q.mean(0), flat_q.std(0, ddof=1), 100.0, "run", 0.0, **moments)
    read = user_draws(approximation, target, result)
    drawn, (_, names), against = plotted_draws(approximation, target, result, read, reference)
    assert names[1] == "tau" and np.allclose(drawn[..., 1], np.exp(-3.0))
    assert np.isclose(against.mean[1], np.exp(-3.0)) and against.run_id == "run"
    drawn, (_, names), against = plotted_draws(sampler, target, result, read, reference)
    assert names[1] == "tau"

    older = Reference(reference.mean, reference.sd, 100.0, "run", 0.0)  # saved before it kept declared moments
    drawn, (_, names), against = plotted_draws(approximation, target, result, read, older)
    assert names[1] == "unconstrained(tau)" and np.allclose(drawn[..., 1], -3.0) and against is older
    drawn, (_, names), _ = plotted_draws(sampler, target, result, read, older)
    assert names[1] == "tau"
    plain = CustomModel(log_density=f"{ROOT / 'tests' / 'models' / 'raises_far_out.py'}:density", dim=2)
    flat = Result(draws=torch.zeros(1, 3, 2, dtype=torch.float64))
    assert plotted_draws(sampler, plain, flat, user_draws(sampler, plain, flat))[1][1] is None
    assert declared_moments(plain, flat.draws) == {}
