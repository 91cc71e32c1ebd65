"""pCN and AE-pCN: exactness on a conjugate linear-Gaussian target (posterior moments against the
closed form, with z-scores from the Monte Carlo standard error), negative controls that the same
check catches a wrong acceptance rule, failed likelihoods as rejections, step-size adaptation,
the Gaussian-prior requirement, and ``bayesx run model=elliptic method=pcn|aepcn`` end to end.

The toy targets have four dimensions, so every sampler run takes well under a second; the CLI runs
use the 4 x 4 mesh (81 unknowns) and two chains. Runs go to a temporary MLflow store and the
prior-factor cache to a temporary ``$BAYESX_DATA_DIR``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from cli_helpers import assert_rejected, isolated_store, run_ok
from mlflow.tracking import MlflowClient

from bayesx.methods.base import RunInputs
from bayesx.data.classification import ClassificationData
from bayesx.diagnostics import convergence
from bayesx.errors import BayesxError
from bayesx.kernels import latent_pcn, pcn
from bayesx.methods.mcmc import aepcn, latent_stages
from bayesx.methods.mcmc.aepcn import AEPCN
from bayesx.methods.mcmc.pcn import PCN
from bayesx.targets.base import Capabilities, TargetBase
from bayesx.targets.logreg import LogisticRegression

Z_LIMIT = 4.0


pytestmark = pytest.mark.usefixtures("data_dir")  # the prior-factor caches go to a temporary folder


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- a conjugate toy: prior N(0, C), likelihood N(y; A q, s^2 I) ----------------------------------------------
class LinearGaussian(TargetBase):
    """Posterior N(m, S) with S = (C^-1 + A^T A / s^2)^-1 and m = S A^T y / s^2, known exactly."""

    capabilities = Capabilities(uses_data=False, exact_moments=True)

    def __init__(self, dim: int = 4, n_obs: int = 6, noise: float = 1.0, seed: int = 0):
        rng = np.random.default_rng(seed)
        m = rng.normal(size=(dim, dim))
        self.dim, self.dtype, self.device = dim, torch.float64, torch.device("cpu")
        self.cov = torch.as_tensor(m @ m.T / dim + 0.5 * np.eye(dim))  # dense, not diagonal
        self.chol = torch.linalg.cholesky(self.cov)
        self.A = torch.as_tensor(rng.normal(size=(n_obs, dim)))
        self.noise = noise
        truth = self.chol @ torch.as_tensor(rng.normal(size=dim))
        self.y = self.A @ truth + noise * torch.as_tensor(rng.normal(size=n_obs))
        precision = torch.linalg.inv(self.cov) + self.A.T @ self.A / noise**2
        self.post_cov = torch.linalg.inv(precision)
        self.post_mean = self.post_cov @ (self.A.T @ self.y) / noise**2

    def log_likelihood(self, q):
        r = (self.y - q @ self.A.T) / self.noise
        return -0.5 * (r * r).sum(-1)

    def sample_prior(self, n, gen):
        return torch.randn((n, self.dim), generator=gen, dtype=self.dtype) @ self.chol.T

    def prior_log_prob(self, q):
        w = torch.linalg.solve_triangular(self.chol, q.reshape(-1, self.dim).T, upper=False).T
        return -0.5 * (w * w).sum(-1).reshape(q.shape[:-1])

    def prior_factor(self):
        return self.chol

    def gaussian_prior(self):
        return self

    def log_prob(self, q):
        return self.log_likelihood(q) + self.prior_log_prob(q)

    def initial_point(self, n_chains, gen):
        return self.sample_prior(n_chains, gen)

    def evaluate(self, draws):
        return {}


def moment_zscores(draws: np.ndarray, mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-scores of the sample mean and variance of draws (chains, n, dim) against the exact moments,
    each divided by its Monte Carlo standard error sd / sqrt(ESS) (ESS of x, resp. of (x - mean)^2)."""
    flat = draws.reshape(-1, draws.shape[-1])
    ess = convergence.ess_per_coordinate(draws, "bulk")
    z_mean = (flat.mean(0) - mean) / np.sqrt(var / ess)
    sq = (draws - mean) ** 2
    ess_sq = convergence.ess_per_coordinate(sq, "bulk")
    sq_flat = sq.reshape(-1, draws.shape[-1])
    z_var = (sq_flat.mean(0) - var) / (sq_flat.std(0) / np.sqrt(ess_sq))
    return z_mean, z_var


