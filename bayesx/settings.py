"""Config values, checked in one layer.

Every class (or loader function) that a ``_target_`` in ``conf/`` names declares its options as one
frozen dataclass deriving :class:`Settings`: a typed field per option, its default, and its bounds
as ``Annotated`` metadata::

    @dataclass(frozen=True)
    class HMCSettings(MCMCSettings):
        num_steps: Annotated[int, AtLeast(1)] = 10

Building the dataclass checks it: each field against its type and bounds (an int is accepted where
a float is asked; a bool never passes for a number; a dict becomes the nested Settings a field
names), then :meth:`Settings.check` for rules that tie fields together. A problem raises
:class:`InvalidSetting` with the option's key *relative to the dataclass* (``step_size``,
``presample.num_draws``). Whoever knows where the options came from adds the prefix once:
:func:`configure` (``method``, ``model``, ``data``, or ``method.presample`` for a nested block), so a
class can be reused under any key without rewriting its messages, and the classes themselves take
checked Python values (``self.settings``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from bayesx.errors import BayesxError


class InvalidSetting(BayesxError):
    """One option's value is wrong: ``key`` relative to the settings it belongs to, ``problem``
    a phrase that completes "<key> ..." (e.g. "must be > 0, got -1; set it to 0.1"; one starting
    with "=" is joined without a space: "latent_dim=100 exceeds ...")."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}{'' if problem.startswith('=') else ' '}{problem}")
        self.key, self.problem = key, problem

    def under(self, prefix: str) -> InvalidSetting:
        return InvalidSetting(".".join(k for k in (prefix, self.key) if k), self.problem)

    def as_error(self, where: str) -> BayesxError:
        """The one-line error, the key named with its full path from the config root."""
        return BayesxError(str(self.under(where)))


# --- bounds (Annotated metadata) -------------------------------------------------------------------
@dataclass(frozen=True)
class AtLeast:
    low: float

    def problem(self, value) -> str | None:
        return None if value >= self.low else f">= {self.low:g}"


@dataclass(frozen=True)
class Positive:
    def problem(self, value) -> str | None:
        return None if value > 0 else "> 0"


@dataclass(frozen=True)
class Between:
    """low < value < high (open), low <= value <= high with closed=True, low <= value < high with
    closed_low=True."""

    low: float
    high: float
    closed: bool = False
    closed_low: bool = False

    def problem(self, value) -> str | None:
        above = self.low <= value if (self.closed or self.closed_low) else self.low < value
        below = value <= self.high if self.closed else value < self.high
        if above and below:
            return None
        low, high = _shown(self.low), _shown(self.high)
        if self.closed:
            return f"between {low} and {high}"
        return f"in [{low}, {high})" if self.closed_low else f"in ({low}, {high})"


def _shown(bound: float) -> str:
    """A bound as a message shows it: an integer in full (a seed's 9223372036854775807, not 9.22337e+18)."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


@dataclass(frozen=True)
class Described:
    """What the value must be, in words, for a type the generic wording says badly ("two digits 0-9")."""

    text: str

    def problem(self, value) -> str | None:
        return None


# --- the settings base ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Base of every options dataclass: fields are checked when it is built."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self), include_extras=True)
        for field in dataclasses.fields(self):
            value = _checked(field.name, getattr(self, field.name), hints[field.name], field)
            object.__setattr__(self, field.name, value)
        self.check()

    def check(self) -> None:
        """Rules that tie fields together; raise InvalidSetting(key, problem)."""

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def options(self) -> dict[str, Any]:
        """The fields as a plain dict (nested settings as dicts), e.g. for logging."""
        return dataclasses.asdict(self)


def configure(schema: type[Settings], options: Mapping | Settings | None, where: str) -> Settings:
    """``schema(**options)``, with an unknown or wrong option reported as one line that names its
    key under ``where`` once (``method.step_size must be > 0, got -1; ...``)."""
    if isinstance(options, schema):
        return options
    if isinstance(options, Settings):  # another schema's checked values, e.g. shared MCMC fields
        options = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    try:
        return _build(schema, dict(options or {}))
    except InvalidSetting as exc:
        raise exc.as_error(where) from None


def _build(schema: type[Settings], options: dict):
    known = [f.name for f in dataclasses.fields(schema) if f.init]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidSetting("", f"does not take the option '{unknown[0]}'; its options are {', '.join(sorted(known))}")
    return schema(**options)


def _checked(key: str, value, hint, field: dataclasses.Field):
    """``value`` converted to the field's type, or InvalidSetting naming ``key``."""
    base, bounds = hint, ()
    if get_origin(hint) is Annotated:
        base, *bounds = get_args(hint)
    try:
        value = _convert(value, base)
    except _Mismatch as exc:
        words = next((b.text for b in bounds if isinstance(b, Described)), exc.wanted + _bounds_text(bounds))
        raise InvalidSetting(key, f"must be {words}, got {value!r}{_hint(field)}") from None
    except InvalidSetting as exc:  # from a nested Settings
        raise exc.under(key) from None
    for number in (value if isinstance(value, tuple) else (value,)):  # bounds hold for each number of a list
        if not _is_number(number):
            continue
        for bound in bounds:
            wanted = bound.problem(number)
            if wanted is not None:
                kind = "an integer" if isinstance(number, int) else "a number"
                raise InvalidSetting(key, f"must be {kind} {wanted}, got {value!r}{_hint(field)}")
    return value


