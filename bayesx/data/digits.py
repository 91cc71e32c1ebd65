"""Two classes of scikit-learn's bundled 8x8 digits (UCI optical recognition of handwritten digits).

The data ship inside scikit-learn, so this loader works offline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesx.data.classification import ClassificationData, seeded_split
from bayesx.data.options import DigitPairSettings
from bayesx.settings import takes


@dataclass(frozen=True)
class DigitsSettings(DigitPairSettings):
    scale: bool = True  # pixel values / 16, in [0, 1]


@takes(DigitsSettings, "data")
def load_digits(classes: tuple[int, int], test_fraction: float, seed: int, scale: bool) -> ClassificationData:
    """Return digits ``classes[0]`` (label 0) against ``classes[1]`` (label 1), 64 features each.

    With ``scale`` the pixel values 0-16 are divided by 16 to lie in [0, 1]. The split is stratified
    and seeded with ``seed``.
    """
    from sklearn.datasets import load_digits as sklearn_load_digits

    first, second = classes
    bunch = sklearn_load_digits()
    keep = np.isin(bunch.target, (first, second))
    x = bunch.data[keep].astype(np.float64)
    if scale:
        x = x / 16.0
    y = (bunch.target[keep] == second).astype(np.float64)
    x_train, y_train, x_test, y_test = seeded_split(x, y, test_fraction, seed)
    scaling = "pixels scaled to [0,1]" if scale else "pixels 0-16"
    description = (
        f"UCI optical digits {first} vs {second} from scikit-learn (8x8, {scaling}, "
        f"n_train={len(y_train)}, n_test={len(y_test)})"
    )
    return ClassificationData(
        name="digits",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        description=description,
        source="sklearn",
    )