def assert_exact(target: LinearGaussian, draws: torch.Tensor, min_ess: float = 300.0) -> None:
    draws = draws.numpy()
    assert convergence.summarize(draws)["rhat_max"] < 1.05  # mixing sanity; the z-scores are the test
    assert convergence.ess_per_coordinate(draws, "bulk").min() > min_ess  # the z-scores have power
    z_mean, z_var = moment_zscores(draws, target.post_mean.numpy(), target.post_cov.diagonal().numpy())
    assert np.all(np.abs(z_mean) < Z_LIMIT), z_mean
    assert np.all(np.abs(z_var) < Z_LIMIT), z_var


def max_abs_z(target: LinearGaussian, draws: torch.Tensor) -> float:
    z_mean, z_var = moment_zscores(draws.numpy(), target.post_mean.numpy(), target.post_cov.diagonal().numpy())
    return float(max(np.abs(z_mean).max(), np.abs(z_var).max()))


@pytest.fixture(scope="module")
def toy():
    target = LinearGaussian()
    # the likelihood moves the posterior well away from the prior: ignoring it is detectable
    prior_sd = target.cov.diagonal().sqrt()
    assert (target.post_mean.abs() / prior_sd).max() > 1.5
    return target


# --- pCN ----------------------------------------------------------------------------------------------
def test_pcn_proposal_is_the_crank_nicolson_step():
    """With a flat likelihood every proposal is accepted: q* = rho q + sqrt(1 - rho^2) xi exactly."""

    class Flat(LinearGaussian):
        def log_likelihood(self, q):
            return torch.zeros(q.shape[:-1], dtype=q.dtype)

    target = Flat()
    q = torch.randn(2, 4, generator=gen(1), dtype=torch.float64)
    h = 0.3
    state = pcn.init(q, target)
    new, info = pcn.step(state, target, pcn.PCNParams(h, 3), gen(2))
    (block,) = new.noise.draws  # a block of 3 iterations' prior draws, kept in the state
    xi = block[0]  # the first of them
    assert new.noise.next == 1 and block.shape == (3, 2, 4) and state.noise.draws == ()
    r = (1 - h / 4) / (1 + h / 4)
    assert pcn.rho(h) == pytest.approx(r)
    torch.testing.assert_close(new.position, r * q + math.sqrt(1 - r * r) * xi)
    assert info.accepted.all() and torch.all(info.accept_prob == 1.0) and not info.divergent.any()
    assert torch.all(info.n_grad_evals == 0)
    assert pcn.rho(4.0) == 0.0 and pcn.rho(100.0) == 0.0  # h is capped at 4: independent prior draws


def test_prior_noise_is_drawn_in_blocks(toy):
    calls = []

    class Counting(LinearGaussian):
        def sample_prior(self, n, gen):
            calls.append(n)
            return super().sample_prior(n, gen)

    target, g = Counting(), gen(3)
    noise, draws = pcn.EMPTY_NOISE, []
    for _ in range(12):
        (xi,), noise = pcn.draw_noise(noise, pcn.prior_draws(target), 3, 5, g)
        draws.append(xi)
    draws = torch.stack(draws)
    assert calls == [15, 15, 15]  # 5 iterations x 3 chains per product
    assert draws.shape == (12, 3, 4) and len({tuple(d.flatten().tolist()) for d in draws}) == 12
    pcn.draw_noise(noise, pcn.prior_draws(target), 2, 5, g)  # another number of chains starts a new block
    assert calls[-1] == 10


def test_pcn_samples_the_conjugate_posterior(toy):
    g = gen(4)
    result = PCN(num_warmup=500, num_draws=3000).sample(toy, RunInputs(toy.initial_point(8, g), g, progress=False))
    assert result.draws.shape == (8, 3000, 4)
    assert 0.15 < result.metrics["accept_rate"] < 0.35
    assert result.metrics["n_divergent"] == 0 and result.metrics["n_grad_evals"] == 0
    assert result.metrics["rho"] == pytest.approx(pcn.rho(result.metrics["step_size"]))
    # the recorded log-likelihood is that of the retained state
    ll = toy.log_likelihood(result.draws.reshape(-1, 4)).reshape(8, 3000).numpy()
    np.testing.assert_allclose(result.sample_stats["log_lik"], ll, rtol=1e-10)
    assert_exact(toy, result.draws)


