"""Where the configs live, what each group offers, and composing a config with clear errors.

Hydra's own messages for a bad override span several lines and end with a hint about
HYDRA_FULL_ERROR; :func:`check_overrides` composes the config first (with the first value of
every sweep) and turns any problem into a one-line :class:`BayesxError` with the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from omegaconf import DictConfig, OmegaConf

from bayesx.errors import BayesxError
from bayesx.settings import conf_dir, group_choices
from bayesx.cli.launchers import PLUGINS, missing_plugin

GROUPS = ("model", "data", "method", "device", "tracking", "experiment")


def default_choices() -> dict[str, str]:
    """The choice ``conf/config.yaml``'s defaults list makes for each config group (``null`` ones left out)."""
    entries = OmegaConf.load(conf_dir() / "config.yaml").get("defaults", [])
    return {str(k): str(v) for entry in entries if isinstance(entry, Mapping) for k, v in entry.items()
            if v is not None and "/" not in str(k) and not str(k).startswith("override")}


def all_group_choices() -> dict[str, list[str]]:
    return {g: group_choices(g) for g in GROUPS}


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _first_values(overrides: list[str]) -> list[str]:
    """Parse overrides with Hydra's parser; check group choices; return a sweep-free list. An interval
    sweep (a tuner's search space, ``method.lr=interval(0.001,0.3)``) is left out: only the sweeper
    can pick its values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as exc:
        raise BayesxError(f"cannot parse override: {str(exc).splitlines()[0]}; write overrides as key=value") from exc
    single = []
    for override in parsed:
        key = override.get_key_element()
        group = override.key_or_group.lstrip("+~")
        if override.value_type == ValueType.INTERVAL_SWEEP:
            continue
        if override.is_sweep_override():
            values = [str(v) for v in override.sweep_string_iterator()]
        elif group in GROUPS and not override.is_delete():  # the value of anything else (a dict of
            values = [override.get_value_element_as_str()]  # sweeper params) need not be a string
        else:
            values = []
        if group in GROUPS and not override.is_delete():
            options = group_choices(group)
            for value in values:
                if value not in options and value != "null":
                    raise BayesxError(
                        f"unknown {group} '{value}'{_suggest(value, options)}; choose one of: {', '.join(options)}")
        if override.is_sweep_override():
            prefix = "+" if override.is_add() else ("++" if override.is_force_add() else "")
            single.append(f"{prefix}{override.key_or_group}={values[0]}" if values else key)
        else:
            single.append(override.input_line)
    return single


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """Compose the config as ``bayesx run`` would (sweeps reduced to their first value); with_hydra
    keeps Hydra's own node (its launcher, sweeper and choices)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    single = _first_values(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=single, return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException) as exc:
        raise BayesxError(_explain(str(exc))) from exc
    finally:
        GlobalHydra.instance().clear()


def check_overrides(overrides: list[str]) -> None:
    """The overrides compose, and the launcher and sweeper they choose (directly or through a preset)
    are installed."""
    choices = compose(overrides, with_hydra=True).hydra.runtime.choices
    for group in ("hydra/launcher", "hydra/sweeper"):
        hint = missing_plugin(group, str(choices.get(group)))
        if hint:
            raise BayesxError(hint)


def _explain(message: str) -> str:
    """Turn Hydra's multi-line composition error into one line with the fix."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    text = " ".join(lines)
    if "is not in struct" in text or "Could not override" in text:
        key = next((ln.split("'")[1] for ln in lines if ln.startswith("Could not override") and "'" in ln), "?")
        return (f"unknown config key '{key}'; check the spelling with `bayesx run --cfg job`, "
                f"or use +{key}=VALUE to add a new key")
    if "Could not append to config" in text:
        return lines[0] + "; the key already exists, so drop the leading '+'"
    if "Could not find" in text:
        for (group, choice) in PLUGINS:  # an experiment preset that names a plugin
            hint = missing_plugin(group, choice) if f"'{group}/{choice}'" in text else None
            if hint:
                return hint
        return lines[0] + "; run `bayesx --help` for the config groups and their choices"
    return lines[0] if lines else "invalid configuration"
