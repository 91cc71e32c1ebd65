"""VAEs, HVI and RMHVI: correctness on a linear-Gaussian VAE (probabilistic PCA) whose log p(x) is known
in closed form, the (generalized) leapfrog integrators, tiny training runs on the vendored MNIST digits,
a NaN loss, and ``bayesx run model=vae`` end to end with bad input.

Tolerances of the Monte Carlo checks come from the Monte Carlo error of the very samples being checked
(standard errors of means, the delta-method error of a log-mean-exp), not from fixed numbers. Training
runs use a few hundred images, two epochs and a handful of importance samples, and the CLI runs record
into a temporary MLflow store with a temporary ``$BAYESX_DATA_DIR``.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cli_helpers import all_runs, assert_rejected, isolated_store, run_ok
from mlflow.tracking import MlflowClient
from torch import nn

from bayesx.data import registry
from bayesx.data.images import load_images
from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.vae.flowvae import FlowVAE
from bayesx.methods.vae.hvi import HVI, RMHVI
from bayesx.methods.vae.trainer import VAE
from bayesx.methods.vae import bounds, evaluate, riemann
from bayesx.methods.vae.model import VAEModel, standard_normal_log_density

F64 = torch.float64
Z_LIMIT = 4.0  # Monte Carlo checks: at most this many standard errors


# --- a linear-Gaussian VAE (probabilistic PCA) ------------------------------------------------------------
class LinearDecoder(nn.Module):
    """z (..., d) -> mean image W z + b as (..., 1, 1, D)."""

    def __init__(self, W: torch.Tensor, b: torch.Tensor):
        super().__init__()
        self.linear = nn.Linear(W.shape[1], W.shape[0]).to(F64)
        with torch.no_grad():
            self.linear.weight.copy_(W)
            self.linear.bias.copy_(b)

    def forward(self, z):
        return self.linear(z).unflatten(-1, (1, 1, -1))


class LinearGaussianVAE(nn.Module):
    """p(z) = N(0, I), p(x | z) = N(W z + b, s^2 I), so log p(x) = log N(x; b, W W^T + s^2 I).

    W has orthogonal columns, so the exact posterior N(m(x), diag(post_var)) is diagonal and a
    VAE encoder can represent it. The encoder used here is deliberately not exact: its mean is
    shifted by ``shift`` posterior standard deviations and its variance multiplied by ``inflate``
    (``shift=0, inflate=1`` gives the exact posterior). Duck-typed like VAEModel.
    """

    def __init__(self, D: int = 5, d: int = 2, noise: float = 0.5, shift: float = 0.5, inflate: float = 2.0,
                 seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(D, d, generator=g, dtype=F64))
        self.W = q * torch.linspace(1.5, 0.8, d, dtype=F64)  # orthogonal columns of different lengths
        self.b = 0.3 * torch.randn(D, generator=g, dtype=F64)
        self.noise, self.shift, self.inflate = noise, shift, inflate
        self.latent_dim, self.image_shape = d, (1, 1, D)
        self.device, self.dtype = torch.device("cpu"), F64
        self.decoder = LinearDecoder(self.W, self.b)
        self.post_var = 1.0 / (1.0 + (self.W**2).sum(0) / noise**2)  # (d,)

    def posterior(self, x):
        mean = self.post_var * ((x.flatten(-3) - self.b) @ self.W) / self.noise**2
        return mean, torch.log(self.post_var).expand_as(mean)

    def encode(self, x):
        mean, log_var = self.posterior(x)
        return mean + self.shift * torch.exp(0.5 * log_var), log_var + math.log(self.inflate)

    def log_likelihood(self, x, z):
        r = (x - self.decoder(z)) / self.noise
        return (-0.5 * r * r - math.log(self.noise) - 0.5 * math.log(2 * math.pi)).flatten(-3).sum(-1)

    def log_joint(self, x, z):
        return self.log_likelihood(x, z) + standard_normal_log_density(z)

    def log_marginal(self, x):
        cov = self.W @ self.W.T + self.noise**2 * torch.eye(len(self.b), dtype=F64)
        return torch.distributions.MultivariateNormal(self.b, cov).log_prob(x.flatten(-3))

    @torch.no_grad()
    def sample_x(self, n: int, seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        z = torch.randn(n, self.latent_dim, generator=g, dtype=F64)
        eps = torch.randn(n, *self.image_shape, generator=g, dtype=F64)
        return self.decoder(z) + self.noise * eps


def repeated_log_weights(bound, model, x, n: int) -> torch.Tensor:
    """(n, B) log weights, n independent draws per image."""
    with torch.no_grad():
        return bound.log_weight(model, x.repeat(n, 1, 1, 1)).view(n, x.shape[0])


def relative_weight_variance(log_w: torch.Tensor) -> torch.Tensor:
    """var(w) / E[w]^2 per image from (n, B) log weights."""
    w = torch.exp(log_w - log_w.max(0).values)
    return w.var(0) / w.mean(0) ** 2


def hvi_bound(model, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    options = dict(transitions=1, leapfrog_steps=3, init_step=0.1, aux_hidden=8) | kwargs
    return bounds.HVIBound(model, **options).eval()


def flow_bound(model, flow: str, seed: int = 0, scale: float = 0.3):
    """An amortized flow bound with every parameter perturbed, so each layer is far from the identity."""
    torch.manual_seed(seed)
    bound = bounds.FlowBound(model, flow=flow, n_layers=3, hidden=8, context_hidden=8).eval()
    with torch.no_grad():
        for p in bound.parameters():
            p.add_(scale * torch.randn_like(p))
    return bound


def make_bound(which: str, model):
    if which == "vae":
        return bounds.VAEBound()
    return hvi_bound(model) if which == "hvi" else flow_bound(model, which)


BOUNDS = ["vae", "hvi", "planar", "iaf"]


@pytest.fixture(scope="module")
def ppca():
    model = LinearGaussianVAE()
    x = model.sample_x(16)
    return model, x, model.log_marginal(x)


@pytest.mark.parametrize("which", BOUNDS)
def test_bounds_lie_below_the_exact_log_marginal(ppca, which):
    model, x, log_p = ppca
    torch.manual_seed(0)
    bound = make_bound(which, model)
    n = 20_000
    log_w = repeated_log_weights(bound, model, x, n)
    assert torch.isfinite(log_w).all()
    elbo, se = log_w.mean(0), log_w.std(0) / math.sqrt(n)
    gap = log_p - elbo
    assert (gap > Z_LIMIT * se).all(), f"{which}: bound not below log p(x): gap {gap}, s.e. {se}"
    if which == "vae":  # the training objective (KL in closed form) has the same mean as E[log w]
        with torch.no_grad():
            objective = bound.objective(model, x.repeat(n, 1, 1, 1)).view(n, -1)
        diff = objective.mean(0) - elbo
        diff_se = torch.sqrt(objective.var(0) / n + se**2)
        assert (diff.abs() < Z_LIMIT * diff_se).all(), (diff, diff_se)
        # the gap is KL(q || p(z | x)), known here: per dimension 0.5 (inflate - 1 + shift^2 - log inflate)
        kl = 0.5 * model.latent_dim * (model.inflate - 1 + model.shift**2 - math.log(model.inflate))
        assert ((gap - kl).abs() < Z_LIMIT * se).all(), (gap, kl, se)


@pytest.mark.parametrize("which", BOUNDS)
def test_importance_sampling_estimate_approaches_log_marginal(ppca, which):
    model, x, log_p = ppca
    bound = make_bound(which, model)
    torch.manual_seed(1)
    rms = {}
    estimates = {}
    with torch.no_grad():
        for k in (1, 10, 100, 10_000):
            estimates[k] = evaluate.log_marginal_estimates(model, bound, x, k, chunk=10_000)
            assert estimates[k].shape == log_p.shape
            rms[k] = float(torch.sqrt(((estimates[k] - log_p) ** 2).mean()))
    assert rms[1] > rms[10] > rms[100] > rms[10_000], rms
    # delta method: sd(log mean_k w) ~ sqrt(var(w) / E[w]^2 / k), bias ~ -var(w) / E[w]^2 / (2k)
    k = 10_000
    rel_var = relative_weight_variance(repeated_log_weights(bound, model, x, 20_000))
    tolerance = Z_LIMIT * torch.sqrt(rel_var / k) + rel_var / (2 * k)
    signed = estimates[k] - log_p
    if which != "hvi":  # light-tailed weights: the per-image delta-method tolerance is reliable
        assert (signed.abs() < tolerance).all(), f"{which}: errors {signed.abs()} above tolerances {tolerance}"
    else:  # HVI's auxiliary weights are heavy-tailed, so 20,000 draws can underestimate var(w) for one image;
        # check the 16 images together: their mean error is within Monte Carlo error of zero
        allowance = Z_LIMIT * signed.std() / math.sqrt(len(signed)) + (rel_var / (2 * k)).mean()
        assert signed.mean().abs() < allowance, f"{which}: mean error {signed.mean()} above {allowance}"
    # the gain is large, not noise: at k = 1 the estimate is off by about the bound's gap (0.5 nats or more)
    assert rms[10_000] < 0.1 * rms[1]


class SignFlippedFlowBound(bounds.FlowBound):
    """Negative control: the flow's log-determinant enters with the wrong sign."""

    def transform(self, x, z):
        z, log_det = super().transform(x, z)
        return z, -log_det