def test_negative_control_pcn_without_the_likelihood_ratio_is_caught(toy, monkeypatch):
    """Accepting every proposal samples the prior; the same moment check must fail loudly."""
    real = pcn.metropolis

    def ignore_likelihood(state_ll, proposal_ll, extra, gen):
        return real(state_ll, state_ll.clone(), extra, gen)

    monkeypatch.setattr(pcn, "metropolis", ignore_likelihood)
    g = gen(4)
    result = PCN(num_warmup=200, num_draws=1000).sample(toy, RunInputs(toy.initial_point(8, g), g, progress=False))
    assert result.metrics["accept_rate"] == 1.0
    assert max_abs_z(toy, result.draws) > 10.0


def test_step_size_adaptation_reaches_the_target_acceptance():
    target = LinearGaussian(noise=0.3)  # informative: pCN needs h << 4
    g = gen(5)
    result = PCN(num_warmup=500, num_draws=1000).sample(
        target, RunInputs(target.initial_point(4, g), g, progress=False))
    assert abs(result.metrics["accept_rate"] - 0.25) < 0.08, result.metrics
    assert result.metrics["step_size"] < 1.0
    assert result.metrics["rho"] == pytest.approx(pcn.rho(result.metrics["step_size"]))
    # another target acceptance is reached too
    result = PCN(num_warmup=500, num_draws=1000, target_accept=0.5).sample(
        target, RunInputs(target.initial_point(4, g), g, progress=False))
    assert abs(result.metrics["accept_rate"] - 0.5) < 0.08, result.metrics


def test_fixed_step_size_is_kept(toy):
    g = gen(6)
    result = PCN(num_warmup=50, num_draws=100, step_size=0.3, adapt_step_size=False).sample(
        toy, RunInputs(toy.initial_point(2, g), g, progress=False))
    assert result.metrics["step_size"] == 0.3
    assert result.metrics["rho"] == pytest.approx((1 - 0.075) / (1 + 0.075), rel=1e-15)
    capped = PCN(num_warmup=10, num_draws=20, step_size=10.0, adapt_step_size=False).sample(
        toy, RunInputs(toy.initial_point(2, g), g, progress=False))
    assert capped.metrics["step_size"] == 4.0 and capped.metrics["rho"] == 0.0


class NaNRegion(LinearGaussian):
    """The likelihood is NaN (a 'failed solve') for q_0 > CUT."""

    CUT = -0.4

    def log_likelihood(self, q):
        ll = super().log_likelihood(q)
        return torch.where(q[..., 0] > self.CUT, torch.full_like(ll, float("nan")), ll)


def test_metropolis_counts_nan_as_a_rejection():
    state = torch.tensor([-1.0, -1.0, -1.0])
    proposal = torch.tensor([float("nan"), 5.0, -3.0])
    accept_prob, accepted, failed = pcn.metropolis(state, proposal, 0.0, gen(7))
    assert failed.tolist() == [True, False, False]
    assert accept_prob[0] == 0.0 and not accepted[0]
    assert accept_prob[1] == 1.0 and accepted[1]
    assert accept_prob[2] == pytest.approx(math.exp(-2.0))


def test_nan_likelihood_is_a_divergent_rejection():
    target = NaNRegion()
    start = target.post_mean.repeat(4, 1)
    start[:, 0] = target.CUT - 0.5
    g = gen(8)
    result = PCN(num_warmup=100, num_draws=500).sample(target, RunInputs(start, g, progress=False))
    draws, stats = result.draws, result.sample_stats
    assert torch.isfinite(draws).all()
    assert (draws[..., 0] <= target.CUT).all()  # the chain never holds a failed state
    assert np.isfinite(stats["log_lik"]).all()
    divergent = stats["divergent"]
    assert divergent.sum() > 50 and result.metrics["n_divergent"] == divergent.sum()
    assert not (divergent & stats["accepted"]).any()
    assert np.all(stats["accept_prob"][divergent] == 0.0)
    # AE-pCN rejects failed decoded proposals the same way
    method = AEPCN(latent_dim=4, num_warmup=50, num_draws=200, presample={"num_warmup": 50, "num_draws": 200})
    result = method.sample(target, RunInputs(start, g, progress=False))
    assert torch.isfinite(result.draws).all() and (result.draws[..., 0] <= target.CUT + 1e-12).all()
    assert result.metrics["n_divergent"] > 0
    assert np.isfinite(result.sample_stats["log_lik"]).all()