class _Mismatch(Exception):
    def __init__(self, wanted: str):
        self.wanted = wanted


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _convert(value, hint):
    """The value as the type ``hint`` asks for; _Mismatch(description) if it is not one."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if value is None and len(members) < len(args):
            return None
        wanted = []
        for member in members:
            try:
                return _convert(value, member)
            except _Mismatch as exc:
                wanted.append(exc.wanted)
        wanted += ["null"] if len(members) < len(args) else []
        raise _Mismatch(" or ".join(wanted))
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        raise _Mismatch("one of " + ", ".join(str(a) for a in args))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch("true or false")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch("an integer")
    if hint is float:
        if _is_number(value) and math.isfinite(value):
            return float(value)
        raise _Mismatch("a finite number")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _Mismatch("text")
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise _Mismatch("a list")
        item = args[0] if args else Any
        return tuple(_convert(v, item) for v in value)
    if origin is dict or hint is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise _Mismatch("a mapping of options")
    if hint is Path:
        if isinstance(value, (str, os.PathLike)):
            return Path(value)
        raise _Mismatch("a path")
    if isinstance(hint, type) and issubclass(hint, Settings):
        if isinstance(value, hint):
            return value
        if isinstance(value, Mapping):
            return _build(hint, dict(value))
        raise _Mismatch("a block of options")
    raise TypeError(f"bayesx.settings cannot check the type {hint!r}")


def _bounds_text(bounds) -> str:
    texts = [b.problem(-math.inf) for b in bounds]  # -inf fails every lower bound: its description
    return "".join(f" {t}" for t in texts if t)


def _hint(field: dataclasses.Field) -> str:
    default = field.default
    if default is dataclasses.MISSING or default is None or isinstance(default, Settings):
        return ""
    shown = str(default).lower() if isinstance(default, bool) else list(default) if isinstance(default, tuple) \
        else default
    return f"; the default is {shown}"


def takes(schema: type[Settings], group: str):
    """Declare a function's options (a data loader's): the decorated ``fn(settings=None, **options)``
    checks them against ``schema`` (errors name ``<group>.<key>``) and calls ``fn`` with the checked
    values as keywords; ``fn.Settings`` is the schema the runner reads."""

    def wrap(fn):
        names = list(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def checked(*args, settings: Settings | None = None, **options):
            options.update(zip(names, args))  # positional arguments in fn's order
            cfg = configure(schema, settings if settings is not None else options, group)
            return fn(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})

        checked.Settings = schema
        return checked

    return wrap


# --- where the configs live ------------------------------------------------------------------------
def conf_dir() -> Path:
    """The project's ``conf/`` folder (next to the package in a source checkout)."""
    here = Path(__file__).resolve().parent  # the bayesx package
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise BayesxError(f"cannot find the bayesx config folder next to {here}; install bayesx from its source checkout (pip install -e .)")


def group_choices(group: str) -> list[str]:
    folder = conf_dir() / group
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
