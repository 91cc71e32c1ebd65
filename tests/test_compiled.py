"""Compiled densities (bayesx.native.compiled, bayesx.kernels.backend.prepare): any torch log density,
traced and written as plain C (bayesx.native.codegen; AOTInductor where it has no C for an operator), driven by
the C NUTS and leapfrog without returning to Python.

- The compiled (log pi, grad) equals autograd's; a density with different data compiles to a different
  library (the cache key is the content), the same density is found in the cache.
- NUTS on a compiled correlated Gaussian written as a user's torch function matches its known moments
  within Monte-Carlo error (negative control: the same draws against the wrong covariance fail); the
  compiled leapfrog equals PyTorch's leapfrog to round-off.
- The policy (an argument of prepare): auto compiles only runs long enough to repay it, never never, a bad
  value is refused with the reason; a density that cannot be traced runs on PyTorch with one line saying why.
- From the command line, model=custom gets the compiled path with no option and records it.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import torch

from bayesx.errors import BayesxError
from bayesx.kernels import backend
from bayesx.kernels.integrators import PhaseState, leapfrog_trajectory
from bayesx.kernels.metric import make_metric
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.native import codegen, compiled
from bayesx.native import logistic as native
from bayesx.targets.base import TargetBase

pytestmark = pytest.mark.skipif(not (native.available() and shutil.which("g++")),
                                reason="no C/C++ compiler: densities cannot be compiled here")

COV = torch.tensor([[1.0, 0.9, 0.0], [0.9, 1.0, 0.3], [0.0, 0.3, 2.0]], dtype=torch.float64)


class UserGaussian(TargetBase):
    """A correlated Gaussian written as a user would: torch code over q (..., 3), no form, no analytic gradient."""

    def __init__(self, cov: torch.Tensor = COV):
        self.dim, self.dtype, self.device = 3, torch.float64, torch.device("cpu")
        self.precision = torch.linalg.inv(cov)

    def log_prob(self, q):
        return -0.5 * ((q @ self.precision) * q).sum(-1) + torch.log1p(torch.exp(-20.0 + 0.0 * q[..., 0]))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BAYESX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("BAYESX_COMPILE", "always")
        yield


def for_sampler(target, calls: int, policy: str = "always", chains: int = 4):
    """The target's density as the MCMC driver prepares it for a run of ``calls`` density calls."""
    return backend.prepare(target, backend.Workload(torch.zeros(chains, 3, dtype=torch.float64), calls), policy)


@pytest.fixture(scope="module")
def gaussian(cache):
    target = UserGaussian()
    density = for_sampler(target, 10)
    assert density.name == backend.COMPILED and not density.record.cached and density.record.compile_s > 0
    return target


