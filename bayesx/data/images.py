"""Image data for the VAEs: MNIST, Fashion-MNIST and CIFAR-10 as float32 arrays (N, C, H, W) in [0, 1].

Sources (``data.source``):

* ``mnist``: ``auto`` = full MNIST (60,000 + 10,000) if ``bayesx data fetch mnist`` put it in the
  data cache, else the 10,000 digits vendored in bayesx, split by ``test_fraction`` (seeded,
  stratified by digit); ``vendored`` or ``full`` force one of the two.
* ``fashion_mnist``: the four IDX files from the Debian package ``dataset-fashion-mnist``
  (``/usr/share/datasets/fashion-mnist``) or from the data cache (``bayesx data fetch fashion_mnist``).
* ``cifar10``: the python batches in the data cache (``bayesx data fetch cifar10``).

Full MNIST, Fashion-MNIST and CIFAR-10 keep their official train/test split.

Binarization (``data.binarize``): ``stochastic`` leaves the training images grey (the trainer
draws pixel ~ Bernoulli(grey level) again every epoch with :func:`binarize_images`) and binarizes
the test images once, seeded; ``fixed`` binarizes both once; ``none`` keeps grey levels.

Subsets: ``classes=[a, b]`` keeps two classes (labels stay the original ones); with
``imbalance=r`` the training set holds class ``a`` (major) and ``b`` (minor) in the ratio r : 1 and
the test set is balanced, ``n_test`` images per class. Otherwise ``n_train``/``n_test`` draw seeded
random subsets of that many images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.data import registry
from bayesx.data.classification import seeded_split
from bayesx.data.idx import load_idx_dataset
from bayesx.data.options import SplitSettings, check_class_pair
from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, Described, InvalidSetting, takes

SOURCES = {"mnist": ("auto", "vendored", "full"), "fashion_mnist": ("auto", "full"), "cifar10": ("auto", "full")}
#: Test images per class of the balanced test set with ``imbalance`` (Chen (2019) ch. 4: 500 + 500).
DEFAULT_TEST_PER_CLASS = 500

# Independent seeded streams, so that e.g. the binarize option never changes which images are drawn.
_STREAM_SUBSET, _STREAM_TEST_BITS, _STREAM_TRAIN_BITS = 0, 1, 2


@dataclass
class ImageData:
    """Images as float32 (N, C, H, W) in [0, 1] with int64 labels, and where they came from.

    ``x_train`` holds grey levels unless ``binarize == "fixed"``; ``x_test`` is binarized once
    (seeded) unless ``binarize == "none"``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str
    source: str
    binarize: str
    extra_tags: dict[str, str] = field(default_factory=dict)  # classes/imbalance details for describe()
    minor_class: int | None = None  # with data.imbalance: the minor class of data.classes (Chen (2019) sec. 4)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.ndim != 4 or x.dtype != np.float32 or y.shape != (x.shape[0],):
                raise BayesxError(
                    f"image data '{self.name}': x_{split} must be float32 (N, C, H, W) with one label each, "
                    f"got {x.dtype} {x.shape} and labels {y.shape}; check the loader"
                )
        if self.x_test.shape[1:] != self.x_train.shape[1:]:
            raise BayesxError(
                f"image data '{self.name}': train images {self.x_train.shape[1:]} and test images "
                f"{self.x_test.shape[1:]} differ in shape; use files of one data set"
            )

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(channels, height, width)."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)

    def describe(self) -> dict[str, str]:
        """Tags for the run: name, source, sizes, image shape, binarization, class counts if subset."""
        tags = {
            "name": self.name,
            "source": self.source,
            "n_train": str(self.n_train),
            "n_test": str(self.n_test),
            "image_shape": "x".join(str(s) for s in self.image_shape),
            "binarize": self.binarize,
        }
        tags.update(self.extra_tags)
        return tags