def test_an_initial_point_with_a_failed_likelihood_is_an_error():
    target = NaNRegion()
    start = target.post_mean.repeat(2, 1)
    start[:, 0] = target.CUT + 1.0
    with pytest.raises(BayesxError, match="not finite at the initial point"):
        PCN(num_warmup=10, num_draws=10).sample(target, RunInputs(start, gen(9), progress=False))


# --- AE-pCN ---------------------------------------------------------------------------------------------
def run_aepcn(target, seed, **kwargs):
    g = gen(seed)
    method = AEPCN(latent_dim=target.dim, ae="pca", num_warmup=300, num_draws=3000,
                   presample={"num_warmup": 300, "num_draws": 800}, **kwargs)
    return method.sample(target, RunInputs(target.initial_point(8, g), g, progress=False))


def test_aepcn_with_an_invertible_linear_map_is_exact(toy):
    """latent_dim = D with PCA: the decoder is an invertible affine map and the reference measure
    is exactly the prior pulled back, so AE-pCN must sample the posterior exactly."""
    result = run_aepcn(toy, 10)
    assert result.metrics["latent_dim"] == toy.dim and result.metrics["recon_err"] < 1e-12
    assert result.draws.shape == (8, 3000, 4)
    for key in ("presample_time_s", "train_time_s", "sampling_time_s", "warmup_time_s"):
        assert result.timings[key] > 0
    assert 0.15 < result.metrics["accept_rate"] < 0.35
    assert result.metrics["n_divergent"] == 0
    assert_exact(toy, result.draws)


def test_aepcn_reference_is_the_prior_pulled_back(toy):
    """For q = m + B z: P = B^T C^-1 B and mu = -P^-1 B^T C^-1 m; with B invertible, B mu = -m."""
    g = gen(11)
    draws = toy.sample_prior(200, g)
    method = AEPCN(latent_dim=toy.dim, ae="pca")
    space, _, _ = latent_stages.fit(method.settings, toy, draws, g)
    ref = latent_pcn.LatentReference(space, toy)
    basis = space.scale[:, None] * space.ae.W
    torch.testing.assert_close(space.decode_position(ref.mean[None])[0], torch.zeros(toy.dim, dtype=torch.float64),
                               atol=1e-10, rtol=0)
    precision = ref.chol @ ref.chol.T
    torch.testing.assert_close(precision, basis.T @ torch.linalg.solve(toy.cov, basis), rtol=1e-8, atol=1e-8)
    # decoded reference draws are prior draws: their covariance is C
    z = ref.mean + ref.sample(20000, g)
    q = space.decode_position(z)
    cov = q.T @ q / q.shape[0]
    sd = torch.sqrt((torch.outer(toy.cov.diagonal(), toy.cov.diagonal()) + toy.cov**2) / q.shape[0])
    assert ((cov - toy.cov) / sd).abs().max() < 5.0


def test_negative_control_aepcn_with_a_wrong_reference_mean_is_caught(toy, monkeypatch):
    class Shifted(latent_pcn.LatentReference):
        def __init__(self, space, target):
            super().__init__(space, target)
            self.mean = self.mean + 2.0  # proposals now revert to the wrong centre

    monkeypatch.setattr(aepcn, "LatentReference", Shifted)
    result = run_aepcn(toy, 10)
    assert max_abs_z(toy, result.draws) > 10.0


# --- the Gaussian-prior requirement ----------------------------------------------------------------------
def tiny_logreg() -> LogisticRegression:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = (rng.random(40) < 1 / (1 + np.exp(-x[:, 0]))).astype(float)
    return LogisticRegression(ClassificationData("tiny", x[:30], y[:30], x[30:], y[30:], "tiny", "generated"))