@pytest.mark.parametrize("flow", ["planar", "iaf"])
def test_a_wrong_flow_log_det_is_caught(ppca, flow):
    """The importance-sampling check above fails when the flow's log-determinant has the wrong sign."""
    model, x, log_p = ppca
    good = flow_bound(model, flow)
    wrong = SignFlippedFlowBound(model, flow=flow, n_layers=3, hidden=8, context_hidden=8).eval()
    wrong.load_state_dict(good.state_dict())
    torch.manual_seed(1)
    with torch.no_grad():
        estimate = evaluate.log_marginal_estimates(model, wrong, x, 10_000, chunk=10_000)
    assert float((estimate - log_p).abs().mean()) > 0.1


@pytest.mark.parametrize("flow", ["planar", "iaf"])
def test_amortized_flow_log_det_matches_the_autograd_jacobian(ppca, flow):
    model, x, _ = ppca
    bound = flow_bound(model, flow, seed=3)
    z = torch.randn(4, model.latent_dim, generator=torch.Generator().manual_seed(5), dtype=F64)
    xs = x[:4]
    with torch.no_grad():
        log_det = bound.transform(xs, z)[1]
    for i in range(4):
        jac = torch.autograd.functional.jacobian(lambda row: bound.transform(xs[i:i + 1], row[None])[0][0], z[i])
        assert not torch.allclose(jac, torch.eye(model.latent_dim, dtype=F64), atol=1e-2)  # not the identity
        assert float(log_det[i]) == pytest.approx(float(torch.linalg.slogdet(jac)[1]), abs=1e-10)