def test_compiled_density_equals_autograd_and_is_cached_by_content(gaussian):
    again_here = for_sampler(gaussian, 10**6).record
    assert (again_here.kernels, again_here.compile_s, again_here.cached) == (backend.COMPILED, 0.0, True), \
        "a density prepared earlier is found in the cache, not compiled again"
    density = for_sampler(gaussian, 10**6).fast.density
    q = torch.randn(5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lp, grad = density.log_prob_and_grad(q)
    expected, expected_grad = TargetBase.log_prob_and_grad(gaussian, q)
    torch.testing.assert_close(lp, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)
    again = compiled.compiled_density(gaussian.log_prob, 3, torch.float64)
    assert again.cached and again.library_path == density.library_path
    other = UserGaussian(2.0 * COV)  # same code, other data: another library
    assert compiled._digest(compiled._trace(other.log_prob, 3, torch.float64), torch.float64) != \
        compiled._digest(compiled._trace(gaussian.log_prob, 3, torch.float64), torch.float64)


def test_compiled_leapfrog_equals_pytorch(gaussian):
    g = torch.Generator().manual_seed(2)
    q, p = torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64)
    metric = make_metric(torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64))
    lp, grad = TargetBase.log_prob_and_grad(gaussian, q)
    start = PhaseState(q, p, lp, grad)
    density = for_sampler(gaussian, 10**6)
    assert density.name == backend.COMPILED
    assert density.trajectory(q, p, 0.1, 15, metric.inv_mass, grad, lp) is not None
    native_end, native_h0, native_h1 = leapfrog_trajectory(start, 0.1, 15, metric, density)
    plain = for_sampler(UserGaussian(), 10**6, "never")  # PyTorch's loop
    assert plain.name == backend.PYTORCH and plain.trajectory is None
    torch_end, torch_h0, torch_h1 = leapfrog_trajectory(start, 0.1, 15, metric, plain)
    for a, b in zip((*native_end, native_h0, native_h1), (*torch_end, torch_h0, torch_h1)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_nuts_on_a_compiled_density_has_the_known_moments(gaussian):
    g = torch.Generator().manual_seed(3)
    result = NUTS(num_warmup=300, num_draws=1500).infer(gaussian, RunInputs(gaussian.initial_point(4, g), g,
                                                                            progress=False))
    assert result.tags["kernels"] == backend.COMPILED
    draws = torch.as_tensor(result.draws).reshape(-1, 3).numpy()
    from bayesx.diagnostics.convergence import ess_per_coordinate

    ess = ess_per_coordinate(torch.as_tensor(result.draws))
    var = COV.diagonal().numpy()
    z_mean = draws.mean(0) / np.sqrt(var / ess)
    z_var = (draws.var(0) - var) / np.sqrt(2 * var**2 / ess)
    assert np.abs(z_mean).max() < 4.5 and np.abs(z_var).max() < 4.5, (z_mean, z_var)
    corr = np.corrcoef(draws.T)[0, 1]
    assert abs(corr - 0.9) < 0.03
    wrong = 1.5 * var  # negative control
    assert np.abs((draws.var(0) - wrong) / np.sqrt(2 * wrong**2 / ess)).max() > 6


def test_the_policy_compiles_only_where_it_pays(cache, monkeypatch):
    """The policy is prepare's argument, whatever the environment says."""
    monkeypatch.setenv("BAYESX_COMPILE", "never")  # not read by the backend
    short = for_sampler(UserGaussian(), backend.COMPILE_FROM - 1, "auto")
    assert short.name == backend.PYTORCH and "does not repay" in short.record.reason
    assert for_sampler(UserGaussian(), backend.COMPILE_FROM, "auto").name == backend.COMPILED  # control
    monkeypatch.setenv("BAYESX_COMPILE", "always")
    assert for_sampler(UserGaussian(), 10**6, "never").name == backend.PYTORCH
    with pytest.raises(BayesxError, match="compile policy 'sometimes'.*is not one of auto, always, never"):
        for_sampler(UserGaussian(), 10**6, "sometimes")


class Branchy(UserGaussian):
    def log_prob(self, q):
        if float(q.sum()) > 1e9:  # a branch on a value: cannot be traced
            return q.sum(-1)
        return super().log_prob(q)


def test_a_density_that_cannot_be_traced_runs_on_pytorch_with_one_line(cache, capsys):
    prepared = for_sampler(Branchy(), 10**6).record
    assert prepared.kernels == backend.PYTORCH and "could not be traced" in prepared.reason
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bayesx: the density runs on PyTorch")
    assert prepared.tags()["compiled_density"].startswith("not compiled: its log density could not be traced")


def test_a_custom_model_gets_the_compiled_path_with_no_option(tmp_path_factory, monkeypatch):
    """bayesx run model=custom with the defaults (BAYESX_COMPILE unset, device.compile null: auto) compiles the
    user's file on first use, records how (tags kernels, compiled_density; metric compile_time_s), and its
    draws match the published eight-schools posterior (mu 4.4, sd 3.3; tau 3.6); a second run finds it cached."""
    from pathlib import Path

    from cli_helpers import isolated_store, run_ok
    from test_custom_model import draws_of, mean_and_mcse

    eight = f"{Path(__file__).resolve().parents[1] / 'examples' / 'eight_schools.py'}:log_density"
    monkeypatch.delenv("BAYESX_COMPILE", raising=False)
    with isolated_store(tmp_path_factory, "compiled") as (root, uri):
        monkeypatch.setenv("BAYESX_CACHE_DIR", str(root / "cache"))
        argv = ["run", "model=custom", f"model.log_density={eight}", "model.dim=10", "method=nuts",
                "method.target_accept=0.9", "progress=false", "plots.n_coords=0"]
        run = run_ok(uri, argv)
        assert run.data.tags["kernels"] == "compiled"
        assert run.data.tags["compiled_density"].startswith("compiled in ")
        assert run.data.tags["density_compiler"] == "plain C"
        assert run.data.metrics["compile_time_s"] > 0.0
        draws = draws_of(uri, run)
        mu, mu_se = mean_and_mcse(draws[..., 0])
        tau, tau_se = mean_and_mcse(np.exp(draws[..., 1]))
        assert abs(mu - 4.4) < 4 * mu_se + 0.15 and abs(tau - 3.6) < 4 * tau_se + 0.15, (mu, mu_se, tau, tau_se)
        assert abs(draws[..., 0].std() - 3.3) < 0.3
        again = run_ok(uri, argv)
        assert again.data.tags["compiled_density"] == "cached" and again.data.tags["kernels"] == "compiled"


def test_the_mode_search_runs_on_the_compiled_density(gaussian, monkeypatch):
    """Laplace's (and init=laplace's) L-BFGS evaluates through the prepared Density: compiled, it never calls the
    target's PyTorch gradient, and finds the mode (0); prepared on PyTorch (the control), it does."""
    from bayesx.methods.common.optimize import find_mode

    calls = []
    monkeypatch.setattr(gaussian, "log_prob_and_grad", lambda q: calls.append(q) or TargetBase.log_prob_and_grad(
        gaussian, q))
    modes, _ = find_mode(for_sampler(gaussian, 10**6, chains=2), torch.full((2, 3), 1.5, dtype=torch.float64))
    assert not calls and float(modes.abs().max()) < 1e-5
    find_mode(for_sampler(gaussian, 10**6, "never", chains=2), torch.full((2, 3), 1.5, dtype=torch.float64))
    assert calls


def test_a_density_aotinductor_cannot_compile_is_remembered(cache, monkeypatch):
    """A failed compile (garch11 of the posteriordb suite hits a lowering error in this torch) is written beside
    the cache, so later runs fall back at once with the same reason instead of failing again (AOTInductor alone:
    plain C off)."""
    monkeypatch.setenv("BAYESX_PLAIN_C", "0")
    attempts = []

    def failing(*args):
        attempts.append(args)
        raise compiled.NotCompiled("AOTInductor could not compile it (InductorError: LoweringException)")
    monkeypatch.setattr(compiled, "_compile", failing)
    target = UserGaussian(3.0 * COV)  # a density not compiled before
    for _ in range(2):
        with pytest.raises(compiled.NotCompiled, match="LoweringException"):
            compiled.compiled_density(target.log_prob, 3, torch.float64)
    assert len(attempts) == 1
    with pytest.raises(compiled.NotCompiled, match="remembered: delete"):
        compiled.compiled_density(target.log_prob, 3, torch.float64)


CRASHING_LIBRARY = r"""
#include <signal.h>
#include <stddef.h>
int AOTInductorModelContainerCreateWithDevice(void **container, size_t n, const char *device, const char *dir) {
    raise(SIGSEGV);
    return 0;
}
"""


def test_a_library_that_crashes_when_loaded_stops_only_a_child_and_the_run_goes_on(cache, monkeypatch, tmp_path):
    """Under torch 2.11 (a lent GPU machine) creating AOTInductor's model container crashed the process; a library
    is now loaded first in a child process: here one that raises SIGSEGV on creation leaves this process alive,
    the sampler runs on PyTorch with the reason, and the failure is remembered. Control: a library that loads
    carries its mark and is not probed again (AOTInductor alone: plain C off)."""
    import subprocess

    monkeypatch.setenv("BAYESX_PLAIN_C", "0")

    source = tmp_path / "crash.c"
    source.write_text(CRASHING_LIBRARY)
    real_compile = compiled._compile

    def crashing(graph, dim, dtype, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(source)], check=True)
    monkeypatch.setattr(compiled, "_compile", crashing)
    target = UserGaussian(7.0 * COV)  # a density not compiled before (nor by another test)
    prepared = for_sampler(target, 10, chains=2).record
    assert prepared.kernels == backend.PYTORCH and "killed by SIGSEGV" in prepared.reason
    with pytest.raises(compiled.NotCompiled, match="remembered: delete"):
        compiled.compiled_density(target.log_prob, 3, torch.float64)
    monkeypatch.setattr(compiled, "_compile", real_compile)
    compiled.compiled_density(UserGaussian(11.0 * COV).log_prob, 3, torch.float64)  # the control
    libraries = list((compiled.cache_dir().parent / "compiled").glob("density-*.so"))
    marked = [lib for lib in libraries if lib.with_suffix(".loads").exists()]
    assert marked and all(not lib.with_suffix(".failed").exists() for lib in marked)


