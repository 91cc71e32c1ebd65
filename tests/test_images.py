"""Tests for the VAE image data: vendored MNIST, binarization, imbalanced two-class subsets,
CIFAR-10 python batches (generated here), and Fashion-MNIST from a fake folder (no network)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesx.data import registry
from bayesx.data.cifar10 import load_cifar10, write_cifar10_batches
from bayesx.data.idx import write_idx
from bayesx.data.images import ImageData, binarize_images, load_images
from bayesx.data.mnist import VENDORED_FILE
from bayesx.errors import BayesxError


@pytest.fixture(autouse=True)
def empty_data_cache(tmp_path, monkeypatch):
    """Point the data cache at an empty folder so no test sees (or writes) the user's cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BAYESX_DATA_DIR", str(cache))
    return cache


@pytest.fixture
def fashion_system_dir(tmp_path, monkeypatch):
    """Replace the Debian folder of Fashion-MNIST by an (empty) temporary one."""
    system = tmp_path / "usr-share-datasets-fashion-mnist"
    info = dataclasses.replace(registry.get_dataset("fashion_mnist"), system_dirs=(str(system),))
    monkeypatch.setitem(registry.DATASETS, "fashion_mnist", info)
    return system


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def images_error(**kwargs) -> str:
    with pytest.raises(BayesxError) as excinfo:
        load_images(**kwargs)
    return one_line(excinfo)


def write_fake_idx(
    directory: Path, n_per_class_train: int = 30, n_per_class_test: int = 6, classes=range(10), random: bool = True
) -> dict:
    """The four Fashion-MNIST IDX .gz files, labels cycling over ``classes``.

    Grey levels are random, or (``random=False``, for large files) a cheap repeating pattern.
    """
    rng = np.random.default_rng(1)
    classes = np.asarray(list(classes), dtype=np.uint8)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for prefix, per_class in (("train", n_per_class_train), ("t10k", n_per_class_test)):
        n = len(classes) * per_class
        if random:
            images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        else:
            images = (np.arange(n * 784) % 251).astype(np.uint8).reshape(n, 28, 28)
        labels = classes[np.arange(n) % len(classes)]
        write_idx(directory / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte.gz", labels)
        arrays[prefix] = (images, labels)
    return arrays


@pytest.fixture(scope="module")
def large_two_class_folder(tmp_path_factory) -> Path:
    """Fashion-MNIST-like files with 5,000 training and 600 test images of classes 2 and 7, written once."""
    folder = tmp_path_factory.mktemp("fashion-two-class")
    write_fake_idx(folder, n_per_class_train=5000, n_per_class_test=600, classes=(2, 7), random=False)
    return folder


def fake_cifar(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8), np.arange(n) % 10


# ------------------------------------------------------------------------------------ vendored MNIST


def vendored_labels() -> np.ndarray:
    with np.load(VENDORED_FILE) as archive:
        return archive["labels"].astype(np.int64)


def test_vendored_mnist_shapes_range_and_reproducibility():
    data = load_images("mnist", source="vendored", binarize="stochastic", seed=3)
    assert isinstance(data, ImageData) and data.name == "mnist" and data.binarize == "stochastic"
    assert data.x_train.shape == (8000, 1, 28, 28) and data.x_test.shape == (2000, 1, 28, 28)
    assert data.x_train.dtype == np.float32 and data.x_test.dtype == np.float32
    assert data.y_train.dtype == np.int64 and data.y_test.dtype == np.int64
    assert data.image_shape == (1, 28, 28)
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    grey = np.unique(data.x_train[:50])
    assert len(grey) > 100  # training images keep their grey levels
    assert set(np.unique(data.x_test).tolist()) == {0.0, 1.0}  # test images binarized once
    per_digit = np.bincount(vendored_labels())
    assert np.bincount(data.y_test).tolist() == [round(0.2 * c) for c in per_digit]  # stratified 20 %
    tags = data.describe()
    assert tags["n_train"] == "8000" and tags["n_test"] == "2000" and tags["image_shape"] == "1x28x28"
    assert "10,000-digit" in tags["source"] and "vendored" in tags["source"] and tags["binarize"] == "stochastic"
    assert all(isinstance(v, str) and "\n" not in v for v in tags.values())

    again = load_images("mnist", source="vendored", binarize="stochastic", seed=3)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(data, field), getattr(again, field))
    other = load_images("mnist", source="vendored", seed=4)
    assert not np.array_equal(data.y_train, other.y_train)
    # auto falls back to the vendored subset when full MNIST is absent
    assert load_images("mnist").source.startswith("vendored 10,000-digit MNIST subset")