def binarize_images(x, gen=None):
    """Pixel ~ Bernoulli(x): a 0/1 array or tensor of the same type, dtype, shape (and device).

    ``x`` holds probabilities in [0, 1]. For a NumPy array ``gen`` is a ``numpy.random.Generator``
    (or a seed); for a tensor a ``torch.Generator`` on the tensor's device (or None for torch's
    global generator).
    """
    if isinstance(x, torch.Tensor):
        if gen is not None and not isinstance(gen, torch.Generator):
            raise TypeError(f"binarize_images: a tensor needs a torch.Generator, got {type(gen).__name__}")
        return torch.bernoulli(x, generator=gen)
    if isinstance(gen, torch.Generator):
        raise TypeError("binarize_images: a NumPy array needs a numpy.random.Generator, got a torch.Generator")
    x = np.asarray(x)
    rng = gen if isinstance(gen, np.random.Generator) else np.random.default_rng(gen)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float32
    return (rng.random(x.shape, dtype=np.float64) < x).astype(dtype)


# ---------------------------------------------------------------------------------------- sources


def _load_mnist(source: str, test_fraction: float, seed: int):
    from bayesx.data import mnist  # the MNIST module owns the vendored file and the full/auto choice

    full_dir = mnist._full_dir(source)
    if full_dir is not None:
        x_train, y_train, x_test, y_test = load_idx_dataset(full_dir)
        origin = f"full MNIST in {full_dir} ({len(x_train):,} train + {len(x_test):,} test, official split)"
    else:
        images, labels = mnist._vendored_arrays()
        x_train, y_train, x_test, y_test = seeded_split(images, labels, test_fraction, seed)
        origin = (
            f"vendored {len(images):,}-digit MNIST subset (seeded stratified split, test_fraction={test_fraction})"
        )
    return x_train, y_train, x_test, y_test, origin


def _load_fashion_mnist():
    info = registry.get_dataset("fashion_mnist")
    found = info.present_dir()
    if found is None:
        places = ", ".join([*info.system_dirs, str(info.cache_dir)])
        raise BayesxError(
            f"Fashion-MNIST not found (looked in {places}); install the Debian package "
            "(`apt-get install dataset-fashion-mnist`) or run `bayesx data fetch fashion_mnist`"
        )
    x_train, y_train, x_test, y_test = load_idx_dataset(found)
    origin = f"Fashion-MNIST in {found} ({len(x_train):,} train + {len(x_test):,} test, official split)"
    return x_train, y_train, x_test, y_test, origin


def _load_cifar10():
    from bayesx.data.cifar10 import load_cifar10

    x_train, y_train, x_test, y_test, origin = load_cifar10()
    return x_train, y_train, x_test, y_test, origin + " (official split)"


def _as_nchw(images: np.ndarray, name: str, path_hint: str) -> np.ndarray:
    """uint8 images (N, H, W) or (N, C, H, W) -> float32 (N, C, H, W) in [0, 1]."""
    if images.ndim == 3:
        images = images[:, None]
    if images.ndim != 4:
        raise BayesxError(
            f"data.name={name}: images of shape {images.shape} from {path_hint}; expected (N, H, W) or "
            "(N, C, H, W), so check the files"
        )
    if images.dtype != np.uint8:
        raise BayesxError(
            f"data.name={name}: images of dtype {images.dtype} from {path_hint}; expected uint8 grey levels 0-255"
        )
    return images.astype(np.float32) / np.float32(255.0)


# ---------------------------------------------------------------------------------------- subsets


def _counts(labels: np.ndarray) -> str:
    values, counts = np.unique(labels, return_counts=True)
    return ",".join(f"{v}:{c}" for v, c in zip(values.tolist(), counts.tolist()))


def _pick(rng: np.random.Generator, rows: np.ndarray, n: int) -> np.ndarray:
    return rng.permutation(rows)[:n]


def _random_subset(rng, labels: np.ndarray, n: int | None, key: str, split: str) -> np.ndarray:
    """Row indices: all rows (in order) for n None, else n rows drawn without replacement."""
    if n is None:
        return np.arange(len(labels))
    if n > len(labels):
        raise BayesxError(
            f"{key}={n} is more than the {len(labels)} {split} images available; set {key} to at most {len(labels)}"
        )
    return np.sort(_pick(rng, np.arange(len(labels)), n))


