"""Options shared by the data loaders (bayesx.settings dataclasses of the ``data`` config group)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from bayesx.settings import AtLeast, Between, Described, InvalidSetting, Settings


@dataclass(frozen=True)
class SplitSettings(Settings):
    """A seeded train/test split; test_fraction=0 fits on every row (no test metrics then)."""

    test_fraction: Annotated[float, Between(0.0, 1.0, closed_low=True)] = 0.2
    seed: Annotated[int, AtLeast(0)] = 0


def check_class_pair(classes: tuple[int, ...], low: int, high: int, what: str) -> None:
    """Two distinct labels in [low, high]: InvalidSetting("classes", ...) otherwise."""
    fix = f"set it to two distinct {what} {low}-{high}, e.g. [{low},{low + 1}]"
    if len(classes) != 2 or not all(low <= c <= high for c in classes):
        raise InvalidSetting("classes", f"must be two {what} {low}-{high}, got {list(classes)!r}; {fix}")
    if classes[0] == classes[1]:
        raise InvalidSetting("classes", f"names the same label twice ({classes[0]}); {fix}")


@dataclass(frozen=True)
class DigitPairSettings(SplitSettings):
    """Two digits of a ten-class set, the first labelled 0 and the second 1."""

    classes: Annotated[tuple[int, ...], Described("two distinct digits 0-9")] = (0, 1)

    def check(self):
        check_class_pair(self.classes, 0, 9, "digits")
