"""The one validation layer (bayesx.settings): types, bounds, nested blocks and the key named once,
under whatever prefix the caller gives; and every ``_target_`` in conf/ declares a schema that its
yaml satisfies."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from bayesx.cli.config import conf_dir
from bayesx.errors import BayesxError
from bayesx.methods.mcmc.aehmc import AEHMC
from bayesx.methods.mcmc.hmc import HMC
from bayesx.settings import AtLeast, Between, Described, InvalidSetting, Positive, Settings, configure, takes


@dataclass(frozen=True)
class Inner(Settings):
    steps: Annotated[int, AtLeast(1)] = 10


@dataclass(frozen=True)
class Outer(Settings):
    rate: Annotated[float, Positive()] = 0.5
    share: Annotated[float, Between(0.0, 1.0)] = 0.2
    size: Annotated[int | Literal["auto"] | None, AtLeast(1)] = None
    kind: Literal["a", "b"] = "a"
    flag: bool = True
    sizes: Annotated[tuple[int, ...] | None, AtLeast(1)] = None
    where: Path | None = None
    pair: Annotated[tuple[int, ...], Described("two digits")] = (0, 1)
    inner: Inner = field(default_factory=Inner)

    def check(self):
        if self.kind == "b" and self.flag:
            raise InvalidSetting("flag", "must be false with kind=b")


def message(options, where="method") -> str:
    with pytest.raises(BayesxError) as info:
        configure(Outer, options, where)
    return str(info.value)


def test_values_are_converted_to_their_types():
    cfg = configure(Outer, {"rate": 2, "size": "auto", "sizes": [3, 4], "where": "x.csv", "inner": {"steps": 3}},
                    "method")
    assert cfg.rate == 2.0 and isinstance(cfg.rate, float)
    assert cfg.size == "auto" and cfg.sizes == (3, 4) and cfg.where == Path("x.csv") and cfg.inner == Inner(3)
    assert configure(Outer, {"size": 7}, "method").size == 7
    assert configure(Outer, cfg, "method") is cfg  # checked values pass through


@pytest.mark.parametrize("options,expected", [
    ({"rate": "abc"}, "method.rate must be a finite number > 0, got 'abc'; the default is 0.5"),
    ({"rate": 0}, "method.rate must be a number > 0, got 0.0"),
    ({"rate": True}, "method.rate must be a finite number > 0, got True"),  # a bool is not a number
    ({"share": 1.0}, "method.share must be a number in (0, 1), got 1.0"),
    ({"size": 0}, "method.size must be an integer >= 1, got 0"),
    ({"size": "many"}, "method.size must be an integer or one of auto or null >= 1, got 'many'"),
    ({"kind": "c"}, "method.kind must be one of a, b, got 'c'; the default is a"),
    ({"flag": "yes"}, "method.flag must be true or false, got 'yes'; the default is true"),
    ({"sizes": [2, 0]}, "method.sizes must be an integer >= 1, got (2, 0)"),
    ({"pair": "01"}, "method.pair must be two digits, got '01'; the default is [0, 1]"),
    ({"inner": {"steps": 0}}, "method.inner.steps must be an integer >= 1, got 0"),
    ({"inner": {"stpes": 2}}, "method.inner does not take the option 'stpes'; its options are steps"),
    ({"bogus": 1}, "method does not take the option 'bogus'"),
    ({"kind": "b"}, "method.flag must be false with kind=b"),
])
def test_a_bad_value_is_one_line_naming_its_key_once(options, expected):
    text = message(options)
    assert text.startswith(expected), text
    assert "\n" not in text and text.count("method.") <= 1


def test_the_prefix_is_the_callers():
    """The same schema reused under another key: no message rewriting."""
    assert message({"inner": {"steps": 0}}, "method.presample").startswith("method.presample.inner.steps must be")
    assert message({"rate": 0}, "").startswith("rate must be")


def test_a_method_built_in_python_is_checked_the_same_way():
    with pytest.raises(BayesxError, match=r"^method\.num_steps must be an integer >= 1, got 0"):
        HMC(num_steps=0)
    with pytest.raises(BayesxError, match=r"^method\.presample\.num_steps must be an integer >= 1, got 0"):
        AEHMC(presample={"num_steps": 0})
    # a nested block of the presampler gets the presampler's checked values, not its text
    assert AEHMC(num_steps=7).presampler(4).settings.num_steps == 7
    assert AEHMC(presample={"num_steps": 3}).presampler(4).settings.num_steps == 3


def test_a_decorated_loader_takes_positional_and_keyword_options():
    @dataclass(frozen=True)
    class LoaderSettings(Settings):
        name: Literal["x", "y"] = "x"
        n: Annotated[int, AtLeast(1)] = 1

    @takes(LoaderSettings, "data")
    def load(name, n):
        return name, n

    assert load("y", n=3) == ("y", 3) and load() == ("x", 1)
    assert load.Settings is LoaderSettings
    with pytest.raises(BayesxError, match=r"^data\.n must be an integer >= 1, got 0"):
        load(n=0)


def conf_nodes():
    for group in ("method", "model", "data"):
        for path in sorted((conf_dir() / group).glob("*.yaml")):
            yield pytest.param(group, path, id=f"{group}={path.stem}")


REQUIRED = {"model=custom": ["model.log_density=examples/eight_schools.py", "model.dim=10"],
            "model=pyro": ["model.fn=examples/eight_schools_pyro.py:model"]}
"""Options a config leaves for the user to set (its yaml alone is rejected, with a message naming them)."""


@pytest.mark.parametrize("group,path", conf_nodes())
def test_every_conf_target_declares_a_schema_its_yaml_satisfies(group, path, monkeypatch):
    """The yaml's keys are the schema's options, and its values (plus those the user must give) pass
    the schema's checks."""
    from hydra import compose, initialize_config_dir

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///unused.db")
    choice = f"{group}={path.stem}"
    with initialize_config_dir(str(conf_dir()), version_base=None):
        node = compose("config", [choice, *REQUIRED.get(choice, [])])[group]  # with the option's defaults list applied
    factory = get_object(node._target_)
    assert issubclass(factory.Settings, Settings)
    options = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
    settings = configure(factory.Settings, options, group)
    assert set(options) <= {f for f in settings.options()}


@pytest.mark.parametrize("group,schema", [("device", "DeviceSettings"), ("tracking", "TrackingSettings")])
def test_device_and_tracking_yamls_satisfy_their_schemas(group, schema, monkeypatch):
    from bayesx import run_settings

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///unused.db")
    for path in sorted((conf_dir() / group).glob("*.yaml")):
        options = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        configure(getattr(run_settings, schema), options, group)
    with pytest.raises(BayesxError, match=r"^device\.dtype must be one of auto, float32, float64, got 'float16'"):
        configure(run_settings.DeviceSettings, {"dtype": "float16"}, "device")
