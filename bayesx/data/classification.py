"""The container every classification loader returns, and a seeded train/test split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bayesx.errors import BayesxError


@dataclass(frozen=True)
class ClassificationData:
    """A binary classification data set split into training and test parts.

    Arrays are converted on construction: features to float64 of shape (n, p), labels to float64
    of shape (n,) holding only 0.0 and 1.0. Invalid content raises :class:`BayesxError`.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    description: str
    source: str

    def __post_init__(self) -> None:
        for field in ("x_train", "x_test"):
            object.__setattr__(self, field, self._as_matrix(field))
        for field in ("y_train", "y_test"):
            object.__setattr__(self, field, self._as_labels(field))
        self._check_shapes()
        for field in ("x_train", "y_train", "x_test", "y_test"):
            if not np.all(np.isfinite(getattr(self, field))):
                raise BayesxError(
                    f"data '{self.name}' contains NaN or infinite values in {field}; "
                    "clean the file or drop those rows"
                )
        for field in ("y_train", "y_test"):
            self._check_binary(field)
        if np.unique(self.y_train).size < 2:
            raise BayesxError(
                f"data '{self.name}' has only the label {self.y_train[0]:g} in its training split; "
                "a classifier needs both 0 and 1, so check the target column"
            )

    @property
    def n_train(self) -> int:
        """Number of training rows."""
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test rows."""
        return int(self.x_test.shape[0])

    @property
    def n_features(self) -> int:
        """Number of feature columns."""
        return int(self.x_train.shape[1])

    def _as_matrix(self, field: str) -> np.ndarray:
        try:
            array = np.asarray(getattr(self, field), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise BayesxError(
                f"data '{self.name}' has non-numeric {field} ({exc}); encode every feature as a number"
            ) from None
        if array.ndim != 2:
            raise BayesxError(
                f"data '{self.name}': {field} must be a 2-D array (rows x features), got shape {array.shape}; "
                "reshape the features to (n, p)"
            )
        return array

    def _as_labels(self, field: str) -> np.ndarray:
        try:
            array = np.asarray(getattr(self, field), dtype=np.float64)
        except (TypeError, ValueError):
            values = _distinct_text(np.asarray(getattr(self, field), dtype=object))
            raise BayesxError(
                f"data '{self.name}' has labels other than 0/1 in {field} (found {values}); "
                "map the two classes to 0 and 1"
            ) from None
        if array.ndim != 1:
            raise BayesxError(
                f"data '{self.name}': {field} must be a 1-D array of labels, got shape {array.shape}; "
                "pass one label per row"
            )
        return array

    def _check_shapes(self) -> None:
        for x_field, y_field in (("x_train", "y_train"), ("x_test", "y_test")):
            n_x, n_y = getattr(self, x_field).shape[0], getattr(self, y_field).shape[0]
            if n_x != n_y:
                raise BayesxError(
                    f"data '{self.name}': {x_field} has {n_x} rows but {y_field} has {n_y} labels; "
                    "give one label per row"
                )
        if self.x_train.shape[0] == 0:
            raise BayesxError(f"data '{self.name}' has no training rows; provide more data or a smaller test_fraction")
        if self.x_test.shape[1] != self.x_train.shape[1]:
            raise BayesxError(
                f"data '{self.name}': x_train has {self.x_train.shape[1]} features but x_test has "
                f"{self.x_test.shape[1]}; use the same columns for both"
            )

    def _check_binary(self, field: str) -> None:
        labels = getattr(self, field)
        bad = ~np.isin(labels, (0.0, 1.0))
        if np.any(bad):
            values = _distinct_text(labels)
            raise BayesxError(
                f"data '{self.name}' has labels other than 0/1 in {field} (found {values}); "
                "map the two classes to 0 and 1"
            )


def _distinct_text(values: np.ndarray, limit: int = 10) -> str:
    """Comma-separated distinct values (at most ``limit``), for error messages."""
    distinct = sorted({str(v) for v in values.ravel().tolist()})
    text = ", ".join(distinct[:limit])
    if len(distinct) > limit:
        text += f", ... ({len(distinct)} distinct)"
    return text


def seeded_split(
    x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split rows into (x_train, y_train, x_test, y_test), stratified by label and seeded.

    Each label value contributes ``round(test_fraction * count)`` rows to the test part; both parts
    are then shuffled. The same inputs and seed always give the same split. ``test_fraction=0``
    puts every row in the training part (the test part is empty).
    """
    if not 0.0 <= test_fraction < 1.0:
        raise BayesxError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    fraction = test_fraction
    rng = np.random.default_rng(seed)
    x, y = np.asarray(x), np.asarray(y)
    if x.shape[0] != y.shape[0]:
        raise BayesxError(f"cannot split {x.shape[0]} feature rows with {y.shape[0]} labels; give one label per row")
    train_parts, test_parts = [], []
    for value in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == value))
        n_test = int(round(fraction * len(rows)))
        test_parts.append(rows[:n_test])
        train_parts.append(rows[n_test:])
    train_rows = rng.permutation(np.concatenate(train_parts)) if train_parts else np.zeros(0, dtype=int)
    test_rows = rng.permutation(np.concatenate(test_parts)) if test_parts else np.zeros(0, dtype=int)
    if len(train_rows) == 0 or (len(test_rows) == 0 and fraction > 0):
        raise BayesxError(
            f"cannot split {len(y)} rows with test_fraction={fraction}: one part would be empty; "
            "use more rows or a test_fraction nearer 0.5"
        )
    return x[train_rows], y[train_rows], x[test_rows], y[test_rows]