def _imbalanced_train_rows(rng, labels, major: int, minor: int, ratio: float, n_train: int | None):
    """Row indices of ``n_major`` images of class ``major`` and ``n_minor`` of class ``minor``.

    With ``n_train``: n_minor = max(1, round(n_train / (ratio + 1))) and n_major = round(ratio * n_minor),
    so the ratio (and the minor share 1 / (ratio + 1)) is exact and the total is within ratio / 2 of
    n_train (5000 at 100:1 -> 5000 + 50, as in Chen (2019) ch. 4); if n_train < ratio + 1, one minor image and
    n_train - 1 major ones. Without: as many as available keeping the ratio.
    """
    major_rows, minor_rows = np.flatnonzero(labels == major), np.flatnonzero(labels == minor)
    if len(major_rows) == 0 or len(minor_rows) == 0:
        empty = major if len(major_rows) == 0 else minor
        raise BayesxError(f"data.classes: class {empty} has no training images here; choose other classes")
    if n_train is None:  # as many as available keeping the ratio
        n_minor = max(1, min(len(minor_rows), int(np.floor(len(major_rows) / ratio))))
        n_major = min(len(major_rows), int(round(ratio * n_minor)))
    else:
        if n_train < 2:
            raise BayesxError(f"data.n_train={n_train} is too small for two classes; set data.n_train >= 2")
        n_minor = max(1, int(round(n_train / (ratio + 1.0))))
        n_major = int(round(ratio * n_minor)) if n_train >= ratio + 1.0 else n_train - 1
        if n_major > len(major_rows) or n_minor > len(minor_rows):
            raise BayesxError(
                f"data.n_train={n_train} at data.imbalance={ratio:g} needs {n_major} images of class {major} and "
                f"{n_minor} of class {minor}, but only {len(major_rows)} and {len(minor_rows)} are available; "
                "lower data.n_train or leave it null"
            )
    return np.sort(np.concatenate([_pick(rng, major_rows, n_major), _pick(rng, minor_rows, n_minor)]))


def _balanced_test_rows(rng, labels, classes: tuple[int, int], n_per_class: int | None):
    """Row indices with n_per_class images of each class (default: 500 or what is available)."""
    rows = [np.flatnonzero(labels == c) for c in classes]
    available = min(len(r) for r in rows)
    if n_per_class is None:
        n_per_class = min(DEFAULT_TEST_PER_CLASS, available)
    elif n_per_class > available:
        raise BayesxError(
            f"data.n_test={n_per_class} test images per class, but only {available} of one of classes "
            f"{list(classes)} are available; set data.n_test to at most {available}"
        )
    if n_per_class == 0:
        raise BayesxError(f"data.classes={list(classes)}: no test images of one class here; choose other classes")
    return np.sort(np.concatenate([_pick(rng, r, n_per_class) for r in rows]))


# ---------------------------------------------------------------------------------------- loader


@dataclass(frozen=True)
class ImagesSettings(SplitSettings):
    name: Literal["mnist", "fashion_mnist", "cifar10"] = "mnist"
    source: Literal["auto", "vendored", "full"] = "auto"  # vendored exists only for mnist
    binarize: Literal["stochastic", "fixed", "none"] = "stochastic"
    classes: Annotated[tuple[int, ...] | None, Described("two distinct digits 0-9 [major, minor] or null")] = None
    imbalance: Annotated[float | None, AtLeast(1.0)] = None  # training ratio major:minor (needs classes)
    n_train: Annotated[int | None, AtLeast(1)] = None
    n_test: Annotated[int | None, AtLeast(1)] = None

    def check(self):
        if self.test_fraction == 0:
            raise InvalidSetting("test_fraction", "must be above 0 for the VAE images (the test ELBO needs test "
                                 "images); leave it at 0.2 or set data.n_train to train on fewer")
        if self.source not in SOURCES[self.name]:
            raise InvalidSetting("source", f"must be one of {', '.join(SOURCES[self.name])} for data.name={self.name}, "
                                 f"got {self.source!r} (vendored exists only for mnist)")
        if self.classes is not None:
            check_class_pair(self.classes, 0, 9, "digits")
        if self.imbalance is not None and self.classes is None:
            raise InvalidSetting("imbalance", "needs data.classes=[major,minor]; set both, e.g. data.classes=[0,1]")