def test_binarize_modes_and_fixed_test_set():
    grey = load_images(source="vendored", binarize="none", n_train=300, n_test=200)
    stochastic = load_images(source="vendored", binarize="stochastic", n_train=300, n_test=200)
    fixed = load_images(source="vendored", binarize="fixed", n_train=300, n_test=200)
    assert np.array_equal(grey.y_train, fixed.y_train)  # the binarize option never changes the subset
    assert np.array_equal(stochastic.x_train, grey.x_train)  # stochastic: train stays grey
    assert not np.array_equal(np.unique(grey.x_test), [0.0, 1.0])
    assert np.array_equal(stochastic.x_test, fixed.x_test)  # one fixed binarized test set
    assert set(np.unique(fixed.x_train).tolist()) == {0.0, 1.0}
    assert np.all(fixed.x_train[grey.x_train == 0.0] == 0.0) and np.all(fixed.x_train[grey.x_train == 1.0] == 1.0)


def test_stochastic_binarization_is_bernoulli():
    grey = load_images(source="vendored", binarize="none", n_train=20, n_test=10).x_train
    rng = np.random.default_rng(0)
    draws = np.stack([binarize_images(grey, rng) for _ in range(2000)])
    assert draws.dtype == np.float32 and set(np.unique(draws).tolist()) == {0.0, 1.0}
    mean = draws.mean(axis=0)
    # standard error of a mean of 2000 Bernoulli draws is at most 0.0112; 6 sigma
    assert np.max(np.abs(mean - grey)) < 0.067
    assert np.all(mean[grey == 0.0] == 0.0) and np.all(mean[grey == 1.0] == 1.0)
    assert not np.array_equal(draws[0], draws[1])  # re-drawn every call

    tensor = torch.as_tensor(grey)
    gen = torch.Generator().manual_seed(0)
    t_draws = torch.stack([binarize_images(tensor, gen) for _ in range(2000)])
    assert t_draws.dtype == torch.float32 and t_draws.shape == (2000, *grey.shape)
    assert (t_draws.mean(0) - tensor).abs().max().item() < 0.067
    same = binarize_images(tensor, torch.Generator().manual_seed(5))
    assert torch.equal(same, binarize_images(tensor, torch.Generator().manual_seed(5)))


@pytest.mark.parametrize(
    "ratio, counts",
    [(10, (4550, 455)), (100, (5000, 50)), (1000, (5000, 5)), (1, (2500, 2500))],
)
def test_imbalance_with_n_train(monkeypatch, large_two_class_folder, ratio, counts):
    info = dataclasses.replace(registry.get_dataset("fashion_mnist"), system_dirs=(str(large_two_class_folder),))
    monkeypatch.setitem(registry.DATASETS, "fashion_mnist", info)
    data = load_images("fashion_mnist", classes=[2, 7], imbalance=ratio, n_train=5000, binarize="none")
    n_major, n_minor = counts
    assert n_major / n_minor == ratio  # the ratio is exact; the total is within ratio / 2 of n_train
    assert np.bincount(data.y_train, minlength=10)[[2, 7]].tolist() == [n_major, n_minor]
    assert set(np.unique(data.y_train).tolist()) == {2, 7}  # labels stay the original classes
    assert np.bincount(data.y_test, minlength=10)[[2, 7]].tolist() == [500, 500]  # balanced 500 + 500
    tags = data.describe()
    assert tags["classes"] == "2,7" and tags["imbalance"] == str(ratio)
    assert tags["train_counts"] == f"2:{n_major},7:{n_minor}" and tags["test_counts"] == "2:500,7:500"
    assert tags["imbalance_actual"] == str(ratio) and tags["n_train"] == str(n_major + n_minor)


