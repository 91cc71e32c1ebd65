"""The method contract (bayesx.methods.base): every ``conf/method`` yaml builds a method of one family,
whose one hook has the signature ``(target, inputs)`` and whose family's ``infer`` returns a Result;
the contract module holds no family mathematics."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from functools import cache
from pathlib import Path

import pytest
import torch
from hydra.utils import get_object
from omegaconf import OmegaConf

import bayesx.methods.base as contract
from bayesx.cli.config import compose, conf_dir
from bayesx.methods.registry import methods_of_family
from bayesx.errors import BayesxError, RunInterrupted
from bayesx.methods.base import FAMILIES, Method, RunInputs, family_class
from bayesx.result import Outcome, Result
from bayesx.settings import configure

pytestmark = pytest.mark.usefixtures("data_dir")  # the elliptic prior-factor cache goes to a temporary folder

METHODS = sorted(p.stem for p in (conf_dir() / "method").glob("*.yaml"))

# settings small enough that every method runs in a moment on the targets below: a sampler's are the family's
# (every sampler has MCMCSettings' num_warmup and num_draws), so a new sampler needs no entry here; the few of
# several stages, every approximation and every trainer (whose options differ) name theirs
SAMPLER = {"num_warmup": 10, "num_draws": 10}
PRESAMPLE = {**SAMPLER, "presample": {"num_warmup": 10, "num_draws": 80}, "train": {"max_epochs": 20}}
TRAINER = {"epochs": 1, "eval": {"k": 2, "n_test": 8, "grid": 4}}
TINY = {
    "aehmc": {**PRESAMPLE, "latent_dim": 2}, "pcahmc": PRESAMPLE, "aepcn": {**PRESAMPLE, "latent_dim": 4},
    "dapcn": {**SAMPLER, "coarse_mesh": 4, "subchain_length": 2},
    "ais": {"n_temps": 2, "n_samples": 20, "num_draws": 20}, "smc": {"n_particles": 20, "num_draws": 20},
    "flowvi": {"iterations": 5, "num_draws": 20}, "gap": {"num_steps": 5, "n_mc": 50, "num_draws": 20},
    "hamiltonian_vi": {"iterations": 5, "num_draws": 20}, "laplace": {"num_draws": 20},
    "pathfinder": {"num_draws": 20}, "svgd": {"n_particles": 10, "num_steps": 5}, "vi": {"num_steps": 20, "num_draws": 20},
    "vae": TRAINER, "hvi": TRAINER, "rmhvi": {**TRAINER, "fisher_samples": 1, "fixed_point_iters": 1}, "flowvae": TRAINER, "dppvae": TRAINER,
}
FAMILY_TINY = {"sampler": SAMPLER}


def small_settings(name: str) -> dict:
    """The small settings of ``method=<name>``: its own in TINY, else its family's."""
    if name in TINY:
        return TINY[name]
    return FAMILY_TINY[family_of(name)]


@cache
def family_of(name: str) -> str:
    """The family of ``method=<name>`` (a yaml that extends another, pcahmc, by the class it composes to)."""
    return get_object(compose([f"method={name}"]).method._target_).family


def build(name: str, small: bool = False) -> Method:
    """The method ``method=<name>`` composes to, as the runner builds it (optionally with TINY's settings)."""
    node = compose([f"method={name}"]).method
    if small:
        node = OmegaConf.merge(node, small_settings(name))
    options = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    factory = get_object(node._target_)
    return factory(settings=configure(factory.Settings, options, "method"))


@pytest.fixture(scope="module")
def targets():
    from bayesx.data.images import load_images
    from bayesx.targets.elliptic.model import EllipticInverse
    from bayesx.targets.gaussian import Gaussian
    from bayesx.methods.vae.model import VAEModel

    return {"posterior": Gaussian(dim=3), "gaussian_prior": EllipticInverse(mesh=8),
            "trained": VAEModel(load_images("mnist", n_train=32, n_test=8), arch="fc")}


def test_every_method_has_small_settings_and_a_new_sampler_needs_none():
    assert set(TINY) <= set(METHODS)
    missing = [name for name in METHODS if name not in TINY and family_of(name) not in FAMILY_TINY]
    assert missing == [], f"methods without small settings in TINY: {missing}"
    assert family_of("mams") == "sampler" and "mams" not in TINY  # a plain sampler takes the family's


def needs_gaussian_prior(method) -> bool:
    """Whether the method refuses a plain posterior (no Gaussian prior it can sample, no coarse levels: pCN-type), as
    its own check says; such a method runs on the elliptic model."""
    from bayesx.targets.gaussian import Gaussian

    try:
        method.check(Gaussian(dim=3), 4)
    except BayesxError as exc:
        return "model=elliptic" in str(exc)
    return False


@pytest.mark.parametrize("name", METHODS)
def test_every_method_has_its_familys_one_hook(name):
    method = build(name)
    family = family_class(method.family)
    assert isinstance(method, family) and family.family == method.family
    hook = getattr(type(method), family.hook)
    assert not getattr(hook, "__isabstractmethod__", False)
    required = [p.name for p in inspect.signature(hook).parameters.values()
                if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD]
    assert required[0] == "self" and len(required) == 3 and required[2] == "inputs"
    assert type(method).infer is family.infer  # the family's, calling the hook: no method writes its own


