"""The MCMC driver's kernel contract (bayesx.methods.mcmc.kernel): every sampler's kernel has the Kernel members,
says whether it uses gradients, and the driver reads that answer (refused metric forms, the gradient check)."""

from __future__ import annotations

import pytest
import torch

from bayesx.errors import BayesxError
from bayesx.kernels import dapcn, rwm
from bayesx.methods.base import RunInputs, check_fits
from bayesx.methods.mcmc.chees import Chees
from bayesx.methods.mcmc.dapcn import DASampler
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.kernel import Kernel, TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod
from bayesx.methods.registry import method_class, methods_of_family
from bayesx.methods.mcmc.mams import MAMS
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.mcmc.pcn import PCN
from bayesx.methods.mcmc.rwm import RWM
from bayesx.settings import InvalidSetting
from bayesx.targets.gaussian import Gaussian

SAMPLERS = {  # method -> (uses gradients, gradients per transition)
    NUTS(): (True, 8), HMC(num_steps=7): (True, 7), Chees(): (True, 8), MAMS(integrator="leapfrog"): (True, 8),
    MAMS(): (True, 16), RWM(): (False, 0), PCN(): (False, 0),
    DASampler((4,), (2,), dapcn.PriorProposal()): (False, 0),
}


@pytest.mark.parametrize("method", list(SAMPLERS), ids=lambda m: type(m).__name__)
def test_every_sampler_kernel_has_the_contract(method):
    uses, gradients = SAMPLERS[method]
    assert isinstance(method.kernel, Kernel)
    assert method.kernel.uses_gradients is uses and method.uses_gradients is uses
    assert method.kernel.gradients_per_transition() == gradients == method.density_calls_per_transition()


def mcmc_samplers() -> list[str]:
    """Every ``method=`` choice whose class is an MCMCMethod, read from conf/method (bayesx.methods.registry): a new
    sampler is checked below without being listed anywhere."""
    return [name for name in methods_of_family("sampler") if issubclass(method_class(name), MCMCMethod)]


@pytest.mark.parametrize("name", mcmc_samplers())
def test_every_registered_sampler_kernel_has_the_contract(name):
    method = method_class(name)()
    kernel = method.kernel
    assert isinstance(kernel, Kernel) and isinstance(kernel.uses_gradients, bool)
    gradients = kernel.gradients_per_transition()
    assert (gradients > 0) is kernel.uses_gradients and gradients == method.density_calls_per_transition()
    assert method.needs_gradients() or not kernel.uses_gradients


def test_the_registry_finds_the_listed_samplers():
    assert {"nuts", "hmc", "chees", "mams", "rwm", "pcn"} <= set(mcmc_samplers())
    assert "aehmc" not in mcmc_samplers()  # a sampler of several stages builds its kernels per stage


def test_an_object_without_parameters_is_not_a_kernel():
    class NoParameters:  # init, step and log_density alone: a bayesx.kernels module's shape, not the driver's
        uses_gradients = False
        init, step, log_density = staticmethod(rwm.init), staticmethod(rwm.step), staticmethod(rwm.log_density)

        def gradients_per_transition(self):
            return 0

    assert not isinstance(NoParameters(), Kernel) and not isinstance(rwm, Kernel)


class NoGradient(Gaussian):
    def gradient_problem(self):
        return "the density has no autograd gradient (a test double)"


def test_gradient_free_samplers_need_no_gradient_and_refuse_gradient_metrics():
    target = NoGradient(dim=3)
    for method in (RWM(init="prior"), PCN(init="prior")):
        check_fits(method, target, method.name, "gaussian")  # no gradient needed
    with pytest.raises(BayesxError, match="gradient"):  # the control: a gradient-based sampler is refused
        check_fits(NUTS(init="prior"), target, "nuts", "gaussian")
    with pytest.raises(InvalidSetting, match="diag_grad"):
        RWM(mass="diag_grad").check(target, 4)
    assert RWM(mass="auto").mass_form(500) == "diag" and NUTS(mass="auto").mass_form(500) == "diag_grad"


def test_a_new_sampler_is_a_kernel_and_a_method():
    """ARCHITECTURE.md's worked example: a method whose only member beyond its name is make_kernel samples."""
    from bayesx.methods.mcmc.sampler import MCMCMethod

    class Walk(MCMCMethod):
        name = "walk"

        def make_kernel(self):
            return TransitionKernel(rwm, rwm.RWMParams, gradients=0, uses_gradients=False)

    target, gen = Gaussian(dim=2), torch.Generator().manual_seed(0)
    out = Walk(num_warmup=50, num_draws=30, init="prior", target_accept=0.3).sample(
        target, RunInputs(target.initial_point(2, gen), gen, progress=False))
    assert out.draws.shape == (2, 30, 2) and 0.05 < out.metrics["accept_rate"] < 0.9