@pytest.mark.parametrize("flow", ["planar", "iaf"])
def test_training_the_flow_closes_most_of_the_encoders_gap(ppca, flow):
    """With the (deliberately wrong) encoder fixed, training only the flow tightens the bound: the gap
    log p(x) - ELBO falls below a tenth of the encoder's own KL(q || p(z | x))."""
    model, x, log_p = ppca
    torch.manual_seed(0)
    bound = bounds.FlowBound(model, flow=flow, n_layers=4, hidden=16, context_hidden=16)
    optim = torch.optim.Adam(bound.parameters(), lr=0.01)
    batch = x.repeat(64, 1, 1, 1)
    for _ in range(400):
        optim.zero_grad()
        (-bound.objective(model, batch).mean()).backward()
        optim.step()
    n = 4000
    log_w = repeated_log_weights(bound.eval(), model, x, n)
    gap = float((log_p - log_w.mean(0)).mean())
    se = float(log_w.std(0).mean()) / math.sqrt(n * len(x))
    kl = 0.5 * model.latent_dim * (model.inflate - 1 + model.shift**2 - math.log(model.inflate))
    assert -Z_LIMIT * se < gap < 0.1 * kl, (gap, kl, se)  # measured: 0.011 (planar), 0.006 (iaf) of 0.557


def test_exact_posterior_gives_constant_log_weight(ppca):
    _, x, log_p = ppca
    exact = LinearGaussianVAE(shift=0.0, inflate=1.0)
    torch.manual_seed(2)
    log_w = repeated_log_weights(bounds.VAEBound(), exact, x, 1000)
    assert float(log_w.std(0).max()) < 1e-10
    assert torch.allclose(log_w, log_p.expand_as(log_w), atol=1e-10, rtol=0)
    with torch.no_grad():
        one = evaluate.log_marginal_estimates(exact, bounds.VAEBound(), x, 1)
    assert torch.allclose(one, log_p, atol=1e-10, rtol=0)


def test_log_marginal_estimates_rejects_k_below_one(ppca):
    model, x, _ = ppca
    for k in (0, -3, 2.5, True):
        with pytest.raises(BayesxError, match="eval.k"):
            evaluate.log_marginal_estimates(model, bounds.VAEBound(), x, k)