@pytest.mark.parametrize("name", METHODS)
def test_every_method_infers_a_result_from_its_hooks_typed_output(name, targets):
    method = build(name, small=True)
    kind = ("trained" if method.family == "trainer" else
            "gaussian_prior" if needs_gaussian_prior(method) else "posterior")
    target = targets[kind]
    g = torch.Generator().manual_seed(0)
    method.check(target, 4)
    hook, outputs = getattr(method, method.hook), []
    setattr(method, method.hook, lambda *args: outputs.append(hook(*args)) or outputs[-1])  # a spy on the hook
    result = method.infer(target, RunInputs(method.initial_points(target, 4, g), g, progress=False))
    assert len(outputs) == 1 and isinstance(outputs[0], Outcome) and not isinstance(outputs[0], Result)
    assert isinstance(result, Result) and result.error is None and not result.interrupted
    assert (result.draws is None) == (method.family == "trainer")
    if result.draws is not None:
        assert result.draws.shape[-1] == target.dim and torch.isfinite(result.draws).all()


def test_run_inputs_are_frozen():
    inputs = RunInputs(None, torch.Generator())
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.progress = True


def test_families_are_registered_by_name_and_listed_from_conf():
    for name in FAMILIES:
        cls = family_class(name)
        assert cls.family == name and getattr(cls, cls.hook).__isabstractmethod__
    listed = [n for f in FAMILIES for n in methods_of_family(f)]
    assert len(listed) == len(set(listed))  # one family each
    own_target = [p.stem for p in (conf_dir() / "method").glob("*.yaml") if "_target_" in OmegaConf.load(p)]
    assert sorted(listed) == sorted(own_target)  # (a yaml that only extends another, pcahmc, names no class)


def test_the_contract_module_is_short_and_holds_no_family_mathematics():
    source = Path(contract.__file__).read_text()
    assert len(source.splitlines()) < 130  # the contract, RunInputs (with the prepared density since issue 51) and the registry
    imported = {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    assert not any(m.startswith(("bayesx.diagnostics", "bayesx.methods.", "bayesx.kernels")) for m in imported
                   if m != "bayesx.methods.registry")  # the one list of methods, read from conf/method
    assert not any(word in source for word in ("multinomial", "rhat", "psis", "tree_depth"))


def test_an_interrupted_tempered_path_keeps_its_trace_and_has_no_draws(monkeypatch):
    """AIS stopped half way: the Result says so, keeps the acceptance trace so far, and draws nothing
    from particles that never reached the posterior."""
    from bayesx.methods.vi import ais, tempering
    from bayesx.targets.gaussian import Gaussian

    moves = []

    def move(self, z, tempered, gen):
        moves.append(tempered)
        if len(moves) == 3:
            raise RunInterrupted("SIGTERM")
        return z, 0.5

    monkeypatch.setattr(tempering.Mover, "move", move)
    g = torch.Generator().manual_seed(0)
    result = ais.AIS(n_temps=5, n_samples=10).infer(Gaussian(dim=2), RunInputs(None, g, progress=False))
    assert result.interrupted and result.tags["stopped_during"] == "fit" and result.draws is None
    assert result.traces["ais_accept_rate"] == [(1, 0.5), (2, 0.5)] and "fit_time_s" in result.timings


POSTERIOR_METHODS = [name for name in METHODS if (method := build(name)).family != "trainer"
                     and not needs_gaussian_prior(method)]


@pytest.fixture(scope="module")
def constrained_target():
    """Eight schools declared with named, constrained parameters (model.params: mu real, tau positive, eta real[8]),
    as a user writes it (examples/eight_schools_constrained.py)."""
    from bayesx.targets.custom import CustomModel

    example = Path(__file__).resolve().parents[1] / "examples" / "eight_schools_constrained.py"
    return CustomModel(log_density=f"{example}:noncentered", params={"mu": "real", "tau": "positive", "eta": "real[8]"})


@pytest.mark.parametrize("name", POSTERIOR_METHODS)
def test_every_posterior_method_runs_on_a_constrained_model(name, constrained_target):
    """Every method that samples or approximates a density runs on a model.params model: its draws are on the
    unconstrained space, finite, and map onto the supports (tau > 0) with the declared names."""
    method = build(name, small=True)
    g = torch.Generator().manual_seed(0)
    method.check(constrained_target, 4)
    result = method.infer(constrained_target, RunInputs(method.initial_points(constrained_target, 4, g), g,
                                                        progress=False))
    assert result.error is None and result.draws.shape[-1] == constrained_target.dim == 10
    assert torch.isfinite(result.draws).all()
    with torch.no_grad():
        values = constrained_target.constrain(result.draws.reshape(-1, 10).double())
    names = constrained_target.reported_names()
    assert names[:3] == ["mu", "tau", "eta[0]"] and bool((values[:, names.index("tau")] > 0).all())