def test_a_known_identity_finds_its_library_without_tracing_and_a_stale_one_is_traced(gaussian, monkeypatch):
    """The runner's posterior identity indexes the cache: the second lookup of the same identity loads the
    library without tracing the density; an identity whose library no longer agrees with the density (the
    user's file changed behind a stale index) is traced and compiled afresh, never used."""
    traced = []
    real_trace = compiled._trace
    monkeypatch.setattr(compiled, "_trace", lambda *args: traced.append(args) or real_trace(*args))
    first = compiled.compiled_density(gaussian.log_prob, 3, torch.float64, identity="model=user-gaussian")
    assert first.cached and len(traced) == 1
    again = compiled.compiled_density(gaussian.log_prob, 3, torch.float64, identity="model=user-gaussian")
    assert again.cached and again.library_path == first.library_path and len(traced) == 1
    changed = UserGaussian(4.0 * COV)  # same identity, other density: the index is stale
    fresh = compiled.compiled_density(changed.log_prob, 3, torch.float64, identity="model=user-gaussian")
    assert len(traced) == 2 and fresh.library_path != first.library_path
    lp, _ = fresh.log_prob_and_grad(torch.ones(1, 3, dtype=torch.float64))
    torch.testing.assert_close(lp, changed.log_prob(torch.ones(1, 3, dtype=torch.float64)))


