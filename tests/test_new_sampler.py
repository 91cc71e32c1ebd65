"""ARCHITECTURE.md's worked example, done: a new sampler is its kernel, its method module, its yaml and its test.

In a copy of the project's tracked files, the four files of a toy independence sampler are written and nothing
else is edited; the copy then runs it from the command line (recorded FINISHED), and its own test and the shared
tests that read the registry (the method contract, the kernel contract) collect it and pass. The docs check is the
one place that asks for more: it names the new method until docs/methods.md has its row (its control here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

KERNEL = '''
"""An independence sampler: proposals q* ~ N(0, s^2 I) whatever the state, accepted with
min(1, pi(q*) N(q; 0, s^2) / (pi(q) N(q*; 0, s^2))) (Tierney 1994)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from bayesx.kernels.common import log_density, metropolis_accept, where_rows  # noqa: F401
from bayesx.kernels.density import Density


class State(NamedTuple):
    position: Tensor
    log_prob: Tensor


class Info(NamedTuple):
    accept_prob: Tensor
    accepted: Tensor
    divergent: Tensor
    n_grad_evals: Tensor


class Params(NamedTuple):
    step_size: float  # the proposal's scale s


def init(position: Tensor, density: Density) -> State:
    return State(position, density.logp(position))


def step(state: State, density: Density, params: Params, gen: torch.Generator) -> tuple[State, Info]:
    s = params.step_size
    proposal = s * torch.randn(state.position.shape, generator=gen, dtype=state.position.dtype)
    log_prob = density.logp(proposal)
    log_q = lambda q: -0.5 * (q * q).sum(-1) / s**2  # noqa: E731
    accept_prob, accepted = metropolis_accept(log_prob - state.log_prob + log_q(state.position) - log_q(proposal), gen)
    new = State(where_rows(accepted, proposal, state.position), torch.where(accepted, log_prob, state.log_prob))
    zero = torch.zeros(state.position.shape[0], dtype=torch.long)
    return new, Info(accept_prob, accepted, torch.isnan(log_prob), zero)
'''

METHOD = '''
"""The independence sampler as a method of the runner (kernel: bayesx.kernels.toy_independence)."""

from __future__ import annotations

from dataclasses import dataclass

from bayesx.kernels import toy_independence
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings


@dataclass(frozen=True)
class ToySettings(MCMCSettings):
    step_size: float | None = 2.0  # the proposal's scale


class ToyIndependence(MCMCMethod):
    """Independence Metropolis with a fixed N(0, s^2 I) proposal."""

    Settings = ToySettings
    name = "toy_independence"

    def make_kernel(self) -> TransitionKernel:
        return TransitionKernel(toy_independence, lambda step_size, metric: toy_independence.Params(step_size),
                                gradients=0, uses_gradients=False)
'''

YAML = '''
# Independence Metropolis with a fixed Gaussian proposal (a toy: the worked example of a new sampler)
_target_: bayesx.methods.mcmc.toy_independence.ToyIndependence
num_warmup: 0
num_draws: 2000
step_size: 2.0        # the proposal's scale
adapt_step_size: false
mass: identity
init: prior
'''

TEST = '''
"""The independence sampler on a standard Gaussian: the mean within a few Monte Carlo standard errors; control:
a proposal scale far too small leaves the chains where they started, far from it."""

import torch

from bayesx.diagnostics.convergence import summarize
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.toy_independence import ToyIndependence
from bayesx.targets.gaussian import Gaussian


def run(scale):
    target, gen = Gaussian(dim=2, kind="isotropic"), torch.Generator().manual_seed(0)
    start = torch.full((4, 2), 3.0, dtype=torch.float64)
    method = ToyIndependence(step_size=scale, num_warmup=0, adapt_step_size=False, mass="identity")
    return method.sample(target, RunInputs(start, gen, progress=False)).draws


def test_the_independence_sampler_finds_the_mean_and_a_tiny_proposal_does_not():
    draws = run(1.5)
    mcse = draws.std() / summarize(draws.numpy())["ess_bulk_min"] ** 0.5
    assert draws.mean(dim=(0, 1)).abs().max() < 4 * mcse
    assert run(0.01).mean(dim=(0, 1)).abs().max() > 2.0
'''

FILES = {"bayesx/kernels/toy_independence.py": KERNEL, "bayesx/methods/mcmc/toy_independence.py": METHOD,
         "conf/method/toy_independence.yaml": YAML, "tests/test_toy_independence.py": TEST}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's tracked files with the new sampler's four files, and nothing else changed."""
    copy = tmp_path_factory.mktemp("project")
    tracked = subprocess.run(["git", "ls-files", "bayesx", "conf", "tests", "docs", "examples", "pyproject.toml"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    for name, text in FILES.items():
        assert not (copy / name).exists()
        (copy / name).write_text(textwrap.dedent(text).lstrip())
    return copy


def in_copy(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(project), "MLFLOW_TRACKING_URI": f"sqlite:///{project}/mlflow.db"}
    return subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True, timeout=900)


def test_the_new_sampler_runs_from_the_command_line(project):
    done = in_copy(project, "-m", "bayesx", "run", "method=toy_independence", "model=gaussian", "progress=false",
                   "plots.n_coords=0", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"status": "FINISHED"' in done.stdout and '"method": "toy_independence"' in done.stdout


def test_its_own_test_and_the_shared_tests_collect_it_and_pass(project):
    done = in_copy(project, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/test_toy_independence.py",
                   "tests/test_method_contract.py", "tests/test_mcmc_kernel.py", "-k", "toy_independence")
    assert done.returncode == 0, done.stdout[-3000:]
    passed = [line for line in done.stdout.splitlines() if line.startswith("PASSED")]
    for shared in ("test_every_method_has_its_familys_one_hook", "test_every_method_infers_a_result_from_its_hooks",
                   "test_every_posterior_method_runs_on_a_constrained_model",
                   "test_every_registered_sampler_kernel_has_the_contract",
                   "test_the_independence_sampler_finds_the_mean"):
        assert any(shared in line for line in passed), f"{shared} did not run on the new sampler"


def test_the_docs_check_asks_for_its_row(project):
    """The control of the claim above: the shared tests do see the copy's new files, and the docs check names the
    method until docs/methods.md documents it."""
    done = in_copy(project, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs.py", "-k", "methods")
    assert done.returncode != 0 and "toy_independence" in done.stdout
