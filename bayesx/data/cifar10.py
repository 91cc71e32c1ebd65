"""CIFAR-10 in its python format, and a writer that generates files in that exact format.

``bayesx data fetch cifar10`` unpacks ``cifar-10-python.tar.gz`` into the data cache, giving
``<data cache>/cifar10/cifar-10-batches-py/`` with ``data_batch_1`` ... ``data_batch_5`` (training,
10,000 images each) and ``test_batch`` (10,000 images). Each batch is a pickled dict with
``b"data"``: uint8 array (N, 3072), one image per row, the 1024 red values first, then green, then
blue, each plane a 32 x 32 image stored row by row; and ``b"labels"``: N integers 0-9.
``batches.meta`` holds the class names.

Batches are read with a restricted unpickler that only rebuilds NumPy arrays, so a file that is
not a CIFAR-10 batch cannot run code.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

from bayesx.data import registry
from bayesx.errors import BayesxError

FOLDER_NAME = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
IMAGE_SHAPE = (3, 32, 32)
ROW_LENGTH = 3 * 32 * 32
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

_FETCH_HINT = "run `bayesx data fetch cifar10 --force` to download it again"

#: The only globals a CIFAR-10 batch pickle may refer to (NumPy array reconstruction).
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global except those needed to rebuild NumPy arrays."""

    def find_class(self, module: str, name: str):  # noqa: D102 - pickle API
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refers to {module}.{name}, which a CIFAR-10 batch never does")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):  # NumPy 2 moved numpy.core
            module = "numpy._core." + module.removeprefix("numpy.core.")
        return super().find_class(module, name)