class ScaledByData(UserGaussian):
    """Computes from its data inside log_prob, as users do: sigma^2 from a 0-d constant, and a broadcast of the
    data that must stay an operation. (garch11's own failure without folding is the slow test below.)"""

    def __init__(self):
        super().__init__()
        self.sigma = torch.tensor(1.5, dtype=torch.float64)
        self.offsets = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)

    def log_prob(self, q):
        spread = self.offsets.expand(64, 3).sum(0) / 64.0  # a broadcast: larger than its input, not folded
        return super().log_prob(q - spread) / self.sigma**2


def test_operations_on_constants_are_folded_at_trace_time_and_compile(cache):
    target = ScaledByData()
    graph = compiled._trace(target.log_prob, 3, torch.float64)
    constants = {n for n in graph.graph.nodes if n.op == "get_attr"}
    folded = [n for n in graph.graph.nodes if n.op == "call_function" and n.all_input_nodes
              and set(n.all_input_nodes) <= constants]
    # only views stay (a transpose: folded, a second copy of the data to read; permute or t); the broadcast's sum is
    # folded where the trace is recorded (bayesx.native.recorder: its result is no larger than the data)
    assert folded and all(n.target in codegen.VIEWS for n in folded), folded
    assert any(n.target in (torch.ops.aten.t.default, torch.ops.aten.permute.default) for n in folded), folded
    density = for_sampler(target, 10**6)
    assert density.name == backend.COMPILED, density.record.reason
    q = torch.randn(5, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    lp, _ = density.logp_and_grad(q)
    torch.testing.assert_close(lp, target.log_prob(q), rtol=1e-12, atol=1e-12)


def test_approximations_use_a_compiled_density_only_where_it_is_faster(gaussian, monkeypatch, capsys):
    """prepare for a fit's batches under auto: a density that needs AOTInductor (an eigendecomposition has no plain C) and is
    not in the cache is not compiled for a fit (no line on stderr); one written as plain C is compiled now (about
    a second); a compiled one is used at the fit's batch where it was timed faster than PyTorch, and not where it
    was slower (a large batch of a vectorized density), with the timings in the reason."""
    untimed = lambda density: dataclasses.replace(density.record, seconds=0.0)  # noqa: E731
    for_fit = lambda target, batch: backend.prepare(target, backend.Workload(batch), "auto")  # noqa: E731
    slow = Spectral(5.0 * COV)  # never compiled
    assert untimed(for_fit(slow, torch.zeros(8, 3, dtype=torch.float64))) == backend.Preparation(backend.PYTORCH)
    assert capsys.readouterr().err == ""
    quick = UserGaussian(5.0 * COV)  # never compiled
    prepared = for_fit(quick, torch.zeros(8, 3, dtype=torch.float64)).record
    assert not prepared.cached and prepared.compile_s > 0 and "plain C" in capsys.readouterr().err
    target = UserGaussian()  # the same content as the fixture's: in the cache
    times = {}
    monkeypatch.setattr(backend, "_best_time", lambda function, batch: times[getattr(function, "__self__", None)
                                                                             is not target])
    times.update({True: 1e-5, False: 3e-4})  # compiled (a bound method of the CompiledDensity) faster
    small = torch.zeros(8, 3, dtype=torch.float64)
    density = for_fit(target, small)
    assert untimed(density) == backend.Preparation(backend.COMPILED, 0.0, True, compiler="plain C") \
        and density.record.seconds > 0
    assert density.timings() == {"compile_time_s": density.record.seconds}
    assert density.fast.runs(small) and not density.fast.runs(torch.zeros(9, 3, dtype=torch.float64))
    times.update({True: 2e-3, False: 4e-4})  # PyTorch faster at 4,096 points
    large = torch.zeros(4096, 3, dtype=torch.float64)
    slower = for_fit(target, large)
    assert slower.name == backend.PYTORCH and slower.trajectory is None \
        and "PyTorch is faster at 4096 points per call (400 against 2000 us)" in slower.record.reason
    assert slower.tags()["compiled_density"].startswith("cached, not used: PyTorch is faster")


def test_vi_pathfinder_and_the_latent_chain_run_on_the_compiled_density(gaussian, monkeypatch):
    """With compile=always, Gaussian VI's gradients, Pathfinder's L-BFGS and AE-HMC's latent trajectories go
    through the compiled density and never call the target's PyTorch gradient; VI's fit equals the PyTorch
    path's up to rounding, and the latent chain (an invertible linear auto-encoder: exact) has the moments."""
    from bayesx.kernels import latent_hmc as latent
    from bayesx.methods.mcmc.aehmc import LatentSampler
    from bayesx.methods.vi.gaussian import GaussianVI
    from bayesx.methods.vi.pathfinder import Pathfinder
    from bayesx.nn.autoencoder import AutoEncoder

    def fit(target, method):
        g = torch.Generator().manual_seed(4)
        return method.infer(target, RunInputs(target.initial_point(1, g), g, progress=False))

    calls = []
    target = UserGaussian()
    monkeypatch.setattr(target, "log_prob_and_grad", lambda q: calls.append(q) or TargetBase.log_prob_and_grad(
        target, q))
    vi = fit(target, GaussianVI(family="fullrank", num_steps=300, num_draws=50))
    assert vi.tags["kernels"] == backend.COMPILED and not calls
    path = fit(target, Pathfinder(num_draws=50, max_iter=50))
    assert path.tags["kernels"] == backend.COMPILED and not calls
    monkeypatch.setenv("BAYESX_COMPILE", "never")
    plain = fit(UserGaussian(), GaussianVI(family="fullrank", num_steps=300, num_draws=50))
    assert plain.tags["kernels"] == backend.PYTORCH
    torch.testing.assert_close(vi.fitted["q_mean"], plain.fitted["q_mean"], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(vi.fitted["q_scale"], plain.fitted["q_scale"], rtol=1e-6, atol=1e-8)

    monkeypatch.setenv("BAYESX_COMPILE", "always")
    g = torch.Generator().manual_seed(5)
    a = torch.eye(3, dtype=torch.float64) + 0.3 * torch.randn(3, 3, generator=g, dtype=torch.float64)
    ae = AutoEncoder(3, 3, "linear").double()
    with torch.no_grad():
        ae.enc_in.weight.copy_(a)
        ae.dec_out.weight.copy_(torch.linalg.inv(a))
    scale = torch.tensor([1.0, 1.2, 1.4], dtype=torch.float64)
    space = latent.LatentSpace(target, ae.requires_grad_(False), torch.zeros(3, dtype=torch.float64), scale)
    sampler = LatentSampler(space, latent.LatentParams(0.0, 8, True, "original"), num_warmup=200, num_draws=1500)
    result = sampler.sample(target, RunInputs(target.initial_point(4, g), g, progress=False))
    assert result.tags["kernels"] == backend.COMPILED and not calls
    draws = torch.as_tensor(result.draws).reshape(-1, 3).numpy()
    from bayesx.diagnostics.convergence import ess_per_coordinate

    ess = ess_per_coordinate(torch.as_tensor(result.draws))
    var = COV.diagonal().numpy()
    assert np.abs(draws.mean(0) / np.sqrt(var / ess)).max() < 4.5
    assert np.abs((draws.var(0) - var) / np.sqrt(2 * var**2 / ess)).max() < 4.5


class Spectral(UserGaussian):
    """Uses an eigendecomposition, which AOTInductor has no C shim for and bayesx does not unroll."""

    def log_prob(self, q):
        return super().log_prob(q) - 1e-3 * torch.linalg.eigvalsh(q[..., :, None] * q[..., None, :]).sum(-1)


@pytest.mark.slow
def test_factorizations_compile_unrolled_and_other_lapack_calls_are_refused_in_one_line(cache):
    """gp_pois_regr factorizes its kernel matrix (linalg_cholesky_ex; autograd's backward adds a triangular solve):
    AOTInductor would run those through a proxy executor the C kernels do not provide, so they are traced unrolled
    (bayesx.native.unrolled_linalg) and the density compiles and agrees with autograd. An operator still needing the
    proxy executor (an eigendecomposition) is refused at compile time with the reason."""
    from bayesx.targets.posteriordb.target import PosteriorDB

    target = PosteriorDB(name="gp_pois_regr")
    density = compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
    q = 0.3 * torch.randn(4, target.dim, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    lp, grad = density.log_prob_and_grad(q)
    expected, expected_grad = target.log_prob_and_grad(q)
    torch.testing.assert_close(lp, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-8, atol=1e-8)
    with pytest.raises(compiled.NotCompiled, match="proxy executor"):
        compiled.compiled_density(Spectral().log_prob, 3, torch.float64)


@pytest.mark.slow
def test_garch11_compiles_once_its_constants_are_folded(cache, monkeypatch):
    """garch11 squares a 0-d data constant (sigma_1^2) inside its density: unfolded, this torch's AOTInductor fails
    to lower it (LoweringException); folded at trace time, it compiles and agrees with autograd (AOTInductor alone:
    plain C off)."""
    from bayesx.targets.posteriordb.target import PosteriorDB

    monkeypatch.setenv("BAYESX_PLAIN_C", "0")

    target = PosteriorDB(name="garch11")
    density = compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
    assert not density.cached
    monkeypatch.setattr(compiled, "_fold_constants", lambda graph: None)
    monkeypatch.setenv("BAYESX_RECORDER", "0")  # the recorder folds as it records: make_fx's graph, unfolded
    with pytest.raises(compiled.NotCompiled, match="LoweringException"):
        compiled.compiled_density(target.autograd_log_prob(), target.dim, torch.float64)
