"""Binary classification data from a CSV file chosen by the user.

The file needs a header row, a 0/1 label column (``target``) and numeric feature columns. Every
problem with the file is reported as a one-line :class:`BayesxError` naming the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bayesx.data.classification import ClassificationData, seeded_split
from bayesx.data.options import SplitSettings
from bayesx.errors import BayesxError
from bayesx.settings import takes

MAX_NAMES_SHOWN = 10


def _names(items: list, limit: int = MAX_NAMES_SHOWN) -> str:
    """Comma-separated names, truncated after ``limit`` with a count of the rest."""
    shown = ", ".join(str(item) for item in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _resolve_path(path: object) -> Path:
    if path is None or str(path).strip() == "":
        raise BayesxError("data.path is not set; set data.path to a CSV file")
    resolved = Path(str(path)).expanduser()
    if not resolved.exists():
        raise BayesxError(f"data file '{path}' not found; set data.path to an existing CSV file")
    if not resolved.is_file():
        raise BayesxError(f"data.path '{path}' is not a file; set data.path to a CSV file")
    return resolved.resolve()


ENCODING = "utf-8-sig"  # UTF-8, without the byte-order mark a spreadsheet may write before the header's first name
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "bar"}


def _delimiter(path: Path) -> str:
    """The file's field delimiter, read from its header line: a comma wherever the header has one (as
    before), else the first of ``;``, tab or ``|`` that it holds (a spreadsheet's export in many locales
    uses ``;``), else a comma (a one-column file). A spreadsheet's byte-order mark is not part of the header."""
    try:
        with path.open(encoding=ENCODING, errors="replace") as handle:
            header = handle.readline()
    except OSError:
        return ","  # pandas names the problem
    return next((d for d in DELIMITERS if d in header), ",")


def _read_frame(path: Path, delimiter: str = ",") -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, sep=delimiter, encoding=ENCODING)
    except pd.errors.EmptyDataError:
        raise BayesxError(f"data file '{path}' is empty; give a CSV file with a header row and data rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BayesxError(
            f"could not read '{path}' as CSV ({reason}); give a comma-separated text file with a header row"
        ) from None
    if len(frame) == 0:
        raise BayesxError(f"data file '{path}' has a header but no data rows; add data rows to the file")
    return frame


def _check_target(frame: pd.DataFrame, target: object, path: Path) -> str:
    columns = [str(c) for c in frame.columns]
    if target is None or str(target).strip() == "":
        raise BayesxError(f"data.target is not set; set data.target to the label column, one of: {_names(columns)}")
    target = str(target)
    if target not in columns:
        raise BayesxError(
            f"target column '{target}' not found in '{path.name}'; set data.target to one of: {_names(columns)}"
        )
    if len(columns) < 2:
        raise BayesxError(f"'{path.name}' has only the target column '{target}'; add feature columns to the file")
    return target


def _check_values(frame: pd.DataFrame, target: str, path: Path) -> None:
    features = frame.drop(columns=[target])
    text_columns = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    if text_columns:
        decimal_commas = any(features[c].astype(str).str.fullmatch(r"-?\d*,\d+").any() for c in text_columns)
        fix = ("write decimal points instead of decimal commas (e.g. 0.5, not 0,5)" if decimal_commas
               else "encode them as numbers or drop them from the file")
        raise BayesxError(f"non-numeric feature columns in '{path.name}': {_names(text_columns)}; {fix}")
    bad = [c for c in frame.columns if frame[c].isna().any()]
    bad += [
        c for c in frame.columns
        if c not in bad and pd.api.types.is_numeric_dtype(frame[c]) and np.isinf(frame[c].to_numpy(np.float64)).any()
    ]
    if bad:
        raise BayesxError(
            f"NaN, empty or infinite values in '{path.name}', columns: {_names(bad)}; clean the file or drop those rows"
        )
    labels = frame[target]
    distinct = pd.unique(labels)
    if not pd.api.types.is_numeric_dtype(labels) or not set(distinct.astype(float).tolist()) <= {0.0, 1.0}:
        found = _names(sorted(str(v) for v in distinct))
        raise BayesxError(
            f"target column '{target}' must hold labels 0/1, found values: {found}; map the two classes to 0 and 1"
        )


def _standardize(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre and scale both parts with the training mean and std (constant columns keep std 1)."""
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std = np.where(std > 1e-12, std, 1.0)
    return (x_train - mean) / std, (x_test - mean) / std


@dataclass(frozen=True)
class CSVSettings(SplitSettings):
    path: Path | None = None  # the CSV file
    target: str | None = None  # the 0/1 label column
    standardize: bool = True  # features scaled by the training part's mean and sd


@takes(CSVSettings, "data")
def load_csv(path: Path | None, target: str | None, test_fraction: float, seed: int,
             standardize: bool) -> ClassificationData:
    """Read ``path``, use column ``target`` (0/1) as labels and all other columns as features.

    Rows are split with a stratified, seeded split; with ``standardize`` the features are scaled
    with the training part's mean and standard deviation.
    """
    resolved = _resolve_path(path)
    delimiter = _delimiter(resolved)
    frame = _read_frame(resolved, delimiter)
    frame.columns = [str(c) for c in frame.columns]
    target = _check_target(frame, target, resolved)
    _check_values(frame, target, resolved)
    x = frame.drop(columns=[target]).to_numpy(dtype=np.float64)
    y = frame[target].to_numpy(dtype=np.float64)
    x_train, y_train, x_test, y_test = seeded_split(x, y, test_fraction, seed)
    if standardize:
        x_train, x_test = _standardize(x_train, x_test)
    scaling = ", standardized with training mean/std" if standardize else ""
    separated = f", {DELIMITERS[delimiter]}-separated" if delimiter != "," else ""
    description = (
        f"CSV file '{resolved.name}' (target '{target}'{separated}, {x.shape[1]} features{scaling}, "
        f"n_train={len(y_train)}, n_test={len(y_test)})"
    )
    return ClassificationData(
        name="csv",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        description=description,
        source=f"file:{resolved}",
    )
