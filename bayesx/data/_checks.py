"""Argument checks shared by the data loaders.

Each check returns the cleaned value or raises :class:`BayesxError` with a one-line message naming
the configuration key (``data.<argument>``) and the fix.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from bayesx.errors import BayesxError


def _is_int(value: object) -> bool:
    """True for ints (Python or NumPy), but not for bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(value: object, key: str, minimum: int = 0) -> int:
    """Return ``value`` as an int, requiring an integer that is at least ``minimum``."""
    if not _is_int(value) or int(value) < minimum:
        raise BayesxError(f"{key} must be an integer >= {minimum}, got {value!r}; set {key} to such a number")
    return int(value)


def check_seed(seed: object, key: str = "data.seed") -> int:
    """Return ``seed`` as a non-negative int."""
    return check_int(seed, key, minimum=0)


def check_float(value: object, key: str) -> float:
    """Return ``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise BayesxError(f"{key} must be a finite number, got {value!r}; set {key} to a number")
    return float(value)


def check_fraction(value: object, key: str = "data.test_fraction") -> float:
    """Return ``value`` as a float strictly between 0 and 1."""
    fraction = check_float(value, key)
    if not 0.0 < fraction < 1.0:
        raise BayesxError(f"{key} must be between 0 and 1 (exclusive), got {value!r}; use e.g. {key}=0.2")
    return fraction


def check_class_pair(classes: object, key: str = "data.classes") -> tuple[int, int]:
    """Return ``classes`` as two distinct digits 0-9 (any sequence, e.g. a Hydra ListConfig)."""
    fix = f"set {key} to two distinct digits 0-9, e.g. {key}=[0,1]"
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Iterable):
        raise BayesxError(f"{key} must be a pair of digits, got {classes!r}; {fix}")
    items = list(classes)
    if len(items) != 2 or not all(_is_int(c) and 0 <= int(c) <= 9 for c in items):
        raise BayesxError(f"{key} must be two digits 0-9, got {items!r}; {fix}")
    first, second = int(items[0]), int(items[1])
    if first == second:
        raise BayesxError(f"{key} names the same digit twice ({first}); {fix}")
    return first, second


def check_choice(value: object, key: str, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise BayesxError(f"{key} must be one of {', '.join(choices)}, got {value!r}; set {key} to one of those")
    return str(value)