def default_folder() -> Path:
    """Where ``bayesx data fetch cifar10`` puts the batches: ``<data cache>/cifar10/cifar-10-batches-py``."""
    return registry.get_dataset("cifar10").cache_dir / FOLDER_NAME


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> (images uint8 (N, 3, 32, 32), labels int64 (N,))."""
    if not path.is_file():
        raise BayesxError(f"CIFAR-10 batch file '{path}' is missing; {_FETCH_HINT}")
    try:
        with path.open("rb") as handle:
            batch = _BatchUnpickler(handle, encoding="bytes").load()
    except Exception as exc:  # pickle raises many kinds of errors on damaged input
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise BayesxError(
            f"CIFAR-10 batch file '{path}' is not a valid pickle ({reason}); {_FETCH_HINT}"
        ) from None
    if not isinstance(batch, dict):
        raise BayesxError(
            f"CIFAR-10 batch file '{path}' holds a {type(batch).__name__}, not a dict with data and labels; "
            f"{_FETCH_HINT}"
        )
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        keys = ", ".join(sorted(repr(k) for k in batch)) or "none"
        raise BayesxError(
            f"CIFAR-10 batch file '{path}' lacks b'data' or b'labels' (keys: {keys}); {_FETCH_HINT}"
        )
    data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != ROW_LENGTH or data.dtype != np.uint8:
        raise BayesxError(
            f"CIFAR-10 batch file '{path}' has data of shape {data.shape} and dtype {data.dtype}, expected "
            f"uint8 of shape (N, {ROW_LENGTH}) (3 x 32 x 32 per row); {_FETCH_HINT}"
        )
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError):
        labels = np.zeros(0, dtype=np.int64) - 1  # reported below as a bad shape
    if labels.shape != (data.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise BayesxError(
            f"CIFAR-10 batch file '{path}' has {data.shape[0]} images but labels of shape {labels.shape} "
            f"(expected one label 0-9 per image); {_FETCH_HINT}"
        )
    return data.reshape(-1, *IMAGE_SHAPE), labels


def load_cifar10(folder: str | Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """CIFAR-10 as (train images, train labels, test images, test labels, one-line description).

    Images are uint8 of shape (N, 3, 32, 32) with channels R, G, B; labels int64 0-9. ``folder`` is
    the ``cifar-10-batches-py`` folder (default: the data cache's, see :func:`default_folder`).
    """
    folder = default_folder() if folder is None else Path(folder).expanduser()
    if not folder.is_dir():
        raise BayesxError(
            f"CIFAR-10 folder '{folder}' not found; run `bayesx data fetch cifar10` "
            "(or put the cifar-10-batches-py files there)"
        )
    train = [_read_batch(folder / name) for name in TRAIN_BATCHES]
    x_test, y_test = _read_batch(folder / TEST_BATCH)
    x_train = np.concatenate([images for images, _ in train])
    y_train = np.concatenate([labels for _, labels in train])
    description = f"CIFAR-10 python batches in {folder}: {len(x_train):,} train + {len(x_test):,} test images"
    return x_train, y_train, x_test, y_test, description


def _write_pickle(path: Path, obj: object) -> None:
    """Pickle with protocol 2, as the original (Python 2) CIFAR-10 files."""
    buffer = io.BytesIO()
    pickle.dump(obj, buffer, protocol=2)
    path.write_bytes(buffer.getvalue())


def write_cifar10_batches(
    folder: str | Path, images: np.ndarray, labels: np.ndarray, n_train_batches: int = 5
) -> Path:
    """Write ``images`` (uint8, (N, 3, 32, 32), channels R, G, B) and ``labels`` in the CIFAR-10 format.

    The images are cut, in order, into ``n_train_batches`` training batches ``data_batch_1...`` and
    one ``test_batch`` of equal size where possible: with N images, the test batch gets the last
    ``N // (n_train_batches + 1)`` images (at least one), the training batches share the rest.
    ``batches.meta`` is written too. Returns ``folder`` (created if needed); pass it to
    :func:`load_cifar10`, or use ``<data cache>/cifar10/cifar-10-batches-py`` to make it the default.
    With fewer than 5 training batches the missing ``data_batch_*`` files are simply not written.
    """
    folder = Path(folder)
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        raise BayesxError(
            f"CIFAR-10 images must be uint8 of shape (N, 3, 32, 32), got {images.dtype} {images.shape}; "
            "convert them first"
        )
    if labels.shape != (images.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise BayesxError(f"CIFAR-10 labels must be N = {images.shape[0]} integers 0-9, got shape {labels.shape}")
    if not 1 <= n_train_batches <= len(TRAIN_BATCHES):
        raise BayesxError(f"n_train_batches must be 1-5, got {n_train_batches}")
    n = images.shape[0]
    n_test = max(1, n // (n_train_batches + 1))
    if n - n_test < n_train_batches:
        raise BayesxError(f"need at least {n_train_batches + 1} images for {n_train_batches} training batches, got {n}")
    folder.mkdir(parents=True, exist_ok=True)
    rows = images.reshape(n, ROW_LENGTH)
    bounds = np.linspace(0, n - n_test, n_train_batches + 1).round().astype(int)
    parts = [(TRAIN_BATCHES[i], slice(bounds[i], bounds[i + 1])) for i in range(n_train_batches)]
    parts.append((TEST_BATCH, slice(n - n_test, n)))
    for index, (name, rows_slice) in enumerate(parts):
        count = rows_slice.stop - rows_slice.start
        label = "testing batch 1 of 1" if name == TEST_BATCH else f"training batch {index + 1} of {n_train_batches}"
        batch = {
            b"batch_label": label.encode(),
            b"labels": [int(v) for v in labels[rows_slice]],
            b"data": np.ascontiguousarray(rows[rows_slice]),
            b"filenames": [f"generated_{rows_slice.start + i:05d}.png".encode() for i in range(count)],
        }
        _write_pickle(folder / name, batch)
    meta = {
        b"num_cases_per_batch": int(bounds[1] - bounds[0]),
        b"label_names": [name.encode() for name in CLASS_NAMES],
        b"num_vis": ROW_LENGTH,
    }
    _write_pickle(folder / "batches.meta", meta)
    return folder
