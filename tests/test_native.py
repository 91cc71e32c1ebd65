"""The native (C) backend of the kernels (densities in logistic form: logistic regression, its restriction
to a subspace, the Gaussian as the form without rows): equal to the PyTorch path, gradients against finite
differences, samplers unchanged by it, its C signatures checked at load, targets that only describe their
density, the build at install time, and a clean fallback where no compiler is found."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from method_helpers import logistic_2d

from bayesx.data.digits import load_digits
from bayesx.diagnostics.convergence import ess_per_coordinate
from bayesx.kernels import backend
from bayesx.kernels import latent_hmc as latent
from bayesx.kernels import nuts
from bayesx.kernels.hmc import HMCState
from bayesx.kernels.integrators import PhaseState, leapfrog_trajectory
from bayesx.kernels.metric import make_metric
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.native import build, entry_points
from bayesx.native import logistic as native
from bayesx.nn.autoencoder import AutoEncoder, initialize
from bayesx.targets.forms import LogisticForm
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.logreg import LogisticRegression
from bayesx.targets.toy import Density

needs_native = pytest.mark.skipif(not native.available(),
                                  reason="no C compiler: the native kernels could not be built")
needs_openmp = pytest.mark.skipif(not (native.available() and native.kernels(torch.float64).openmp),
                                  reason="the compiler has no OpenMP: the native kernels run serial")


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def digits():
    return LogisticRegression(load_digits())


@pytest.fixture
def pytorch_only(monkeypatch):
    """Turn the native kernels off for the duration of a test (BAYESX_NATIVE=0)."""
    monkeypatch.setenv("BAYESX_NATIVE", "0")


def with_native(enabled: bool, monkeypatch, fn):
    monkeypatch.setenv("BAYESX_NATIVE", "1" if enabled else "0")
    try:
        return fn()
    finally:
        monkeypatch.delenv("BAYESX_NATIVE")


def latent_space(target, d=4, seed=0):
    """A linear auto-encoder with a non-orthonormal decoder, standardized as AE-HMC does."""
    ae = AutoEncoder(target.dim, d, "linear", dtype=target.dtype)
    initialize(ae, gen(seed))
    with torch.no_grad():
        ae.dec_out.weight.add_(0.3 * torch.randn(target.dim, d, generator=gen(seed + 1), dtype=target.dtype))
    ae.requires_grad_(False)
    mean = 0.1 * torch.randn(target.dim, generator=gen(seed + 2), dtype=target.dtype)
    scale = 0.5 + torch.rand(target.dim, generator=gen(seed + 3), dtype=target.dtype)
    return latent.LatentSpace(target, ae, mean, scale)


# --- the kernels against the PyTorch path --------------------------------------------------------------
@needs_native
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 2e-4)])
def test_density_and_gradient_equal_pytorch(digits, dtype, tol, monkeypatch):
    target = LogisticRegression(load_digits(), dtype=dtype)
    q = 0.3 * torch.randn(5, target.dim, generator=gen(1), dtype=dtype)
    ours = with_native(True, monkeypatch, lambda: target.log_prob_and_grad(q))
    theirs = with_native(False, monkeypatch, lambda: target.log_prob_and_grad(q))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * 10)


@needs_native
@pytest.mark.parametrize("dtype,scale", [(torch.float32, 100.0), (torch.float64, 1000.0)])
def test_huge_logits_stay_finite(dtype, scale, monkeypatch):
    """Logits far beyond exp's range (|l| in the thousands): the sigmoid must not overflow into NaN."""
    target = LogisticRegression(load_digits(), dtype=dtype)
    q = scale * torch.randn(3, target.dim, generator=gen(14), dtype=dtype)
    assert float((q @ target.x_train.T).abs().max()) > (100 if dtype == torch.float32 else 800)
    ours = with_native(True, monkeypatch, lambda: target.log_prob_and_grad(q))
    theirs = with_native(False, monkeypatch, lambda: target.log_prob_and_grad(q))
    assert torch.isfinite(ours[0]).all() and torch.isfinite(ours[1]).all()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4 if dtype == torch.float32 else 1e-11, atol=1e-3)


