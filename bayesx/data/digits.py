"""Two classes of scikit-learn's bundled 8x8 digits (UCI optical recognition of handwritten digits).

The data ship inside scikit-learn, so this loader works offline.
"""

from __future__ import annotations

import numpy as np

from bayesx.data._checks import check_class_pair, check_fraction, check_seed
from bayesx.data.classification import ClassificationData, seeded_split


def load_digits(
    classes: tuple[int, int] = (0, 1),
    test_fraction: float = 0.2,
    seed: int = 0,
    scale: bool = True,
) -> ClassificationData:
    """Return digits ``classes[0]`` (label 0) against ``classes[1]`` (label 1), 64 features each.

    With ``scale`` the pixel values 0-16 are divided by 16 to lie in [0, 1]. The split is stratified
    and seeded with ``seed``.
    """
    from sklearn.datasets import load_digits as sklearn_load_digits

    first, second = check_class_pair(classes)
    fraction = check_fraction(test_fraction)
    seed = check_seed(seed)
    bunch = sklearn_load_digits()
    keep = np.isin(bunch.target, (first, second))
    x = bunch.data[keep].astype(np.float64)
    if scale:
        x = x / 16.0
    y = (bunch.target[keep] == second).astype(np.float64)
    x_train, y_train, x_test, y_test = seeded_split(x, y, fraction, seed)
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