# --- the generalized leapfrog (RMHVI) -------------------------------------------------------------------
def gaussian(d: int = 3, seed: int = 0):
    """log N(z; mu, P^-1) up to a constant, with a dense precision P, and its gradient."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64)
    precision = a @ a.T / d + 0.5 * torch.eye(d, dtype=F64)
    mu = torch.randn(d, generator=g, dtype=F64)

    def log_joint(z):
        r = z - mu
        return -0.5 * ((r @ precision) * r).sum(-1)

    def grad(z):
        return -(z - mu) @ precision

    return log_joint, grad


def ordinary_leapfrog(grad, z, p, step, num_steps, inv_mass):
    """Leapfrog for H = -log p(z) + p^T M^-1 p / 2 with M = diag(1 / inv_mass)."""
    for _ in range(num_steps):
        p = p + 0.5 * step * grad(z)
        z = z + step * inv_mass * p
        p = p + 0.5 * step * grad(z)
    return z, p


def test_generalized_leapfrog_with_constant_metric_is_the_ordinary_leapfrog():
    d = 3
    log_joint, grad = gaussian(d)
    g = torch.Generator().manual_seed(3)
    z = torch.randn(4, d, generator=g, dtype=F64)
    p = torch.randn(4, d, generator=g, dtype=F64)
    mass = torch.tensor([0.5, 2.0, 1.3], dtype=F64)
    step = torch.tensor([0.1, 0.2, 0.05], dtype=F64)
    z1, p1 = riemann.generalized_leapfrog(log_joint, lambda w: mass.expand_as(w), z, p, step, num_steps=7)
    z2, p2 = ordinary_leapfrog(grad, z, p, step, 7, 1.0 / mass)
    assert torch.allclose(z1, z2, atol=1e-10, rtol=0) and torch.allclose(p1, p2, atol=1e-10, rtol=0)
    assert not torch.allclose(z1, z, atol=1e-3)  # it moved


def position_metric(z):
    """A genuinely z-dependent, non-separable, positive diagonal metric."""
    return 1.0 + z**2 + 0.5 * torch.tanh(z.sum(-1, keepdim=True))


def flow_jacobian(fn, z, p):
    d = z.shape[-1]

    def flat(u):
        z_new, p_new = fn(u[:d], u[d:])
        return torch.cat([z_new, p_new])

    return torch.autograd.functional.jacobian(flat, torch.cat([z, p]))


def symplectic_form(step):
    """[[0, S^-1], [-S^-1, 0]] with S = diag(step): per-dimension steps are a scalar step in the momenta
    p / step, so the map preserves this form (the usual one for a scalar step) and hence volume."""
    inv, zero = torch.diag(1.0 / step), torch.zeros(len(step), len(step), dtype=F64)
    return torch.cat([torch.cat([zero, inv], 1), torch.cat([-inv, zero], 1)], 0)


def test_generalized_leapfrog_is_volume_preserving_and_symplectic():
    d = 2
    log_joint, _ = gaussian(d, seed=1)
    z, p = torch.tensor([0.3, -0.7], dtype=F64), torch.tensor([0.9, 0.4], dtype=F64)
    step = torch.tensor([0.15, 0.1], dtype=F64)

    def solved(iters):
        return lambda z_, p_: riemann.generalized_leapfrog(log_joint, position_metric, z_, p_, step, num_steps=3,
                                                           momentum_iters=iters, position_iters=iters,
                                                           create_graph=True)

    jac = flow_jacobian(solved(50), z, p)
    assert abs(float(torch.linalg.det(jac)) - 1.0) < 1e-8
    omega = symplectic_form(step)
    assert torch.allclose(jac.T @ omega @ jac, omega, atol=1e-8, rtol=0)
    # negative control: with unconverged implicit steps the map is visibly not volume preserving,
    # so the check above has the power to see a wrong integrator
    rough = flow_jacobian(solved(1), z, p)
    assert abs(float(torch.linalg.det(rough)) - 1.0) > 1e-4


def test_generalized_leapfrog_does_not_depend_on_the_graph_of_its_input():
    """In training z carries the encoder's graph: the dynamics must be the same as for a detached z
    (grad_z H is a partial derivative at fixed momentum, even though p_half was computed from z)."""
    d = 2
    log_joint, _ = gaussian(d, seed=1)
    z, p = torch.tensor([0.3, -0.7], dtype=F64), torch.tensor([0.9, 0.4], dtype=F64)
    step = torch.tensor([0.15, 0.1], dtype=F64)
    plain = riemann.generalized_leapfrog(log_joint, position_metric, z, p, step, 2, momentum_iters=5)
    leaf = z.clone().requires_grad_(True)
    tracked = riemann.generalized_leapfrog(log_joint, position_metric, 2.0 * leaf - z, p, step, 2, momentum_iters=5,
                                           create_graph=True)
    for a, b in zip(plain, tracked):
        assert torch.allclose(a, b.detach(), atol=1e-12, rtol=0)
    (tracked[0].sum() + tracked[1].sum()).backward()  # and gradients flow back to the encoder's side
    assert leaf.grad is not None and torch.isfinite(leaf.grad).all()


def test_generalized_leapfrog_conserves_the_hamiltonian_for_small_steps():
    d = 2
    log_joint, _ = gaussian(d, seed=1)
    z, p = torch.tensor([0.3, -0.7], dtype=F64), torch.tensor([0.9, 0.4], dtype=F64)
    h0 = float(riemann.hamiltonian(log_joint, position_metric, z, p))
    errors = []
    for eps, n in ((0.02, 25), (0.01, 50)):  # the same trajectory length
        z1, p1 = riemann.generalized_leapfrog(log_joint, position_metric, z, p, torch.full((d,), eps, dtype=F64), n,
                                              momentum_iters=30, position_iters=30)
        assert not torch.allclose(z1, z, atol=1e-2)
        errors.append(abs(float(riemann.hamiltonian(log_joint, position_metric, z1, p1)) - h0))
    assert errors[1] < 1e-3
    assert errors[1] < 0.5 * errors[0]  # second order: about a quarter when the step halves


# --- HVI's leapfrog and step sizes on a tiny real VAE -----------------------------------------------------
@pytest.fixture(scope="module")
def tiny_vae():
    rng = np.random.default_rng(0)
    data = SimpleNamespace(x_train=rng.random((8, 1, 4, 4), dtype=np.float32), y_train=np.zeros(8, dtype=np.int64),
                           x_test=rng.random((4, 1, 4, 4), dtype=np.float32), y_test=np.zeros(4, dtype=np.int64))
    torch.manual_seed(0)
    model = VAEModel(data, arch="fc", latent_dim=2, precision="float64")
    x = torch.bernoulli(torch.as_tensor(data.x_train[:1], dtype=F64))
    return model, x


def test_hvi_leapfrog_is_reversible(tiny_vae):
    model, x = tiny_vae
    x = x.repeat(3, 1, 1, 1)
    g = torch.Generator().manual_seed(4)
    z, v = torch.randn(3, 2, generator=g, dtype=F64), torch.randn(3, 2, generator=g, dtype=F64)
    step = torch.tensor([0.2, 0.05], dtype=F64)
    z1, v1 = bounds.leapfrog(model, x, z, v, step, 4, create_graph=False)
    assert not torch.allclose(z1, z, atol=1e-3)
    z0, v0 = bounds.leapfrog(model, x, z1, -v1, step, 4, create_graph=False)
    assert torch.allclose(z0, z, atol=1e-10, rtol=0) and torch.allclose(-v0, v, atol=1e-10, rtol=0)


def test_hvi_leapfrog_is_volume_preserving(tiny_vae):
    model, x = tiny_vae
    step = torch.tensor([0.2, 0.05], dtype=F64)

    def flow(z, v):
        z1, v1 = bounds.leapfrog(model, x, z[None], v[None], step, 3, create_graph=True)
        return z1[0], v1[0]

    jac = flow_jacobian(flow, torch.tensor([0.4, -0.2], dtype=F64), torch.tensor([-1.0, 0.6], dtype=F64))
    assert not torch.allclose(jac, torch.eye(4, dtype=F64), atol=1e-3)
    assert abs(float(torch.linalg.det(jac)) - 1.0) < 1e-10


def test_hvi_step_sizes_stay_in_bounds(tiny_vae):
    model, _ = tiny_vae
    bound = bounds.HVIBound(model, transitions=2, aux_hidden=8)
    with torch.no_grad():
        bound.raw_step.copy_(torch.tensor([[-50.0, 50.0], [math.log(0.2), -7.0]]))
    steps = bound.step_sizes().detach()
    assert float(steps.min()) >= bounds.STEP_MIN and float(steps.max()) <= bounds.STEP_MAX
    expected = torch.tensor([[bounds.STEP_MIN, bounds.STEP_MAX], [0.2, bounds.STEP_MIN]], dtype=F64)
    assert torch.allclose(steps, expected)
    for bad in (0.0, 0.6):
        with pytest.raises(BayesxError, match="method.init_step"):
            bounds.HVIBound(model, init_step=bad)


# --- training on the vendored MNIST digits ----------------------------------------------------------------
@pytest.fixture(scope="module")
def mnist_small():
    return load_images("mnist", n_train=256, n_test=64)


@pytest.fixture(scope="module")
def mnist_tiny():
    return load_images("mnist", n_train=64, n_test=16)


def train(method, data, tmp_path=None, seed=0):
    torch.manual_seed(seed)
    model = VAEModel(data, arch="fc")
    result = method.train(model, RunInputs(None, torch.Generator().manual_seed(seed), progress=False,
                                           artifact_dir=tmp_path))
    return model, result


METHODS = {
    "vae": lambda: VAE(epochs=2, eval={"k": 5}),
    "hvi": lambda: HVI(leapfrog_steps=2, epochs=2, eval={"k": 5, "n_test": 16}),
    "flowvae-planar": lambda: FlowVAE(flow="planar", n_layers=3, epochs=2, eval={"k": 5, "n_test": 16}),
    "flowvae-iaf": lambda: FlowVAE(flow="iaf", n_layers=2, hidden=16, epochs=2, eval={"k": 5, "n_test": 16}),
    "rmhvi": lambda: RMHVI(leapfrog_steps=1, fisher_samples=2, fixed_point_iters=2, epochs=2,
                           eval={"k": 5, "n_test": 16}),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_training_smoke(name, mnist_small, mnist_tiny, tmp_path):
    data = mnist_tiny if name == "rmhvi" else mnist_small
    model, result = train(METHODS[name](), data, tmp_path)
    assert result.error is None and not result.interrupted
    for key in ("test_elbo", "test_nll", "train_elbo", "time_per_epoch_s"):
        assert key in result.metrics and math.isfinite(result.metrics[key]), (key, result.metrics)
    assert result.metrics["test_elbo"] < 0 and result.metrics["train_elbo"] < 0 and result.metrics["test_nll"] > 0
    assert result.metrics["epochs"] == 2 and result.metrics["time_per_epoch_s"] > 0
    for trace in ("train_elbo", "test_elbo"):
        assert [step for step, _ in result.traces[trace]] == [1, 2], result.traces[trace]
        assert all(math.isfinite(v) for _, v in result.traces[trace])
    assert result.tags["bound"] == name.split("-")[0]
    files = {Path(p).name for paths in result.artifacts.values() for p in paths}
    assert files == {"weights.pt", "samples.png", "reconstructions.png"}
    assert all((tmp_path / f).stat().st_size > 0 for f in files)
    saved = torch.load(tmp_path / "weights.pt", weights_only=True)
    assert {"model", "bound", "arch"} <= set(saved) and saved["arch"] == "fc"
    assert saved["model"].keys() == model.state_dict().keys()
    if name in ("hvi", "rmhvi"):
        assert "raw_step" in saved["bound"]
    if name.startswith("flowvae"):
        assert any(key.startswith("context.") for key in saved["bound"])

    if name == "vae":  # test_nll (k = 5, all test images) is an IWAE bound: -test_nll >= test_elbo on average
        x_test, _ = model.tensors("test")
        assert result.metrics["eval_n_test"] == len(x_test)
        torch.manual_seed(7)
        repeats = 10
        with torch.no_grad():
            elbos = torch.stack([bounds.VAEBound().objective(model, x_test).mean() for _ in range(repeats)])
            iwae = torch.stack([evaluate.log_marginal_estimates(model, bounds.VAEBound(), x_test, 5).mean()
                                for _ in range(repeats)])
        mc_error = float(torch.sqrt(elbos.var() + iwae.var()))  # of one test_elbo and one test_nll
        assert -result.metrics["test_nll"] >= result.metrics["test_elbo"] - 3 * mc_error, (result.metrics, mc_error)


def test_training_without_artifact_dir_writes_nothing(mnist_tiny):
    _, result = train(VAE(epochs=1, eval={"k": 2}), mnist_tiny)
    assert result.artifacts == {} and "test_nll" in result.metrics


def test_nan_loss_stops_training_and_restores_the_last_epoch(mnist_small, tmp_path, monkeypatch):
    original = bounds.VAEBound.objective
    batches_per_epoch = math.ceil(mnist_small.n_train / 64)
    seen = {"calls": 0}

    def objective(self, model, x):
        if not self.training:  # the per-epoch test ELBO
            return original(self, model, x)
        seen["calls"] += 1
        if seen["calls"] == batches_per_epoch + 1:  # epoch 2, batch 1: the weights are those of epoch 1
            seen["epoch1"] = {k: v.clone() for k, v in model.state_dict().items()}
        if seen["calls"] == batches_per_epoch + 3:  # epoch 2, batch 3
            seen["at_nan"] = {k: v.clone() for k, v in model.state_dict().items()}
            return torch.full((x.shape[0],), float("nan"), dtype=x.dtype)
        return original(self, model, x)

    monkeypatch.setattr(bounds.VAEBound, "objective", objective)
    model, result = train(VAE(epochs=3, batch_size=64, eval={"k": 2}), mnist_small, tmp_path)
    assert result.error is not None and "epoch 2, batch 3" in result.error and "NaN" in result.error
    assert "\n" not in result.error
    assert not result.interrupted
    assert seen["calls"] == batches_per_epoch + 3  # training stopped at once
    assert len(result.traces["train_elbo"]) == 1 and result.metrics["epochs"] == 1
    assert "test_nll" not in result.metrics  # no final evaluation of a failed training
    state = model.state_dict()
    assert all(torch.equal(state[k], seen["epoch1"][k]) for k in state)
    assert any(not torch.equal(state[k], seen["at_nan"][k]) for k in state)  # restoring did something
    saved = torch.load(tmp_path / "weights.pt", weights_only=True)  # what it had is saved
    assert all(torch.equal(saved["model"][k], seen["epoch1"][k]) for k in state)


def test_nan_in_the_first_epoch_keeps_the_models_own_weights(mnist_tiny, monkeypatch):
    """No epoch finished, nothing to restore: in particular not the snapshot of an earlier fit of the same method."""
    method = VAE(epochs=1, eval={"k": 2})
    train(method, mnist_tiny)
    monkeypatch.setattr(bounds.VAEBound, "objective", lambda self, model, x: torch.full((x.shape[0],), float("nan")))
    torch.manual_seed(5)
    model = VAEModel(mnist_tiny, arch="fc")
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    result = method.train(model, RunInputs(None, torch.Generator().manual_seed(0), progress=False))
    assert "epoch 1, batch 1" in result.error and result.metrics["epochs"] == 0
    assert all(torch.equal(v, initial[k]) for k, v in model.state_dict().items())


# --- bayesx run model=vae ----------------------------------------------------------------------------------
ONE_THREAD = ["device.num_threads=1", "progress=false"]
TINY_DATA = ["data.n_train=128", "data.n_test=32", "method.eval.k=3", *ONE_THREAD]
SMALL = ["method.epochs=1", *TINY_DATA]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "vae") as s:
        yield s


def artifact_paths(uri: str, run, folder: str | None = None) -> set[str]:
    return {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id, folder)}


def check_vae_run(uri: str, run, method: str, data: str, n_train: int = 128, n_test: int = 32):
    metrics, tags = run.data.metrics, run.data.tags
    assert (tags["method"], tags["model"], tags["data"]) == (method, "vae", data)
    assert (tags["target.data_n_train"], tags["target.data_n_test"]) == (str(n_train), str(n_test))
    for key in ("test_elbo", "test_nll", "train_elbo", "time_per_epoch_s"):
        assert key in metrics and math.isfinite(metrics[key]), (key, metrics)
    history = MlflowClient(tracking_uri=uri).get_metric_history(run.info.run_id, "test_elbo")
    assert [m.step for m in history] == [1]
    assert "weights/weights.pt" in artifact_paths(uri, run, "weights")
    assert {"plots/samples.png", "plots/reconstructions.png"} <= artifact_paths(uri, run, "plots")


def test_default_data_keeps_data_overrides():
    """model=vae without data= takes data=mnist, and data.KEY=VALUE given on the command line still apply."""
    from bayesx.cli.config import compose
    from bayesx.runner import apply_data_default

    overrides = ["model=vae", "method=vae", "data.n_train=128", "data.seed=3"]
    cfg, choices = compose(overrides), {"model": "vae", "data": "synthetic", "method": "vae"}
    apply_data_default(cfg, choices, overrides)
    assert choices["data"] == "mnist" and cfg.data.name == "mnist"
    assert (cfg.data.n_train, cfg.data.seed, cfg.data.n_test) == (128, 3, None)
    given = ["model=vae", "data=synthetic"]  # an explicit data= is kept (and then rejected by the model)
    cfg, choices = compose(given), {"model": "vae", "data": "synthetic"}
    apply_data_default(cfg, choices, given)
    assert choices["data"] == "synthetic" and "n_features" in cfg.data


def test_cli_hvi_defaults_to_mnist(store):
    _, uri = store
    run = run_ok(uri, ["run", "model=vae", "method=hvi", "method.leapfrog_steps=2", *SMALL])
    check_vae_run(uri, run, "hvi", "mnist")
    assert run.data.tags["bound"] == "hvi"
    assert run.data.params["method.leapfrog_steps"] == "2"


def test_cli_flowvae(store):
    _, uri = store
    run = run_ok(uri, ["run", "model=vae", "method=flowvae", "method.flow=iaf", "method.n_layers=2", *SMALL])
    check_vae_run(uri, run, "flowvae", "mnist")
    assert run.data.tags["bound"] == "flowvae" and run.data.params["method.flow"] == "iaf"


@pytest.mark.skipif(registry.get_dataset("fashion_mnist").present_dir() is None,
                    reason="Fashion-MNIST is not installed here")
def test_cli_vae_on_fashion_mnist(store):
    _, uri = store
    run = run_ok(uri, ["run", "model=vae", "method=vae", "data=fashion_mnist", *SMALL])
    check_vae_run(uri, run, "vae", "fashion_mnist")


@pytest.mark.parametrize("argv, needles", [
    (["model=vae", "method=vae", "model.arch=conv_cifar"], ["model.arch=conv_cifar", "(3, 32, 32)", "(1, 28, 28)"]),
    (["model=vae", "method=vae", "method.eval.k=0"], ["eval.k", "0"]),
    (["model=vae", "method=vae", "model.arch=bogus"], ["model.arch", "'bogus'"]),
    (["model=vae", "method=hvi", "method.leapfrog_steps=0"], ["method.leapfrog_steps", "0"]),
    (["model=vae", "method=vae", "data=synthetic"], ["model=vae", "image data"]),
    (["model=logreg", "method=vae"], ["method=vae", "model=vae"]),
    (["model=logreg", "method=hvi"], ["method=hvi", "model=vae"]),
    (["model=vae", "method=flowvae", "method.flow=radial"], ["method.flow", "planar, iaf"]),
    (["model=vae", "method=flowvae", "method.n_layers=0"], ["method.n_layers", "0"]),
    (["model=vae"], ["method=nuts", "model=vae", "method=vae"]),  # the global default method samples
    (["model=vae", "method=vae", "data.n_features=3"], ["data.n_features", "data=mnist"]),  # a synthetic-only key
], ids=["conv_cifar_on_mnist", "eval_k_0", "unknown_arch", "leapfrog_steps_0", "synthetic_data", "vae_on_logreg",
        "hvi_on_logreg", "flowvae_unknown_flow", "flowvae_no_layers", "sampler_on_vae", "key_of_other_data"])
def test_bad_input_is_rejected_before_a_run(bad_env, argv, needles):
    assert_rejected(["run", *argv, *ONE_THREAD], bad_env, *needles)


def test_cli_nan_loss_fails_the_run_with_what_it_had(bad_env, monkeypatch):
    original = bounds.VAEBound.objective
    seen = {"calls": 0}

    def objective(self, model, x):
        if self.training:
            seen["calls"] += 1
            if seen["calls"] == 3:  # 128 images in batches of 64: epoch 2, batch 1
                return torch.full((x.shape[0],), float("nan"), dtype=x.dtype)
        return original(self, model, x)

    monkeypatch.setattr(bounds.VAEBound, "objective", objective)
    argv = ["run", "model=vae", "method=vae", "method.epochs=2", "method.batch_size=64", *TINY_DATA]
    assert_rejected(argv, bad_env, "NaN loss at epoch 2, batch 1", "method.lr", may_fail_a_run=True)
    run = max(all_runs(bad_env), key=lambda r: r.info.start_time)
    assert run.info.status == "FAILED" and run.data.tags["data"] == "mnist"
    assert run.data.metrics["epochs"] == 1 and "test_nll" not in run.data.metrics
    assert "weights/weights.pt" in artifact_paths(bad_env, run, "weights")


def test_architecture_sizes_are_overridable():
    """model.enc_hidden / dec_hidden / channels / fc_units change the networks; bad sizes are one-line errors."""
    from bayesx.errors import BayesxError
    from bayesx.methods.vae.nets import build_encoder_decoder

    enc, dec = build_encoder_decoder("fc", (1, 28, 28), 5, enc_hidden=[50], dec_hidden=[40, 30])
    assert [m.out_features for m in enc.modules() if isinstance(m, torch.nn.Linear)] == [50, 10]
    assert [m.out_features for m in dec.modules() if isinstance(m, torch.nn.Linear)] == [40, 30, 784]
    enc, dec = build_encoder_decoder("conv", (1, 28, 28), 5, channels=[4, 8, 8], fc_units=32)
    out = dec(torch.zeros(3, 5))
    assert out.shape == (3, 1, 28, 28) and enc(out)[0].shape == (3, 5)
    with pytest.raises(BayesxError, match="model.channels"):
        build_encoder_decoder("conv", (1, 28, 28), 5, channels=[4, 8])


def test_conv_cifar_pipeline_on_generated_cifar10_files(store):
    """Zhang (2018) Table 5.5's pipeline end to end: CIFAR-10 python-format files (generated here: no network),
    data=cifar10, arch=conv_cifar, HVI with 4 leapfrog steps."""
    from bayesx.data.cifar10 import write_cifar10_batches

    root, uri = store
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(60, 3, 32, 32), dtype=np.uint8)
    write_cifar10_batches(root / "data" / "cifar10" / "cifar-10-batches-py", images, rng.integers(0, 10, size=60))
    run = run_ok(uri, ["run", "model=vae", "model.arch=conv_cifar", "data=cifar10", "method=hvi",
                       "method.leapfrog_steps=4", "method.epochs=1", "method.eval.k=2", "method.eval.n_test=4"])
    assert (run.data.tags["data"], run.data.tags["target.arch"], run.data.tags["target.latent_dim"]) == \
        ("cifar10", "conv_cifar", "40")
    assert math.isfinite(run.data.metrics["test_elbo"]) and math.isfinite(run.data.metrics["test_nll"])


def test_conv_arch_trains_on_mnist(store):
    run = run_ok(store[1], ["run", "model=vae", "model.arch=conv", "method=vae", *SMALL])
    assert run.data.tags["target.arch"] == "conv" and math.isfinite(run.data.metrics["test_nll"])


@pytest.mark.parametrize("cls, options, needle", [
    ("RMHVI", {"fisher_samples": 0}, "method.fisher_samples"),
    ("RMHVI", {"fixed_point_iters": 1.5}, "method.fixed_point_iters"),
    ("HVI", {"init_step": 0.9}, "method.init_step"),
    ("HVI", {"transitions": 0}, "method.transitions"),
])
def test_hvi_options_are_checked_when_the_method_is_built(cls, options, needle):
    """Bad bound settings stop when the method is built (before any run is recorded), not at fit time."""
    from bayesx.errors import BayesxError
    from bayesx.methods.vae import hvi as methods

    with pytest.raises(BayesxError, match=needle):
        getattr(methods, cls)(**options)
