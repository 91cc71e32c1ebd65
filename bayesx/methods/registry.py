"""The methods bayesx offers, read from ``conf/method/``: one yaml per method, whose ``_target_`` names its class.

This is the one list of methods: the CLI's choices, the error messages that name alternatives
(bayesx.methods.base.check_fits), the shared test lists and the docs table are all read from here, so a
new method is its module and its yaml, and nothing else lists it. A yaml without a ``_target_`` of its own
(a variant that composes another, if any) is a choice but not a class.
"""

from __future__ import annotations

import importlib
from functools import cache

from omegaconf import OmegaConf

from bayesx.settings import conf_dir, group_choices


def method_choices() -> list[str]:
    """Every ``method=`` choice: the stems of ``conf/method/*.yaml``, sorted."""
    return group_choices("method")


@cache
def method_target(name: str) -> str | None:
    """The dotted class path (``_target_``) of ``conf/method/<name>.yaml``, None where it has none."""
    target = OmegaConf.load(conf_dir() / "method" / f"{name}.yaml").get("_target_")
    return None if target is None else str(target)


def method_class(name: str) -> type | None:
    """The class ``method=<name>`` builds (imported), None where its yaml names none."""
    target = method_target(name)
    if target is None:
        return None
    module, _, attribute = target.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def methods_of_family(family: str) -> list[str]:
    """The ``method`` choices whose class belongs to ``family`` (sampler, approximation, trainer)."""
    return [name for name in method_choices() if (cls := method_class(name)) is not None and cls.family == family]