@takes(ImagesSettings, "data")
def load_images(name: str, source: str, binarize: str, classes: tuple[int, int] | None, imbalance: float | None,
                n_train: int | None, n_test: int | None, test_fraction: float, seed: int) -> ImageData:
    """Load an image data set for the VAEs; see the module docstring for every option.

    ``n_test`` is the number of test images, except with ``imbalance``, where it is the number per
    class of the balanced test set (default 500, or all the smaller class has); with ``imbalance``
    the training ratio is exact and the total close to ``n_train`` (see
    :func:`_imbalanced_train_rows`). ``test_fraction`` only applies to the vendored MNIST subset.
    """
    pair, ratio = classes, imbalance

    if name == "mnist":
        x_train, y_train, x_test, y_test, origin = _load_mnist(source, test_fraction, seed)
    elif name == "fashion_mnist":
        x_train, y_train, x_test, y_test, origin = _load_fashion_mnist()
    else:
        x_train, y_train, x_test, y_test, origin = _load_cifar10()
    y_train, y_test = np.asarray(y_train, dtype=np.int64), np.asarray(y_test, dtype=np.int64)

    rng = np.random.default_rng([seed, _STREAM_SUBSET])
    extra: dict[str, str] = {}
    if pair is not None:
        keep_train = np.flatnonzero(np.isin(y_train, pair))
        keep_test = np.flatnonzero(np.isin(y_test, pair))
        if ratio is not None:
            train_rows = keep_train[_imbalanced_train_rows(rng, y_train[keep_train], *pair, ratio, n_train)]
            test_rows = keep_test[_balanced_test_rows(rng, y_test[keep_test], pair, n_test)]
        else:
            train_rows = keep_train[_random_subset(rng, y_train[keep_train], n_train, "data.n_train", "training")]
            test_rows = keep_test[_random_subset(rng, y_test[keep_test], n_test, "data.n_test", "test")]
    else:
        train_rows = _random_subset(rng, y_train, n_train, "data.n_train", "training")
        test_rows = _random_subset(rng, y_test, n_test, "data.n_test", "test")
    x_train, y_train = x_train[train_rows], y_train[train_rows]
    x_test, y_test = x_test[test_rows], y_test[test_rows]
    if len(y_train) == 0 or len(y_test) == 0:
        raise BayesxError(f"data.name={name}: the selection left no training or test images; check data.classes")

    if pair is not None:
        extra["classes"] = f"{pair[0]},{pair[1]}"
        extra["train_counts"] = _counts(y_train)
        extra["test_counts"] = _counts(y_test)
    if ratio is not None:
        n_major, n_minor = int(np.sum(y_train == pair[0])), int(np.sum(y_train == pair[1]))
        extra["imbalance"] = f"{ratio:g}"
        extra["imbalance_actual"] = f"{n_major / n_minor:.4g}"
        extra["minor_share"] = f"{n_minor / (n_major + n_minor):.4%}"

    x_train = _as_nchw(x_train, name, origin)
    x_test = _as_nchw(x_test, name, origin)
    if binarize != "none":
        x_test = binarize_images(x_test, np.random.default_rng([seed, _STREAM_TEST_BITS]))
    if binarize == "fixed":
        x_train = binarize_images(x_train, np.random.default_rng([seed, _STREAM_TRAIN_BITS]))

    selection = ""
    if pair is not None or n_train is not None or n_test is not None:
        selection = f"; kept {len(y_train):,} train + {len(y_test):,} test"
        if pair is not None:
            selection += f" of classes {pair[0]},{pair[1]}"
        if ratio is not None:
            selection += f" at {ratio:g}:1"
    return ImageData(
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        name=name,
        source=origin + selection,
        binarize=binarize,
        extra_tags=extra,
        minor_class=int(pair[1]) if ratio is not None else None,
    )