def test_imbalance_on_vendored_mnist():
    """Without n_train: as many images as the ratio allows; n_test per class of a balanced test set."""
    for ratio in (10, 100, 1000):
        data = load_images(source="vendored", classes=[0, 1], imbalance=ratio, n_test=100, seed=1)
        n_major, n_minor = (data.y_train == 0).sum(), (data.y_train == 1).sum()
        assert n_minor == max(1, 801 // ratio)  # 801 zeros in the training part (1001 - 200)
        assert n_major == min(801, ratio * n_minor)  # 800, 800, and all 801 with the one minor at 1000:1
        assert np.bincount(data.y_test).tolist() == [100, 100]
    default_test = load_images(source="vendored", classes=[0, 1], imbalance=10)
    assert np.bincount(default_test.y_test).tolist() == [200, 200]  # all there are (< 500 per class)
    a = load_images(source="vendored", classes=[3, 8], imbalance=10, n_train=110, seed=2)
    b = load_images(source="vendored", classes=[3, 8], imbalance=10, n_train=110, seed=2)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert np.bincount(a.y_train, minlength=10)[[3, 8]].tolist() == [100, 10]


def test_two_classes_without_imbalance_and_random_subsets():
    data = load_images(source="vendored", classes=[4, 9], binarize="none")
    per_digit = np.bincount(vendored_labels())[[4, 9]]
    assert set(np.unique(data.y_train).tolist()) == {4, 9} and data.n_test == sum(round(0.2 * c) for c in per_digit)
    assert data.n_train + data.n_test == per_digit.sum()  # natural proportions, nothing dropped
    sub = load_images(source="vendored", n_train=123, n_test=45, seed=7)
    assert (sub.n_train, sub.n_test) == (123, 45)
    assert sub.describe()["n_train"] == "123" and "kept 123 train + 45 test" in sub.source


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"name": "imagenet"}, ["data.name", "imagenet", "fashion_mnist"]),
        ({"source": "internet"}, ["data.source", "vendored"]),
        ({"name": "cifar10", "source": "vendored"}, ["data.source", "only for mnist"]),
        ({"binarize": "yes"}, ["data.binarize", "stochastic"]),
        ({"classes": [1, 2, 3]}, ["data.classes", "two digits"]),
        ({"classes": [0, 10]}, ["data.classes"]),
        ({"classes": [0, 1], "imbalance": 0.5}, ["data.imbalance", ">= 1"]),
        ({"imbalance": 10}, ["data.imbalance", "data.classes"]),
        ({"n_train": 9000, "source": "vendored"}, ["data.n_train=9000", "8000"]),
        ({"n_test": 0}, ["data.n_test", ">= 1"]),
        ({"classes": [0, 1], "imbalance": 10, "n_train": 5000, "source": "vendored"}, ["data.n_train=5000", "class 0"]),
        ({"classes": [0, 1], "imbalance": 10, "n_test": 300, "source": "vendored"}, ["data.n_test=300", "200"]),
        ({"test_fraction": 1.5}, ["data.test_fraction"]),
        ({"test_fraction": 0.0}, ["data.test_fraction", "test ELBO needs test images"]),
        ({"seed": -1}, ["data.seed"]),
    ],
)
def test_bad_options(kwargs, words):
    message = images_error(**kwargs)
    for word in words:
        assert word in message, (word, message)


def test_full_mnist_missing():
    message = images_error(name="mnist", source="full")
    assert "bayesx data fetch mnist" in message and "data.source=vendored" in message


# ------------------------------------------------------------------------------------------ Fashion-MNIST


def test_fashion_mnist_absent(fashion_system_dir):
    message = images_error(name="fashion_mnist")
    assert "Fashion-MNIST not found" in message and str(fashion_system_dir) in message
    assert "apt-get install dataset-fashion-mnist" in message and "bayesx data fetch fashion_mnist" in message


@pytest.mark.parametrize("where", ["system", "cache"])
def test_fashion_mnist_present(fashion_system_dir, empty_data_cache, where):
    folder = fashion_system_dir if where == "system" else empty_data_cache / "fashion_mnist"
    arrays = write_fake_idx(folder)
    data = load_images("fashion_mnist", binarize="none")
    assert data.x_train.shape == (300, 1, 28, 28) and data.x_test.shape == (60, 1, 28, 28)
    assert np.array_equal(data.x_train[:, 0], arrays["train"][0] / np.float32(255))  # official order kept
    assert np.array_equal(data.y_test, arrays["t10k"][1].astype(np.int64))
    assert str(folder) in data.source and "300 train + 60 test" in data.source


