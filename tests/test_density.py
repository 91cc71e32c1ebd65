"""The density is a value (issue 51 item 1): bayesx.kernels.backend.prepare(target, workload, policy) -> Density,
made once by each method family and passed on; kernels and fits take it as BlackJAX's take ``logdensity_fn``.

- The seam's shape: no module-level cache dict and no environment read in bayesx/kernels; every kernel's step takes
  a density (a target handed to one fails); ``backend.prepare`` is called in one place per family.
- The compiled gradient reaches VI through the Density: Gaussian VI under compile=always evaluates the compiled
  density and never the target's PyTorch gradient (control: compile=never the other way round), and a fit that
  backpropagates through log pi (``differentiable_logp``) gets the prepared gradient.
- A Density falls back to PyTorch for points its fast path does not take (points under autograd, more chains than
  the native form runs), and names its backend for the run record.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shutil
from pathlib import Path

import pytest
import torch
from method_helpers import gen, prepared

from bayesx.kernels import backend, chees, hmc, mams, nuts, rwm
from bayesx.kernels.density import Density
from bayesx.methods.base import RunInputs
from bayesx.native import compiled
from bayesx.native import logistic as native
from bayesx.targets.base import TargetBase
from bayesx.targets.gaussian import Gaussian

PACKAGE = Path(__file__).resolve().parents[1] / "bayesx"
CACHE_OR_ENVIRON = re.compile(r"os\.environ|^_[A-Z_]* *= *(\{\}|weakref\.|dict\()|^[a-z_]* *= *(\{\}|weakref\.)",
                              re.MULTILINE)


def test_the_kernels_hold_no_cache_and_read_no_environment():
    found = {str(path.relative_to(PACKAGE)): CACHE_OR_ENVIRON.findall(path.read_text())
             for path in (PACKAGE / "kernels").glob("*.py")}
    assert not {path: hits for path, hits in found.items() if hits}
    planted = "import os\n_compiled = {}\npolicy = os.environ.get('X')\n"  # negative control: the check sees them
    assert len(CACHE_OR_ENVIRON.findall(planted)) == 2


def kernel_modules():
    """Every bayesx.kernels module with a transition (a ``step`` function), found in the package, not listed."""
    names = sorted(path.stem for path in (PACKAGE / "kernels").glob("*.py"))
    modules = [importlib.import_module(f"bayesx.kernels.{name}") for name in names]
    return [module for module in modules if inspect.isfunction(getattr(module, "step", None))]


def test_every_kernel_step_takes_a_density_and_a_target_is_refused():
    """One name, ``density``, for what a kernel moves on: the parameter after the state in ``step`` and after the
    position in ``init`` (latent kernels bind their space first)."""
    kernels = kernel_modules()
    assert {hmc, nuts, mams, chees, rwm} <= set(kernels) and len(kernels) >= 9
    for kernel in kernels:
        for function, before in ((kernel.step, "state"), (kernel.init, "position")):
            names = list(inspect.signature(function).parameters)
            assert names[names.index(before) + 1] == "density", f"{kernel.__name__}.{function.__name__}"
    for kernel in (hmc, nuts, mams, chees, rwm):
        assert inspect.signature(kernel.step).parameters["density"].annotation in (Density, "Density")
    target = Gaussian(dim=3, kind="isotropic")
    q = target.initial_point(2, gen(0))
    with pytest.raises(AttributeError, match="logp_and_grad"):  # the lookup by target is gone
        hmc.init(q, target)
    state = hmc.init(q, prepared(target, q))
    torch.testing.assert_close(state.log_prob, target.log_prob(q))


def test_prepare_is_called_once_per_family_and_the_runner_sets_no_environment():
    calls = {str(path.relative_to(PACKAGE)): path.read_text().count("backend.prepare(")
             for path in PACKAGE.glob("**/*.py")}
    assert {path: n for path, n in calls.items() if n} == {"methods/mcmc/driver.py": 1, "methods/vi/family.py": 1}
    assert "BAYESX_COMPILE" not in (PACKAGE / "runner.py").read_text()


def test_a_density_names_its_backend_and_falls_back_to_pytorch_for_other_points(monkeypatch):
    from bayesx.data.digits import load_digits
    from bayesx.targets.logreg import LogisticRegression

    if not native.available():
        pytest.skip("the native library is not built here")
    target = LogisticRegression(load_digits())
    chains = target.initial_point(4, gen(1))
    density = prepared(target, chains)
    assert density.name == "native" and density.trajectory is not None and density.nuts_transition is not None
    lp, grad = density.logp_and_grad(chains)
    expected, expected_grad = target.log_prob_and_grad(chains)
    torch.testing.assert_close(lp, expected)
    torch.testing.assert_close(grad, expected_grad)
    calls = []
    density_on_counted = backend.prepare(_Counting(target, calls), backend.Workload(chains, 0), "never")
    density_on_counted.logp_and_grad(chains)
    assert not calls  # the native form
    density_on_counted.logp_and_grad(chains.clone().requires_grad_(True))  # under autograd: PyTorch
    assert len(calls) == 1
    monkeypatch.setattr(native, "many_chains", lambda form: 8)  # as on a large design: PyTorch from 8 chains
    eight = target.initial_point(8, gen(2))
    assert prepared(target, eight).name == "pytorch" and prepared(target, chains).name == "native"
    density_on_counted.logp_and_grad(eight)  # the four chains' native density, asked for eight: PyTorch
    assert len(calls) == 2


class _Counting(TargetBase):
    """A target's density whose PyTorch gradient counts its calls."""

    def __init__(self, target, calls: list):
        self.target, self.calls = target, calls
        self.dim, self.dtype, self.device = target.dim, target.dtype, target.device

    def log_prob(self, q):
        return self.target.log_prob(q)

    def log_prob_and_grad(self, q):
        self.calls.append(q.shape)
        return self.target.log_prob_and_grad(q)

    def density_form(self):
        return self.target.density_form()

    def autograd_log_prob(self):
        return self.target.autograd_log_prob()


