"""MNIST: two-class subsets for classification, and all images for generative models.

Two sources: the 10,000 digits vendored in the package (``embedded/mnist10k.npz``, always there),
and full MNIST (70,000 digits) once ``bayesx data fetch mnist`` has put it in the data cache.
``source="auto"`` uses full MNIST when present, else the vendored digits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from bayesx.data import registry
from bayesx.data.classification import ClassificationData, seeded_split
from bayesx.data.idx import load_idx_dataset
from bayesx.data.options import DigitPairSettings
from bayesx.errors import BayesxError
from bayesx.settings import takes

SOURCES = ("auto", "vendored", "full")
VENDORED_FILE = registry.EMBEDDED_DIR / "mnist10k.npz"


@lru_cache(maxsize=1)
def _vendored_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The vendored (images, labels), read once and made read-only."""
    if not VENDORED_FILE.is_file():
        raise BayesxError(
            f"vendored MNIST file '{VENDORED_FILE}' is missing; reinstall bayesx, or use full MNIST "
            "(`bayesx data fetch mnist` and data.source=full)"
        )
    with np.load(VENDORED_FILE) as archive:
        images, labels = archive["images"], archive["labels"].astype(np.int64)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


def _full_dir(source: str) -> Path | None:
    """The folder of full MNIST if ``source`` asks for it and it is there; None for the vendored set."""
    info = registry.get_dataset("mnist")
    found = info.present_dir()
    if source == "full" and found is None:
        raise BayesxError(
            f"full MNIST not found in {info.cache_dir}; run `bayesx data fetch mnist` or use data.source=vendored"
        )
    return found if source in ("auto", "full") else None


def _to_features(images: np.ndarray) -> np.ndarray:
    """uint8 images (n, 28, 28) -> float64 rows (n, 784) in [0, 1]."""
    return images.reshape(len(images), -1).astype(np.float64) / 255.0


def _two_classes(images: np.ndarray, labels: np.ndarray, first: int, second: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of digits ``first`` (label 0) and ``second`` (label 1) as (features, labels)."""
    keep = np.isin(labels, (first, second))
    return _to_features(images[keep]), (labels[keep] == second).astype(np.float64)


@dataclass(frozen=True)
class MNIST01Settings(DigitPairSettings):
    source: Literal["auto", "vendored", "full"] = "auto"


@takes(MNIST01Settings, "data")
def load_mnist01(classes: tuple[int, int], test_fraction: float, seed: int, source: str) -> ClassificationData:
    """MNIST digit ``classes[0]`` (label 0) against ``classes[1]`` (label 1), 784 pixels in [0, 1].

    The vendored digits are split with a stratified, seeded split of ``test_fraction``; full MNIST
    keeps its own split (training file -> train, t10k file -> test) and ignores ``test_fraction``.
    """
    first, second = classes
    fraction = test_fraction
    full_dir = _full_dir(source)
    if full_dir is not None:
        train_images, train_labels, test_images, test_labels = load_idx_dataset(full_dir)
        x_train, y_train = _two_classes(train_images, train_labels, first, second)
        x_test, y_test = _two_classes(test_images, test_labels, first, second)
        origin = f"full MNIST in {full_dir} (official train/test split"
        data_source = f"fetched:{full_dir}"
    else:
        x, y = _two_classes(*_vendored_arrays(), first, second)
        x_train, y_train, x_test, y_test = seeded_split(x, y, fraction, seed)
        origin = f"the vendored 10,000-digit subset (seeded split, test_fraction={fraction}"
        data_source = "vendored"
    description = f"MNIST {first} vs {second} from {origin}, n_train={len(y_train)}, n_test={len(y_test)})"
    return ClassificationData(
        name="mnist01",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        description=description,
        source=data_source,
    )


def load_mnist_images(source: str = "auto") -> tuple[np.ndarray, np.ndarray, str]:
    """All MNIST images as (images uint8 (N, 28, 28), labels int64 (N,), one-line description).

    The vendored source gives its 10,000 digits (grouped by digit); full MNIST gives its training
    images followed by its test images (70,000).
    """
    if source not in SOURCES:
        raise BayesxError(f"data.source must be one of {', '.join(SOURCES)}, got {source!r}")
    full_dir = _full_dir(source)
    if full_dir is not None:
        train_images, train_labels, test_images, test_labels = load_idx_dataset(full_dir)
        images = np.concatenate([train_images, test_images]).astype(np.uint8)
        labels = np.concatenate([train_labels, test_labels]).astype(np.int64)
        description = f"full MNIST from {full_dir}: {len(images)} images (train then t10k)"
    else:
        vendored_images, vendored_labels = _vendored_arrays()
        images, labels = vendored_images.copy(), vendored_labels.copy()
        description = f"MNIST, the vendored 10,000-digit subset: {len(images)} images"
    return images, labels, description