def test_fashion_mnist_bad_idx_file_named(fashion_system_dir):
    """Damaged files reach the user through load_images (the IDX reader itself: tests/test_data.py)."""
    write_fake_idx(fashion_system_dir)
    bad = fashion_system_dir / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(b"PK\x03\x04" + bytes(40))
    message = images_error(name="fashion_mnist")
    assert "bad magic number" in message and str(bad) in message


# ----------------------------------------------------------------------------------------------- CIFAR-10


def cifar_folder(cache: Path) -> Path:
    return cache / "cifar10" / "cifar-10-batches-py"


def test_cifar10_round_trip(empty_data_cache):
    images, labels = fake_cifar(60)
    images[0] = 0
    images[0, 0, 0, 0] = 255  # red, top-left pixel
    images[0, 1, 0, 1] = 200  # green, top row, second pixel
    images[0, 2, 1, 0] = 100  # blue, second row, first pixel
    folder = write_cifar10_batches(cifar_folder(empty_data_cache), images, labels)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    assert registry.get_dataset("cifar10").status() == "present"
    # the raw format: b"data" rows of 3072 = R plane, G plane, B plane, each 32 x 32 row-major
    with (folder / "data_batch_1").open("rb") as handle:
        raw = pickle.load(handle, encoding="bytes")
    assert raw[b"data"].dtype == np.uint8 and raw[b"data"].shape == (10, 3072)
    assert raw[b"data"][0, 0] == 255 and raw[b"data"][0, 1024 + 1] == 200 and raw[b"data"][0, 2048 + 32] == 100
    assert raw[b"labels"] == labels[:10].tolist()

    x_train, y_train, x_test, y_test, _ = load_cifar10()
    assert np.array_equal(np.concatenate([x_train, x_test]), images)
    assert np.array_equal(np.concatenate([y_train, y_test]), labels)

    data = load_images("cifar10", binarize="none")
    assert data.image_shape == (3, 32, 32) and (data.n_train, data.n_test) == (50, 10)
    assert np.array_equal(np.rint(data.x_train * 255).astype(np.uint8), images[:50])  # exact pixels
    assert data.x_train[0, 0, 0, 0] == 1.0 and data.x_train[0, 1, 0, 1] == np.float32(200 / 255)
    assert data.x_train[0, 2, 1, 0] == np.float32(100 / 255) and data.x_train[0, :, 0, 2].sum() == 0
    assert np.array_equal(data.y_test, labels[50:]) and data.binarize == "none"
    assert "CIFAR-10" in data.describe()["source"] and data.describe()["image_shape"] == "3x32x32"


def test_cifar10_missing_folder():
    message = images_error(name="cifar10")
    assert "cifar-10-batches-py" in message and "not found" in message and "bayesx data fetch cifar10" in message


def test_cifar10_missing_batch(empty_data_cache):
    folder = write_cifar10_batches(cifar_folder(empty_data_cache), *fake_cifar(40), n_train_batches=4)
    message = images_error(name="cifar10")
    assert str(folder / "data_batch_5") in message and "missing" in message


@pytest.mark.parametrize(
    "content, words",
    [
        (b"this is not a pickle", ["not a valid pickle"]),
        (None, ["not a valid pickle"]),  # cut in the middle
        (pickle.dumps([1, 2, 3]), ["holds a list", "not a dict"]),
        (pickle.dumps({b"data": np.zeros((4, 3000), np.uint8), b"labels": [0, 1, 2, 3]}), ["(4, 3000)", "3072"]),
        (pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1]}), ["4 images", "labels of shape"]),
        (pickle.dumps({b"images": 1}), ["lacks b'data'"]),
        (pickle.dumps({b"data": dataclasses.replace}), ["not a valid pickle", "refers to"]),
    ],
)
def test_cifar10_bad_batch(empty_data_cache, content, words):
    folder = write_cifar10_batches(cifar_folder(empty_data_cache), *fake_cifar(60))
    bad = folder / "data_batch_3"
    if content is None:
        content = bad.read_bytes()[: len(bad.read_bytes()) // 2]
    bad.write_bytes(content)
    message = images_error(name="cifar10")
    assert str(bad) in message and "bayesx data fetch cifar10" in message
    for word in words:
        assert word in message, (word, message)


def test_write_cifar10_rejects_bad_input(tmp_path):
    with pytest.raises(BayesxError, match="uint8 of shape"):
        write_cifar10_batches(tmp_path, np.zeros((6, 32, 32, 3), np.uint8), np.zeros(6))
