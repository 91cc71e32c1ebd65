"""The posteriordb suite's second tier (bayesx/targets/posteriordb/suite.py, TIER2): posteriors where a run takes
minutes, each checked as the first tier is (tests/test_posteriordb.py) and against what is known exactly:

- the listing: at least eight, one of each kind the suite promises (stochastic volatility with 100+ latent
  states, 500+ groups, a GLM on 100,000+ rows, 200+ latent Gaussian values, a horseshoe on 200+ coefficients,
  1,000+ dimensions), each file small, each reference made by an R-hat-checked long run;
- the torch density (written as a user writes it) and the independent xp (numpy) transcription agree, and
  torch's gradient agrees with finite differences of the numpy transcription;
- Stein's identity holds on the reference draws and fails with a log-Jacobian term dropped;
- the exact parts: the hierarchical normal's group effects and the local-level states are Gaussian given the
  other parameters, so their reference draws must match those conditionals (Rao-Blackwell);
- the GLM's 100,000-row design is made from its seed bit for bit; ``model=posteriordb model.name=<tier 2>`` runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bayesx.targets.posteriordb import DATA, NAMES, TIER2_NAMES, load
from bayesx.targets.posteriordb.target import PosteriorDB, reference_errors

Z_LIMIT = 5.0  # |z| of a mean: a false alarm has probability ~6e-7 per coordinate (1,042 coordinates: ~6e-4)


def test_the_second_tier_lists_one_posterior_of_each_promised_kind():
    assert len(TIER2_NAMES) >= 8 and len(NAMES) == 46 and not set(NAMES) & set(TIER2_NAMES)
    posts = {name: load(name) for name in TIER2_NAMES}
    for name, post in posts.items():
        assert post.entry.tier == 2 and post.entry.kind, name
        assert len(post.coordinates) == post.dim == len(post.param_names) == post.reference.shape[1], name
        assert (DATA / f"{post.entry.file}.npz").stat().st_size < 5e6, name
        info = json.loads(post.info)
        assert len(post.reference) >= 1000 and info["kept"] == len(post.reference), name
        assert info["rhat_max"] <= 1.01 and info["rhat_max_constrained"] <= 1.01, (name, info)
        assert info["chains"] >= 4 and info["chains"] * info["draws_per_chain"] >= 10_000, (name, info)
    assert posts["sv_latent"].entry.loop_steps >= 100 and posts["sv_latent"].dim > 100
    assert len(posts["hier_normal"].data["n_per_group"]) >= 500
    assert posts["logistic_100k"].data["X"].shape[0] >= 100_000
    assert posts["gp_latent_poisson"].data["k"].shape[0] >= 200
    assert posts["horseshoe"].data["X"].shape[1] >= 200
    assert max(post.dim for post in posts.values()) >= 1000


# the torch density against its transcription, and its gradient against finite differences: tests/test_posteriordb.py,
# parametrized over both tiers


@pytest.mark.parametrize("name", TIER2_NAMES)
def test_unconstraining_inverts_constraining(name):
    post = load(name)
    rows = post.reference[:50].astype(np.float64)
    back = post.torch_model().constrain(torch.tensor(post.unconstrain(rows))).numpy()
    np.testing.assert_allclose(back, rows, rtol=1e-6, atol=1e-6 * np.abs(rows).max())


# --- Stein's identity on the reference draws -------------------------------------------------------------------
STEIN_DRAWS = {"logistic_100k": 200}  # evenly spaced reference draws used (default all): the GLM's gradient at
# 1,000 draws is 10^8 logits, tens of seconds on a loaded 2-core machine


def stein_z(post, drop: tuple[str, ...] = (), chunk: int = 500) -> np.ndarray:
    """Per unconstrained coordinate: the mean of d log p / dq over the reference draws in standard errors, the
    draws taken ``chunk`` at a time."""
    reference = post.reference
    if post.name in STEIN_DRAWS:
        reference = reference[::len(reference) // STEIN_DRAWS[post.name]]
    model, u = post.torch_model(), post.unconstrain(reference.astype(np.float64))
    parts = []
    for i in range(0, len(u), chunk):
        q = torch.tensor(u[i:i + chunk], requires_grad=True)
        parts.append(torch.autograd.grad(model.log_prob(q, drop).sum(), q)[0].numpy())
    g = np.concatenate(parts)
    return g.mean(0) / (g.std(0, ddof=1) / np.sqrt(len(g)))


@pytest.mark.parametrize("name", TIER2_NAMES)
def test_stein_identity_holds_on_the_reference_draws(name):
    z = stein_z(load(name))
    assert np.isfinite(z).all() and np.abs(z).max() < Z_LIMIT, np.round(z[np.abs(z) >= Z_LIMIT], 2)


# A dropped Jacobian shifts one coordinate's mean gradient by about 1, visible where the gradient's sd is small
# against sqrt(draws kept): not where the data pin the scale down (hier_normal's tau and sigma: |z| 3.1 with 2,000
# draws; local_level's scales: 4.0; hier_logistic's tau: 2.7; horseshoe's tau: 3.2; irt_2pl's sigma_b: 4.9 with
# 1,000; gp_latent_poisson's alpha: 3.2 with 4,000), so hier_normal and local_level are checked by their exact
# conditionals instead.
DETECTABLE = [("sv_latent", "sigma"), ("sv_latent", "phi"), ("horseshoe", "lam")]


@pytest.mark.parametrize("name, block", DETECTABLE)
def test_a_dropped_jacobian_term_fails_the_stein_identity(name, block):
    z = stein_z(load(name), drop=(block,))
    assert np.abs(z).max() > Z_LIMIT, np.round(z, 2)


# --- the exact parts: Gaussian conditionals ---------------------------------------------------------------------
def conditional_z(draws: np.ndarray, means: np.ndarray, sds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per coordinate: w = (draw - conditional mean) / conditional sd is N(0, 1) under the exact posterior, so its
    mean over n (nearly independent) draws is about N(0, 1 / n) (returned as z) and its variance about 1."""
    w = (draws - means) / sds
    return w.mean(0) * np.sqrt(len(w)), w.var(0, ddof=1)