@pytest.fixture
def torch_threads():
    """Set torch's thread count inside a test; restored afterwards."""
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


@needs_openmp
def test_chains_split_over_torchs_threads_one_per_chain_at_most(digits, torch_threads, monkeypatch):
    """Threads: torch's count, at most one per chain and at most the cores the process may use."""
    form = digits.density_form()
    monkeypatch.setattr(native, "usable_cores", lambda: 8)
    torch_threads(1)
    assert native.kernel_threads(form.design_t.dtype, 4) == 1
    torch_threads(2)
    assert native.kernel_threads(form.design_t.dtype, 1) == 1 and native.kernel_threads(form.design_t.dtype, 4) == 2
    torch_threads(6)
    assert native.kernel_threads(form.design_t.dtype, 4) == 4
    monkeypatch.setattr(native, "usable_cores", lambda: 3)  # an affinity mask of three cores
    assert native.kernel_threads(form.design_t.dtype, 4) == 3


def test_usable_cores_follow_the_affinity_mask():
    from bayesx.memory import usable_cores
    assert usable_cores() == len(os.sched_getaffinity(0))


@needs_native
@pytest.mark.parametrize("size", sorted(native.MANY_CHAINS))
def test_many_chains_on_a_large_design_go_to_pytorch(size):
    """From MANY_CHAINS[size] chains on a design of `size` entries, PyTorch's BLAS runs; one row
    fewer falls in the tier below."""
    def form(rows):
        return LogisticForm.build(torch.zeros(8, rows, dtype=torch.float64), None, torch.zeros(rows, dtype=torch.float64),
                                torch.ones(8, dtype=torch.float64), None)
    rows = size // 8
    many = native.MANY_CHAINS[size]
    few_chains, many_chains = (torch.zeros(c, 8, dtype=torch.float64) for c in (many - 1, many))
    assert native.supports(form(rows), few_chains) and not native.supports(form(rows), many_chains)
    assert native.many_chains(form(rows - 1)) != many
    assert native.supports(form(rows - 1), many_chains)


@needs_openmp
@pytest.mark.parametrize("threads", [2, 3])
def test_split_calls_equal_one_thread_exactly(digits, torch_threads, threads, monkeypatch):
    """Each chain runs the same code whichever thread takes it: split results equal one thread's
    bit for bit, with uneven ranges (5 chains) included."""
    form = digits.density_form()
    q = 0.1 * torch.randn(5, digits.dim, generator=gen(21), dtype=torch.float64)
    p = torch.randn(5, digits.dim, generator=gen(22), dtype=torch.float64)
    inv_mass = 0.5 + torch.rand(digits.dim, generator=gen(23), dtype=torch.float64)
    eps = torch.tensor([0.01, 0.02, 0.015, 0.01, 0.005], dtype=torch.float64)
    monkeypatch.setattr(native, "usable_cores", lambda: 8)  # three threads on two cores too

    def both():
        return (native.log_prob_and_grad(form, q), native.trajectory(form, q, p, eps, 7, inv_mass))
    torch_threads(1)
    alone = both()
    torch_threads(threads)
    assert native.kernel_threads(form.design_t.dtype, 5) == threads
    split = both()
    for a, b in zip((*alone[0], *alone[1]), (*split[0], *split[1])):
        assert torch.equal(a, b)


@needs_native
def test_restricted_density_and_gradient_equal_pytorch(digits, monkeypatch):
    restricted = latent_space(digits).restricted
    u = torch.randn(3, restricted.dim, generator=gen(2), dtype=torch.float64)
    ours = with_native(True, monkeypatch, lambda: restricted.log_prob_and_grad(u))
    theirs = with_native(False, monkeypatch, lambda: restricted.log_prob_and_grad(u))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-9)