class UserGaussian(TargetBase):
    """A correlated Gaussian as a user writes it: torch code, no form, no analytic gradient."""

    def __init__(self):
        self.dim, self.dtype, self.device = 3, torch.float64, torch.device("cpu")
        cov = torch.tensor([[1.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.5]], dtype=torch.float64)
        self.precision = torch.linalg.inv(cov)

    def log_prob(self, q):
        return -0.5 * ((q @ self.precision) * q).sum(-1)


needs_compiler = pytest.mark.skipif(not (native.available() and shutil.which("g++")),
                                    reason="no C/C++ compiler: densities cannot be compiled here")


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """Calls of every compiled density's gradient and of the user's PyTorch gradient."""
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path / "cache"))
    seen = {"compiled": 0, "pytorch": 0}
    real_compiled, real_pytorch = compiled.CompiledDensity.log_prob_and_grad, TargetBase.log_prob_and_grad

    def compiled_call(self, q):
        seen["compiled"] += 1
        return real_compiled(self, q)

    def pytorch_call(self, q):
        seen["pytorch"] += 1
        return real_pytorch(self, q)
    monkeypatch.setattr(compiled.CompiledDensity, "log_prob_and_grad", compiled_call)
    monkeypatch.setattr(UserGaussian, "log_prob_and_grad", pytorch_call)
    return seen


@pytest.mark.slow
@needs_compiler
def test_the_compiled_gradient_reaches_vi_through_the_density(counted):
    """method=vi under compile=always: every gradient of the fit is the compiled density's (the timing and check
    calls of the preparation aside), none the target's PyTorch code; control: compile=never, the other way round.
    The two fits agree up to rounding."""
    from bayesx.methods.vi.gaussian import GaussianVI

    def fit(policy: str):
        g = gen(4)
        target = UserGaussian()
        return GaussianVI(family="fullrank", num_steps=200, num_draws=50).infer(
            target, RunInputs(target.initial_point(1, g), g, progress=False, compile=policy))

    fast = fit("always")
    assert fast.tags["kernels"] == backend.COMPILED
    assert counted["compiled"] >= 200 and counted["pytorch"] == 0, counted
    counted.update(compiled=0, pytorch=0)
    plain = fit("never")
    assert plain.tags["kernels"] == backend.PYTORCH
    assert counted["compiled"] == 0 and counted["pytorch"] >= 200, counted
    torch.testing.assert_close(fast.fitted["q_mean"], plain.fitted["q_mean"], rtol=1e-6, atol=1e-8)


@needs_compiler
def test_a_fit_that_backpropagates_through_log_pi_gets_the_prepared_gradient(counted):
    """``differentiable_logp``: log pi as a node of torch's graph whose backward is the Density's gradient (the
    compiled one here); it equals autograd's through the target's own code."""
    target = UserGaussian()
    density = backend.prepare(target, backend.Workload(torch.zeros(5, 3, dtype=torch.float64), 10**6), "always")
    assert density.name == backend.COMPILED
    counted.update(compiled=0, pytorch=0)
    q = torch.randn(5, 3, generator=gen(5), dtype=torch.float64, requires_grad=True)
    (density.differentiable_logp(q) * torch.arange(1.0, 6.0, dtype=torch.float64)).sum().backward()
    assert counted == {"compiled": 1, "pytorch": 0}
    expected = torch.autograd.grad((target.log_prob(q) * torch.arange(1.0, 6.0, dtype=torch.float64)).sum(), q)[0]
    torch.testing.assert_close(q.grad, expected, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(q.grad, torch.autograd.grad(target.log_prob(q).sum(), q)[0])  # the weights count


def test_a_bad_policy_is_one_line_naming_the_fix():
    from bayesx.errors import BayesxError

    target = Gaussian(dim=2, kind="isotropic")
    with pytest.raises(BayesxError, match=r"compile policy .sometimes. .* is not one of auto, always, never"):
        backend.prepare(target, backend.Workload(target.initial_point(2, gen(0)), 10), "sometimes")


def test_the_users_policy_is_read_once_where_the_run_settings_are_resolved(monkeypatch):
    """$BAYESX_COMPILE is the user's default for a null ``device.compile``, read by the run settings (never by the
    kernels) and passed on as RunInputs.compile; a bad value is one line naming the fix."""
    from bayesx.errors import BayesxError
    from bayesx.run_settings import DeviceSettings

    monkeypatch.setenv("BAYESX_COMPILE", "0")
    assert DeviceSettings().compile_policy() == "never" and RunInputs(None, gen(0)).compile == "never"
    assert DeviceSettings(compile="always").compile_policy() == "always"
    monkeypatch.delenv("BAYESX_COMPILE")
    assert DeviceSettings().compile_policy() == "auto"
    monkeypatch.setenv("BAYESX_COMPILE", "sometimes")
    with pytest.raises(BayesxError, match=r"^BAYESX_COMPILE=sometimes is not one of auto, always, never; unset it"):
        DeviceSettings().compile_policy()