def test_hierarchical_normal_group_effects_match_their_exact_conditional():
    """alpha_j | mu, beta, tau, sigma, y ~ N(m_j, s_j^2), 1 / s_j^2 = 1 / tau^2 + n_j / sigma^2,
    m_j = s_j^2 (mu / tau^2 + sum_(i in j) (y_i - beta x_i) / sigma^2)."""
    post = load("hier_normal")
    d, ref = post.data, post.reference.astype(np.float64)
    mu, beta, tau, sigma, alpha = ref[:, :1], ref[:, 1:2], ref[:, 2:3], ref[:, 3:4], ref[:, 4:]
    n_j, groups = d["n_per_group"], d["g"]
    residual_sums = np.stack([np.bincount(groups, d["y"] - b * d["x"], minlength=len(n_j)) for b in beta[:, 0]])
    precision = 1.0 / tau**2 + n_j / sigma**2
    means = (mu / tau**2 + residual_sums / sigma**2) / precision
    z, var = conditional_z(alpha, means, 1.0 / np.sqrt(precision))
    assert np.abs(z).max() < Z_LIMIT and abs(var.mean() - 1.0) < 0.05, (np.abs(z).max(), var.mean())
    # the control: the draws of another group do not fit group j's conditional
    z_wrong, _ = conditional_z(alpha[:, ::-1], means, 1.0 / np.sqrt(precision))
    assert np.abs(z_wrong).max() > Z_LIMIT


def test_local_level_states_match_the_kalman_smoother():
    """x | sigma_eps, sigma_eta, y ~ N(Q^-1 y / sigma_eps^2, Q^-1), Q = D'D / sigma_eta^2 + I / sigma_eps^2 +
    e_1 e_1' / 100 (D the first differences): tridiagonal, solved per draw."""
    from scipy.linalg import solveh_banded

    post = load("local_level")
    y, ref = post.data["y"], post.reference.astype(np.float64)[::2]
    n = len(y)
    means, sds = np.empty((len(ref), n)), np.empty((100, n))
    for i, (s_eps, s_eta) in enumerate(ref[:, :2]):
        diagonal = np.full(n, 2.0 / s_eta**2) + 1.0 / s_eps**2
        diagonal[[0, -1]] -= 1.0 / s_eta**2
        diagonal[0] += 1.0 / 100.0
        banded = np.stack([np.concatenate([[0.0], np.full(n - 1, -1.0 / s_eta**2)]), diagonal])
        means[i] = solveh_banded(banded, y / s_eps**2)
        if i < len(sds):  # the conditional variances, diag(Q^-1), on a subset of the draws
            sds[i] = np.sqrt(np.diag(solveh_banded(banded, np.eye(n))))
    residual = ref[:, 2:] - means
    z = residual.mean(0) / (residual.std(0, ddof=1) / np.sqrt(len(residual)))
    _, var = conditional_z(ref[:len(sds), 2:], means[:len(sds)], sds)
    assert np.abs(z).max() < Z_LIMIT and abs(var.mean() - 1.0) < 0.1, (np.abs(z).max(), var.mean())
    # the control: the next state's draws do not fit this state's conditional
    wrong = ref[:, 3:] - means[:, :-1]
    assert np.abs(wrong.mean(0) / (wrong.std(0, ddof=1) / np.sqrt(len(wrong)))).max() > Z_LIMIT


# --- the GLM's design, made at load time ---------------------------------------------------------------------
def test_the_glm_design_is_made_from_its_seed_bit_for_bit():
    from bayesx.targets.posteriordb.tier2_xp import design_digest, logistic_design

    x = load("logistic_100k").data["X"]
    with np.load(DATA / "tier2_logistic_100k.npz") as saved:
        assert "data.X" not in saved.files and design_digest(x) == str(saved["design.sha256"])
        assert saved["data.y"].nbytes <= 100_000
    assert x.shape == (100_000, 20)
    np.testing.assert_allclose(x.std(0), 1.0, atol=0.02)
    np.testing.assert_allclose(np.corrcoef(x[:, 0], x[:, 1])[0, 1], 0.5, atol=0.02)
    assert design_digest(logistic_design(1, 1000, 20)) != design_digest(logistic_design(2, 1000, 20))