def test_pcn_needs_a_gaussian_prior_model():
    target = tiny_logreg()
    with pytest.raises(BayesxError, match="method=pcn needs a model with a Gaussian prior") as info:
        PCN().check(target, 4)
    assert "LogisticRegression lacks log_likelihood, sample_prior" in str(info.value)
    assert "model=elliptic" in str(info.value)
    with pytest.raises(BayesxError, match="method=aepcn needs a model with a Gaussian prior"):
        AEPCN().check(target, 4)

    class Undeclared(LinearGaussian):  # has the methods but answers no to the typed question: the answer decides
        def gaussian_prior(self):
            return None

    PCN().check(LinearGaussian(), 4)
    for method in (PCN(), AEPCN(latent_dim=2)):
        with pytest.raises(BayesxError, match="Undeclared lacks log_likelihood, sample_prior, prior_log_prob"):
            method.check(Undeclared(), 4)


def test_pcn_and_aepcn_options_are_checked():
    with pytest.raises(BayesxError, match="method.noise_block must be an integer >= 1, got 0"):
        PCN(noise_block=0)
    with pytest.raises(BayesxError, match="method.presample.noise_block"):
        AEPCN(presample={"noise_block": 0})
    with pytest.raises(BayesxError, match="exceeds the target's dimension 4"):
        AEPCN(latent_dim=5).check(LinearGaussian(), 4)
    with pytest.raises(BayesxError, match="too few pre-samples"):
        AEPCN(latent_dim=4, presample={"num_draws": 4}).check(LinearGaussian(), 2)


# --- the CLI: model=elliptic with pcn and aepcn -------------------------------------------------------------
N_CHAINS = 2
ELLIPTIC = ["run", "model=elliptic", "model.mesh=4", "device.num_threads=1", "progress=false", f"n_chains={N_CHAINS}"]
PCN_RUN = [*ELLIPTIC, "method=pcn", "method.num_warmup=100", "method.num_draws=200"]
AEPCN_RUN = [*ELLIPTIC, "method=aepcn", "method.latent_dim=10", "method.presample.num_draws=100",
             "method.presample.num_warmup=100", "method.num_warmup=50", "method.num_draws=100"]
REQUIRED_METRICS = ("log_likelihood", "accept_rate", "time_per_iter_s", "ess_log_likelihood", "field_rel_err",
                    "ess_field_min", "step_size", "rho", "sampling_time_s")
REQUIRED_ARTIFACTS = ("data/observations.csv", "plots/true_field.png", "plots/posterior_fields.png",
                      "plots/log_likelihood_trace.png", "config.yaml", "draws.nc")


@pytest.fixture(scope="module")
def store(tmp_path_factory, data_dir):
    with isolated_store(tmp_path_factory, "pcn-cli", data_dir=False) as s:
        yield s


def artifact_files(uri: str, run_id: str, folder: str | None = None) -> set[str]:
    client = MlflowClient(tracking_uri=uri)
    out = set()
    for item in client.list_artifacts(run_id, folder):
        out |= artifact_files(uri, run_id, item.path) if item.is_dir else {item.path}
    return out


@pytest.fixture(scope="module")
def pcn_run(store):
    return run_ok(store[1], PCN_RUN)


@pytest.fixture(scope="module")
def aepcn_run(store):
    return run_ok(store[1], AEPCN_RUN)


def check_elliptic_run(uri: str, run, method: str) -> None:
    metrics, tags = run.data.metrics, run.data.tags
    missing = [m for m in REQUIRED_METRICS if m not in metrics]
    assert not missing, f"metrics missing: {missing}"
    assert all(math.isfinite(metrics[m]) for m in REQUIRED_METRICS), metrics
    assert 0.0 <= metrics["accept_rate"] <= 1.0 and metrics["time_per_iter_s"] > 0
    assert metrics["log_likelihood"] < 0 and metrics["ess_log_likelihood"] > 0
    assert 0.0 < metrics["step_size"] <= 4.0 and metrics["rho"] == pytest.approx(pcn.rho(metrics["step_size"]))
    assert metrics["n_grad_evals"] == 0
    assert (tags["method"], tags["model"], tags["data"]) == (method, "elliptic", "none")
    assert (tags["target.dim"], tags["target.mesh"], tags["target.solver"]) == ("81", "4", "dense")
    files = artifact_files(uri, run.info.run_id)
    missing = [a for a in REQUIRED_ARTIFACTS if a not in files]
    assert not missing, f"artifacts missing: {missing} (have {sorted(files)})"
    # no NUTS reference by default: PDE solves make it expensive
    assert "posterior_mean_err" not in metrics and "reference_time_s" not in metrics
    assert "reference_cache" not in tags