@needs_native
def test_native_gradient_matches_finite_differences(digits):
    q = 0.2 * torch.randn(2, digits.dim, generator=gen(3), dtype=torch.float64)
    form = digits.density_form()
    _, grad = native.log_prob_and_grad(form, q)
    h = 1e-6
    for i in (0, 17, 40):
        e = torch.zeros_like(q)
        e[:, i] = h
        fd = (native.log_prob_and_grad(form, q + e)[0] - native.log_prob_and_grad(form, q - e)[0]) / (2 * h)
        torch.testing.assert_close(fd, grad[:, i], rtol=1e-5, atol=1e-5)


def torch_trajectory(target, q, p, grad, eps, steps, inv_mass):
    """Reference leapfrog in PyTorch with the target's own log_prob_and_grad (native off by the caller)."""
    p = p + 0.5 * eps * grad
    for i in range(steps):
        q = q + eps * (p @ inv_mass if inv_mass.dim() == 2 else p * inv_mass)
        lp, grad = target.log_prob_and_grad(q)
        p = p + (eps if i < steps - 1 else 0.5 * eps) * grad
    return q, p, grad, lp


@needs_native
@pytest.mark.parametrize("mass", ["diag", "dense"])
def test_trajectory_equals_pytorch_leapfrog(digits, mass, monkeypatch):
    q = 0.2 * torch.randn(4, digits.dim, generator=gen(4), dtype=torch.float64)
    p = torch.randn(4, digits.dim, generator=gen(5), dtype=torch.float64)
    a = torch.randn(digits.dim, digits.dim, generator=gen(6), dtype=torch.float64) / digits.dim
    inv_mass = (0.5 + torch.rand(digits.dim, generator=gen(7), dtype=torch.float64)) if mass == "diag" \
        else a @ a.T + torch.eye(digits.dim, dtype=torch.float64)
    eps = torch.tensor([[0.01], [-0.02], [0.015], [0.005]], dtype=torch.float64)  # per chain, one backwards
    lp, grad = digits.log_prob_and_grad(q)
    form = digits.density_form()
    ours = native.trajectory(form, q, p, eps, 12, inv_mass, grad, lp)
    cold = native.trajectory(form, q, p, eps, 12, inv_mass)  # the kernel evaluates the start itself
    theirs = with_native(False, monkeypatch, lambda: torch_trajectory(digits, q, p, grad, eps, 12, inv_mass))
    for x, y, z in zip(ours[:4], theirs, cold[:4]):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(z, x, rtol=1e-12, atol=1e-12)
    kinetic = lambda m: 0.5 * (m * (m @ inv_mass if mass == "dense" else m * inv_mass)).sum(-1)  # noqa: E731
    torch.testing.assert_close(ours.start_log_prob, lp)
    torch.testing.assert_close(cold.start_log_prob, lp, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(ours.start_energy, -lp + kinetic(p), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(ours.end_energy, -theirs[3] + kinetic(theirs[1]), rtol=1e-10, atol=1e-10)
    assert torch.equal(q, q.clone())  # inputs untouched: the kernel works on copies
    torch.testing.assert_close(grad, digits.log_prob_and_grad(q)[1])


@needs_native
def test_latent_trajectory_equals_pytorch(digits, monkeypatch):
    space = latent_space(digits, d=5)
    z = torch.randn(3, 5, generator=gen(8), dtype=torch.float64)
    p = torch.randn(3, 5, generator=gen(9), dtype=torch.float64)
    ours = latent.latent_leapfrog(space, z, p, 0.02, 15)
    theirs = with_native(False, monkeypatch, lambda: latent.latent_leapfrog(space, z, p, 0.02, 15))
    for x, y in zip(ours, theirs):  # end point, momentum, U_h, its gradient, H_h at both ends
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-10)


@needs_native
def test_hmc_gives_the_same_chains_with_and_without_native_kernels(digits, monkeypatch):
    """With a fixed step size: adaptation feeds rounding-level differences in the acceptance back
    into the step size, and the chaotic early trajectories amplify them. (Native NUTS draws its tree's
    uniforms from its own generator: it is checked in distribution below.)"""
    fixed = {"num_warmup": 0, "num_draws": 20, "step_size": 0.01, "adapt_step_size": False}

    def run():
        g = gen(11)
        return HMC(num_steps=10, **fixed).sample(digits, RunInputs(digits.initial_point(2, g), g, progress=False)).draws
    ours = with_native(True, monkeypatch, run)
    theirs = with_native(False, monkeypatch, run)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def moment_z_scores(draws: torch.Tensor, truth) -> np.ndarray:
    """|mean - true mean| / MCSE and |sd - true sd| / MCSE per coordinate (ArviZ bulk ESS; the sd's
    MCSE by the delta method for a near-Gaussian posterior, sd / sqrt(2 ESS))."""
    
    x = draws.numpy()
    ess = ess_per_coordinate(x)
    flat = x.reshape(-1, x.shape[-1])
    mean, sd = flat.mean(0), flat.std(0)
    return np.concatenate([np.abs(mean - truth.mean) / (sd / np.sqrt(ess)),
                           np.abs(sd - truth.sd) / (sd / np.sqrt(2 * ess))])


@needs_native
def test_native_nuts_matches_the_posterior_and_the_pytorch_trees(monkeypatch):
    """Native NUTS (each chain's tree in C) on a 2-D logistic posterior: means and sds within 4 MCSE of
    quadrature, and its trees as deep and as accepting as the PyTorch kernel's at the same step size.
    Negative control: the same check against the posterior of another prior scale fails."""
    target, truth = logistic_2d()

    def run():
        g = gen(21)
        return NUTS(num_warmup=300, num_draws=2000).sample(
            target, RunInputs(target.initial_point(4, g), g, progress=False))
    ours = with_native(True, monkeypatch, run)
    assert ours.tags["kernels"] == "native"
    z = moment_z_scores(ours.draws, truth)
    assert z.max() < 4.0, z
    assert moment_z_scores(ours.draws, logistic_2d(prior_scale=0.5)[1]).max() > 8.0
    # the trees at one fixed step size and the identity metric, from the same points
    fixed = dict(num_warmup=0, num_draws=200, step_size=0.2, adapt_step_size=False, mass="identity")
    start = ours.draws[:, -1].clone()
    stats = {on: with_native(on, monkeypatch, lambda: NUTS(**fixed).sample(
        target, RunInputs(start, gen(22), progress=False)))
             for on in (True, False)}
    assert stats[False].tags["kernels"] == "pytorch"
    for key, tol in (("tree_depth_mean", 0.05), ("accept_rate", 0.03)):
        assert stats[True].metrics[key] == pytest.approx(stats[False].metrics[key], rel=tol), key


@needs_native
@needs_openmp
@pytest.mark.parametrize("chains", [3, 4])
def test_pairs_of_chains_give_the_single_chains_results(digits, chains, torch_threads):
    """Two chains per thread, their gradients evaluated in one pass over the design (lock-step HMC
    trajectories, NUTS trees leaf by leaf), equal one chain per task up to rounding: the same tree depths
    and draws, with three chains a pair and a lone chain."""
    torch_threads(2)
    form = digits.density_form()
    q = 0.05 * torch.randn(chains, digits.dim, generator=gen(41), dtype=torch.float64)
    p = torch.randn(chains, digits.dim, generator=gen(42), dtype=torch.float64)
    inv_mass = 0.5 + torch.rand(digits.dim, generator=gen(43), dtype=torch.float64)
    lp, grad = digits.log_prob_and_grad(q)
    seeds = torch.arange(1, chains + 1)
    for step in (0.003, 0.02):  # deep trees that differ between chains, and shallow ones
        paired, single = (native.nuts(form, q, p, lp, grad, step, inv_mass, 10, seeds, pairs=on) for on in (True, False))
        assert torch.equal(paired.depth, single.depth) and torch.equal(paired.n_leaves, single.n_leaves)
        for name, a, b in zip(paired._fields, paired, single):  # fault_position: NaN where no leaf failed
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10, equal_nan=name == "fault_position")
        if step == 0.003:
            assert len(set(paired.depth.tolist())) > 1  # trees of different depths: a pair member waited
    paired, single = (native.trajectory(form, q, p, 0.01, 7, inv_mass, pairs=on) for on in (True, False))
    for a, b in zip(paired, single):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10)