# --- the target and the command line ---------------------------------------------------------------------------
def test_the_target_reports_errors_against_the_second_tier_reference():
    target = PosteriorDB(name="hier_normal")
    post = target.posterior
    q = torch.tensor(post.unconstrain(post.reference[:1000].astype(np.float64)))
    evaluation = target.evaluate(q.reshape(2, 500, -1))
    assert evaluation.metrics["ref_mean_err_max"] < 0.25 and evaluation.metrics["ref_w1_mean"] < 0.1
    assert "NumPyro" in evaluation.remarks[0] and "hier_normal" in evaluation.remarks[0]
    assert target.describe()["tier"] == "2"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from cli_helpers import isolated_store

    with isolated_store(tmp_path_factory, "posteriordb_tier2") as (root, uri):
        yield root, uri


@pytest.mark.slow  # the CLI's start and a short NUTS run on the 21-dimensional GLM (hier_normal, 604 dimensions,
# 2 x 60 transitions, passed cli_helpers' time limit on a loaded 2-core machine)
def test_a_cli_run_on_a_second_tier_posterior_logs_the_reference_errors(store):
    from cli_helpers import run_ok

    _, uri = store
    run = run_ok(uri, ["run", "model=posteriordb", "model.name=logistic_100k", "method=nuts", "method.num_warmup=20",
                       "method.num_draws=10", "method.max_draws=null", "method.raise_target_accept=[]",
                       "n_chains=2", "progress=false", "plots.n_coords=0"])  # a fixed run: no run-length rules
    assert np.isfinite(run.data.metrics["ref_mean_err_max"])
    assert run.data.tags["target.dim"] == "21" and run.data.tags["target.tier"] == "2"


@pytest.mark.slow  # ~1-2 min on a loaded 2-core machine: NUTS on 604 dimensions in PyTorch
def test_bayesx_nuts_agrees_with_the_second_tier_reference():
    """bayesx's NUTS (4 chains, 500 + 1000) against the NumPyro reference of hier_normal, every constrained
    parameter's mean within Monte Carlo error (tests/test_posteriordb.py's worst_z: both draws' errors)."""
    from test_posteriordb import nuts_constrained, worst_z

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        target = PosteriorDB(name="hier_normal")
        draws = nuts_constrained(target, seed=5)
    finally:
        torch.set_num_threads(saved)
    assert worst_z(draws, target.posterior.reference.astype(np.float64)) < Z_LIMIT


def test_the_horseshoe_scales_are_compared_on_the_log_scale_where_their_moments_exist():
    """The horseshoe's half-Cauchy scales (tau, lambda) keep a Cauchy tail: the reference's own two halves disagree by
    1.8 sds in a raw mean and 45x in a raw sd (the control: the raw scale cannot be the check), and agree within
    0.25 sds in every mean on the log scale (SuiteEntry.compared_on_log); a shift of one log(lambda) by half its sd
    is still seen there. Posteriors without such scales are compared as they are."""
    post = load("horseshoe")
    ref = post.reference.astype(np.float64)
    first, second = ref[::2], ref[1::2]
    raw = reference_errors(first, second)
    assert raw["ref_mean_err_max"] > 1.0 and raw["ref_sd_err_max"] > 10.0
    logged = reference_errors(post.compared(first), post.compared(second))
    assert logged["ref_mean_err_max"] < 0.25
    moved = post.compared(first)
    j = post.param_names.index("lambda[1]")
    moved[:, j] += 0.5 * moved[:, j].std()
    assert reference_errors(moved, post.compared(second))["ref_mean_err_max"] > 0.4
    other = load("sv_latent")
    assert other.compared(other.reference) is other.reference



@pytest.mark.slow  # about 2 s of C compile each
@pytest.mark.parametrize("name", TIER2_NAMES)
def test_every_second_tier_posterior_is_written_as_plain_c_and_equals_autograd(name, tmp_path, monkeypatch):
    """The second tier as users write it (loops over unbound states, torch.distributions, 100,000 rows of data)
    compiles as plain C, never AOTInductor's minutes (local_level's unbound states went there until the writer
    took multi-output views), and its log density and gradient equal autograd's."""
    import shutil

    from bayesx.native import compiled
    from bayesx.native import logistic as native

    if not (native.available() and shutil.which("cc")):
        pytest.skip("no C compiler here")
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(compiled, "_compile", lambda *args: (_ for _ in ()).throw(compiled.NotCompiled("AOT off")))
    target = PosteriorDB(name=name)
    q = target.initial_point(3, torch.Generator().manual_seed(7))
    density = compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
    assert density.compiler == "plain C"
    lp, grad = density.log_prob_and_grad(q)
    expected, expected_grad = target.log_prob_and_grad(q)
    torch.testing.assert_close(lp, expected, rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-9)
