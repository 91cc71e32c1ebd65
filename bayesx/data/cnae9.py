"""Two classes of the UCI CNAE-9 data set (Brazilian business descriptions as word counts).

The file ``CNAE-9.data`` is fetched into the data cache with ``bayesx data fetch cnae9``. It is
comma-separated text without a header, 1,080 rows: the first column is the class label 1-9, the
other 856 columns are integer word frequencies.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np

from bayesx.data import registry
from bayesx.data.classification import ClassificationData, seeded_split
from bayesx.data.options import SplitSettings, check_class_pair
from bayesx.errors import BayesxError
from bayesx.settings import Described, takes

FILENAME = "CNAE-9.data"
N_FEATURES = 856
LABELS = range(1, 10)


@dataclass(frozen=True)
class CNAE9Settings(SplitSettings):
    classes: Annotated[tuple[int, ...], Described("two distinct CNAE-9 labels 1-9")] = (1, 2)
    scale: bool = True  # counts / the largest training count

    def check(self):
        check_class_pair(self.classes, LABELS[0], LABELS[-1], "CNAE-9 labels")


def _data_file() -> Path:
    """The path of ``CNAE-9.data`` in the data cache (or a system folder); missing -> BayesxError."""
    info = registry.get_dataset("cnae9")
    found = info.present_dir()
    if found is None:
        raise BayesxError(
            f"CNAE-9 data not found at {info.cache_dir / FILENAME}; run `bayesx data fetch cnae9` "
            "(needs a network), or set BAYESX_DATA_DIR to a folder holding cnae9/CNAE-9.data"
        )
    return found / FILENAME


def _read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(labels int64 (n,), word counts float64 (n, 856)) from ``path``; bad content -> BayesxError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns on an empty file; reported below
            table = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except (ValueError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BayesxError(
            f"could not read '{path}' as CNAE-9 data ({reason}); fetch it again with `bayesx data fetch cnae9 --force`"
        ) from None
    if table.size == 0:
        raise BayesxError(f"CNAE-9 file '{path}' is empty; fetch it again with `bayesx data fetch cnae9 --force`")
    if table.shape[1] != 1 + N_FEATURES:
        raise BayesxError(
            f"CNAE-9 file '{path}' has {table.shape[1]} columns, expected {1 + N_FEATURES} (label + {N_FEATURES} "
            "word counts); fetch it again with `bayesx data fetch cnae9 --force`"
        )
    if not np.all(np.isfinite(table)):
        raise BayesxError(f"CNAE-9 file '{path}' contains NaN or infinite values; fetch it again")
    labels = table[:, 0]
    bad = labels[(labels != np.round(labels)) | (labels < 1) | (labels > 9)]
    if bad.size:
        shown = ", ".join(f"{v:g}" for v in np.unique(bad)[:10])
        raise BayesxError(
            f"CNAE-9 file '{path}' has class labels outside 1-9 in its first column (found {shown}); fetch it again"
        )
    return labels.astype(np.int64), table[:, 1:]


@takes(CNAE9Settings, "data")
def load_cnae9(classes: tuple[int, int], test_fraction: float, seed: int, scale: bool) -> ClassificationData:
    """Return CNAE-9 class ``classes[0]`` (label 0) against ``classes[1]`` (label 1), 856 features.

    All 856 word-count columns are kept, constant ones included (the Deep MCMC paper's D = 856,
    with "the first two classes", i.e. the default ``(1, 2)``). With ``scale`` every count is
    divided by the largest count in the training split, so features lie in [0, 1] (test values may
    exceed 1) and zeros stay zeros; without it the raw counts are used. The split is stratified and
    seeded with ``seed``.
    """
    first, second = classes
    path = _data_file()
    labels, counts = _read(path)
    for label in (first, second):
        if not np.any(labels == label):
            raise BayesxError(
                f"CNAE-9 file '{path}' has no rows of class {label}; choose other data.classes or fetch the file again"
            )
    keep = np.isin(labels, (first, second))
    x = counts[keep]
    y = (labels[keep] == second).astype(np.float64)
    x_train, y_train, x_test, y_test = seeded_split(x, y, test_fraction, seed)
    scaling = "raw word counts"
    if scale:
        largest = float(x_train.max())
        if largest > 0:
            x_train, x_test = x_train / largest, x_test / largest
        scaling = f"word counts / {largest:g} (training max)"
    description = (
        f"UCI CNAE-9 class {first} vs {second} ({N_FEATURES} features, {scaling}, "
        f"n_train={len(y_train)}, n_test={len(y_test)})"
    )
    return ClassificationData(
        name="cnae9",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        description=description,
        source=f"UCI CNAE-9:{path}",
    )