def test_pairs_only_where_they_shorten_the_makespan():
    assert [native.pairs_pay(c, 2) for c in (1, 2, 3, 4)] == [False, False, True, True]
    assert not native.pairs_pay(4, 4) and native.pairs_pay(8, 4) and not native.pairs_pay(1, 1)


@needs_native
@pytest.mark.parametrize("kind", ["correlated", "scaled"])
def test_gaussian_is_the_logistic_form_without_rows(kind, monkeypatch):
    """A Gaussian with a non-zero mean (dense precision, or its diagonal): the native log density and
    gradient equal the PyTorch formula, constant included."""
    mean = tuple(float(j) - 2.0 for j in range(5))
    target = Gaussian(dim=5, kind=kind, mean=mean)
    q = torch.randn(3, 5, generator=gen(31), dtype=torch.float64)
    native_lp, native_grad = with_native(True, monkeypatch, lambda: target.log_prob_and_grad(q))
    lp, grad = with_native(False, monkeypatch, lambda: target.log_prob_and_grad(q))
    torch.testing.assert_close(native_lp, lp, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(native_grad, grad, rtol=1e-12, atol=1e-10)
    assert (target.density_form().precision.dim() == 1) == (kind == "scaled")


def test_toy_densities_run_on_pytorch():
    """No C code exists for one benchmark posterior: the funnel (which had its own until this issue) and the
    other toy densities have no form, so every sampler moves on them in PyTorch, with autograd gradients."""
    for name in ("funnel", "banana"):
        toy = Density(name=name)
        q = toy.initial_point(4, gen(32))
        assert toy.density_form() is None and backend.name(toy, q) == "pytorch"
        lp, grad = toy.log_prob_and_grad(q)
        torch.testing.assert_close(lp, toy.log_prob(q))
        assert grad.shape == q.shape and torch.isfinite(grad).all()


@needs_native
@pytest.mark.parametrize("step,divergent", [(0.08, False), (0.215, True)])
def test_native_nuts_builds_the_pytorch_trees(step, divergent, monkeypatch):
    """One NUTS transition of 2000 independent chains of a badly scaled Gaussian (sds from 0.1 to 1) from the
    same points, in C and in PyTorch: the same mean tree depth, acceptance, divergence rate and mean of the
    widest coordinate after the step, within 4 standard errors; once with deep trees, once with a step past
    the leapfrog's stability limit for the narrowest coordinate (2 sd = 0.2), where trees diverge. Negative
    control: a 20% longer step in C is told apart from the PyTorch trees."""
    target, n = Gaussian(dim=10, kind="scaled", condition=10.0), 2000
    q = torch.randn(n, 10, generator=gen(33), dtype=torch.float64) * target.cov.diagonal().sqrt()

    def transition(step_size):
        assert backend.name(target, q) == ("native" if os.environ["BAYESX_NATIVE"] == "1" else "pytorch")
        params = nuts.NUTSParams(step_size, make_metric(torch.ones(10, dtype=torch.float64)), 10)
        new, info = nuts.step(HMCState(q, *target.log_prob_and_grad(q)), target, params, gen(34))
        return {"depth": info.tree_depth.double(), "accept": info.accept_prob, "divergent": info.divergent.double(),
                "x": new.position[:, -1]}

    def z_scores(a, b):
        return {key: abs(float(a[key].mean() - b[key].mean())) * math.sqrt(n)
                / max(math.hypot(float(a[key].std()), float(b[key].std())), 1e-12) for key in a}
    ours, ref = (with_native(on, monkeypatch, lambda: transition(step)) for on in (True, False))
    assert max(z_scores(ours, ref).values()) < 4.0, z_scores(ours, ref)
    assert float(ours["depth"].mean()) > 2.0  # trees grew: the comparison is not between two empty steps
    assert (float(ref["divergent"].mean()) > 0.05) == divergent
    longer = with_native(True, monkeypatch, lambda: transition(1.2 * step))
    assert max(z_scores(longer, ref).values()) > 4.0, z_scores(longer, ref)


@needs_native
def test_native_nuts_counts_divergences_and_stops_at_the_maximum_depth(digits, monkeypatch):
    """A step size far too large: every tree diverges at once and is counted, never silenced; a tiny
    one: trees run to max_tree_depth (2^d - 1 leaves) without turning."""
    fixed = {"num_warmup": 0, "num_draws": 5, "adapt_step_size": False}

    def run(step, depth):
        g = gen(5)
        return NUTS(step_size=step, max_tree_depth=depth, **fixed).sample(
            digits, RunInputs(digits.initial_point(2, g), g, progress=False))
    wild = with_native(True, monkeypatch, lambda: run(50.0, 6))
    assert wild.sample_stats["divergent"].all() and (wild.sample_stats["n_grad_evals"] == 1).all()
    assert wild.metrics["n_divergent"] == 10 and wild.metrics["accept_rate"] < 1e-3
    tiny = with_native(True, monkeypatch, lambda: run(1e-5, 4))
    assert (tiny.sample_stats["tree_depth"] == 4).all() and (tiny.sample_stats["n_grad_evals"] == 15).all()
    assert not tiny.sample_stats["divergent"].any()


def test_integrator_without_a_form_uses_pytorch(pytorch_only, digits):
    """With the kernels off, leapfrog_trajectory is the plain PyTorch loop (the reference above)."""
    q = 0.2 * torch.randn(2, digits.dim, generator=gen(12), dtype=torch.float64)
    p = torch.randn(2, digits.dim, generator=gen(13), dtype=torch.float64)
    lp, grad = digits.log_prob_and_grad(q)
    metric = make_metric(torch.ones(digits.dim, dtype=torch.float64))
    end, _, _ = leapfrog_trajectory(PhaseState(q, p, lp, grad), 0.01, 5, metric, digits)
    ref = torch_trajectory(digits, q, p, grad, 0.01, 5, metric.inv_mass)
    torch.testing.assert_close(end.position, ref[0])
    assert backend.trajectory(digits, q, p, 0.01, 5, metric.inv_mass) is None and backend.name(digits, q) == "pytorch"


# --- building ---------------------------------------------------------------------------------------------
@pytest.fixture
def fresh_build(tmp_path, monkeypatch):
    """An empty library cache, and the memos of load() and of the kernels cleared before and after."""
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path))
    build.load.cache_clear()
    native.kernels.cache_clear()
    yield tmp_path
    build.load.cache_clear()
    native.kernels.cache_clear()