@pytest.mark.filterwarnings("error:log_likelihood variable found in sample_stats")  # the stat is named log_lik
def test_pcn_on_the_elliptic_model_end_to_end(store, pcn_run, data_dir):
    root, uri = store
    check_elliptic_run(uri, pcn_run, "pcn")
    assert pcn_run.data.params["method._target_"] == "bayesx.methods.mcmc.pcn.PCN"
    assert pcn_run.data.params["model.mesh"] == "4"
    assert list((data_dir / "elliptic").glob("prior-chol-81-*.npy"))  # the prior factor went to the temp cache


def test_observations_artifact_matches_the_model(store, pcn_run, tmp_path):
    from bayesx.targets.elliptic import EllipticInverse

    root, uri = store
    local = MlflowClient(tracking_uri=uri).download_artifacts(pcn_run.info.run_id, "data", str(tmp_path))
    table = np.loadtxt(f"{local}/observations.csv", delimiter=",", skiprows=1)
    np.testing.assert_allclose(table[:, 3], EllipticInverse(mesh=4).observations, rtol=1e-9)


@pytest.mark.filterwarnings("error:log_likelihood variable found in sample_stats")  # the stat is named log_lik
def test_aepcn_on_the_elliptic_model_end_to_end(store, aepcn_run):
    root, uri = store
    check_elliptic_run(uri, aepcn_run, "aepcn")
    metrics, tags = aepcn_run.data.metrics, aepcn_run.data.tags
    assert metrics["latent_dim"] == 10 and tags["ae"] == "pca" and tags["latent_dim_choice"] == "fixed"
    for key in ("presample_time_s", "train_time_s", "presample_accept_rate"):
        assert key in metrics and math.isfinite(metrics[key])
    assert "autoencoder/autoencoder.pt" in artifact_files(uri, aepcn_run.info.run_id)


# --- bad input through the CLI -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, needles", [
    ([*PCN_RUN, "model.mesh=1"], ["model.mesh", "got 1"]),
    ([*PCN_RUN, "model.prior_length=0"], ["model.prior_length", "got 0"]),
    ([*PCN_RUN, "model.noise_sd=-1"], ["model.noise_sd", "-1"]),
    ([*PCN_RUN, "model.solver=magic"], ["model.solver", "'magic'"]),
    (["run", "method=pcn", "model=logreg", "progress=false"], ["method=pcn", "Gaussian prior", "model=elliptic"]),
    (["run", "method=aepcn", "model=logreg", "progress=false"], ["method=aepcn", "Gaussian prior"]),
    ([*PCN_RUN, "method.noise_block=0"], ["method.noise_block", "0"]),
    ([*AEPCN_RUN, "method.latent_dim=100"], ["method.latent_dim=100", "dimension 81"]),
    ([*AEPCN_RUN, "method.latent_dim=60"], ["too few pre-samples", "method.presample.num_draws"]),
], ids=["mesh_1", "prior_length_0", "noise_sd_negative", "unknown_solver", "pcn_on_logreg", "aepcn_on_logreg",
        "noise_block_0", "latent_dim_above_dim", "too_few_presamples"])
def test_bad_input_is_rejected_before_a_run(bad_env, argv, needles):
    assert_rejected(argv, bad_env, *needles)


@pytest.mark.parametrize("argv", [
    ["method=nuts", "method.num_warmup=30", "method.num_draws=30"],
    ["method=hmc", "model.whiten=true", "method.init=prior", "method.num_steps=5", "method.num_warmup=30",
     "method.num_draws=30"],
    ["method=aehmc", "method.latent_dim=8", "method.num_steps=5", "method.presample.num_warmup=30",
     "method.presample.num_draws=100", "method.num_warmup=20", "method.num_draws=30"],
], ids=["nuts", "hmc-whitened", "aehmc"])
def test_gradient_methods_run_on_the_elliptic_model(store, argv):
    """The adjoint gradient lets the product's gradient samplers run on the PDE posterior."""
    run = run_ok(store[1], ["run", "model=elliptic", "model.mesh=3", "n_chains=2", "save_draws=false", *argv])
    metrics = run.data.metrics
    assert metrics["n_grad_evals"] > 0 and math.isfinite(metrics["log_likelihood"]) and metrics["log_likelihood"] < 0
    assert metrics["accept_rate"] > 0.2