def test_no_compiler_falls_back_with_one_warning(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", str(fresh_build))  # neither cc, gcc nor clang on the path
    with pytest.warns(build.NativeKernelWarning, match="no C compiler found") as record:
        assert build.load("kernels") is None
        assert build.load("kernels") is None  # remembered: no second attempt, no second warning
    assert len(record) == 1
    q = torch.zeros(2, 3, dtype=torch.float64)
    assert not native.available()
    assert not native.supports(LogisticForm.build(torch.ones(3, 4, dtype=torch.float64), None, torch.ones(4),
                                                torch.ones(3), None), q)


def test_a_failing_build_falls_back(fresh_build, monkeypatch, tmp_path_factory):
    broken = tmp_path_factory.mktemp("src")
    (broken / "broken.c").write_text("this is not C\n")
    monkeypatch.setattr(build, "SOURCE_DIR", broken)
    with pytest.warns(build.NativeKernelWarning, match="building or loading the native library broken failed"):
        assert build.load("broken") is None
    assert not list((fresh_build / "native").glob("broken-*.so"))


@needs_native
def test_without_openmp_the_build_is_serial_with_a_warning(fresh_build, monkeypatch, digits, torch_threads):
    monkeypatch.setattr(build, "OPENMP_FLAGS", ("-fno-such-openmp-flag",))  # the compiler rejects it
    with pytest.warns(build.NativeKernelWarning, match="built without OpenMP"):
        library = build.load("kernels")
    assert library is not None and library.logistic_openmp() == 0
    torch_threads(2)
    assert native.kernel_threads(digits.density_form().design_t.dtype, 8) == 1


@needs_openmp
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc to list loaded libraries")
def test_openmp_build_shares_pytorchs_openmp_runtime():
    """The kernel needs libgomp.so.1 and binds to the one PyTorch loaded: one file of that name in the
    process, so the kernel's threads are PyTorch's, not a second pool. (Wheels that vendor a renamed
    copy, like scikit-learn's libgomp-<hash>.so, are other runtimes the kernel does not use.)"""
    maps = Path("/proc/self/maps").read_text().splitlines()
    runtimes = {line.split()[-1] for line in maps if Path(line.split()[-1]).name.startswith("libgomp.so")}
    assert len(runtimes) == 1, runtimes


@needs_native
def test_an_openmp_library_that_does_not_load_falls_to_the_serial_build(fresh_build, monkeypatch):
    real_cdll, tried = build.ctypes.CDLL, []

    def first_load_fails(path):
        tried.append(path)
        if len(tried) == 1:
            raise OSError("libgomp.so.1: cannot open shared object file")
        return real_cdll(path)
    monkeypatch.setattr(build.ctypes, "CDLL", first_load_fails)
    with pytest.warns(build.NativeKernelWarning, match="built without OpenMP .libgomp.so.1: cannot open"):
        library = build.load("kernels")
    assert library is not None and library.logistic_openmp() == 0 and len(tried) == 2


@pytest.fixture
def fresh_kernels():
    """The memo of the typed functions cleared before and after (the library itself stays cached)."""
    native.kernels.cache_clear()
    yield
    native.kernels.cache_clear()


@needs_native
def test_a_wrong_entry_point_declaration_is_a_one_line_error(fresh_kernels, monkeypatch):
    """The C signatures are declared once (entry_points.ENTRY_POINTS) and checked against the library's own
    at load: a declaration one parameter short, or with an int where the real goes, is refused with one line
    naming the function and both signatures, before anything is called (no crash)."""
    table = dict(entry_points.ENTRY_POINTS)
    nuts_entry = table["logistic_nuts"]
    for wrong in (nuts_entry._replace(params=nuts_entry.params[:-1]),
                  nuts_entry._replace(params=nuts_entry.params.replace("r", "i"))):
        monkeypatch.setitem(entry_points.ENTRY_POINTS, "logistic_nuts", wrong)
        native.kernels.cache_clear()
        with pytest.raises(entry_points.NativeSignatureError) as caught:
            native.kernels(torch.float64)
        message = str(caught.value)
        assert "\n" not in message and "logistic_nuts_f64" in message and nuts_entry.params.replace("r", "d") in message
    monkeypatch.setitem(entry_points.ENTRY_POINTS, "logistic_nuts", nuts_entry)
    native.kernels.cache_clear()
    assert native.kernels(torch.float64) is not None  # the table as written agrees with the library


@needs_native
def test_a_library_without_signatures_is_refused(fresh_build, tmp_path_factory, monkeypatch):
    """A library built from a source that states no signatures (an old cache, a stray file) is refused in one line."""
    source = tmp_path_factory.mktemp("src")
    (source / "bare.c").write_text("void logistic_density_f64(void) {}\n")
    monkeypatch.setattr(build, "SOURCE_DIR", source)
    with pytest.raises(entry_points.NativeSignatureError, match="does not export bayesx_signature"):
        entry_points.bind(build.load("bare"), "f64")


def test_without_a_compiler_the_pytorch_backend_runs_with_one_warning(fresh_build, monkeypatch):
    """CC names no compiler and the cache is empty: a NUTS run on logistic regression runs on PyTorch (its
    ``kernels`` tag says so) and one warning says why."""
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", str(fresh_build))
    target, _ = logistic_2d()
    g = gen(3)
    with pytest.warns(build.NativeKernelWarning) as record:
        result = NUTS(num_warmup=10, num_draws=5, init="prior").infer(
            target, RunInputs(target.initial_point(2, g), g, progress=False))
    warnings = [w for w in record if issubclass(w.category, build.NativeKernelWarning)]
    assert len(warnings) == 1 and "no C compiler found" in str(warnings[0].message)
    assert result.tags["kernels"] == "pytorch" and result.draws.shape == (2, 5, target.dim)
    assert torch.isfinite(torch.as_tensor(result.draws)).all()


@needs_native
def test_the_install_step_builds_what_the_first_run_loads(fresh_build, monkeypatch):
    """``python -m bayesx.native.build`` (make install) compiles the library into the cache once, and a later
    process loads that file without compiling, and without switching to flush-to-zero arithmetic (-ffast-math
    is for compiling only); without a compiler the step says why and exits 0."""
    env = {**os.environ, "BAYESX_CACHE_DIR": str(fresh_build), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "bayesx.native.build"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "native library kernels built" in done.stdout, done.stderr
    built = list((fresh_build / "native").glob("kernels-*.so"))
    assert len(built) == 1 and str(built[0]) in done.stdout

    def no_compiling(*args, **kwargs):
        raise AssertionError("the first use compiled again")
    monkeypatch.setattr(build, "build", no_compiling)
    assert native.kernels(torch.float64) is not None
    assert float(torch.tensor([1e-310], dtype=torch.float64) * 1.0) != 0.0
    bare = {**env, "CC": "no-such-compiler", "PATH": str(fresh_build), "BAYESX_CACHE_DIR": str(fresh_build / "empty")}
    done = subprocess.run([sys.executable, "-m", "bayesx.native.build"], env=bare, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "no C compiler found" in done.stdout and "PyTorch kernels run" in done.stdout


# --- the shape of the code -----------------------------------------------------------------------------------
PACKAGE = Path(__file__).resolve().parents[1] / "bayesx"


def test_targets_describe_densities_and_only_the_backend_imports_native():
    """No module under bayesx/targets names a sampler's hooks or parameters (fused kernels, backend names,
    tree depths, step sizes, trajectories), and no module outside the kernels' backend and bayesx/native
    imports bayesx.native (provenance reads whether native kernels are enabled)."""
    words = ("fused_", "kernel_name", "max_tree_depth", "step_size", "trajectory")
    in_targets = [f"{path.relative_to(PACKAGE)}: {word}" for path in PACKAGE.glob("targets/**/*.py")
                  for word in words if word in path.read_text()]
    assert not in_targets, in_targets
    importers = {str(path.relative_to(PACKAGE)) for path in PACKAGE.glob("**/*.py") if "bayesx.native" in path.read_text()}
    allowed = {"kernels/backend.py", "provenance.py"}
    assert {p for p in importers if not p.startswith("native/")} <= allowed, importers
    assert "kernels/backend.py" in importers  # the check would see an import


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flushing_subnormals_stays_inside_the_kernel(digits, dtype, monkeypatch):
    """The logistic form flushes subnormals for the span of each evaluation (common.h): its gradient at
    logits far beyond exp's floor still equals PyTorch's, and the caller's thread keeps its own mode: a
    subnormal number survives arithmetic after the native call as before it."""
    tiny = torch.tensor(1e-40 if dtype == torch.float32 else 1e-310, dtype=dtype)
    assert float(tiny * 1.5) != 0.0
    target = LogisticRegression(load_digits(), dtype=dtype)
    q = (100.0 if dtype == torch.float32 else 1000.0) * torch.randn(2, target.dim, generator=gen(31), dtype=dtype)
    ours = with_native(True, monkeypatch, lambda: target.log_prob_and_grad(q))
    assert float(tiny * 1.5) != 0.0  # the control register was restored
    theirs = with_native(False, monkeypatch, lambda: target.log_prob_and_grad(q))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4 if dtype == torch.float32 else 1e-11, atol=1e-3)
