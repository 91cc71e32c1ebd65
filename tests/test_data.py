"""Tests for bayesx.data: loaders, validation, IDX files, the registry and fetching (no network)."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import http.server
import io
import tarfile
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesx.data import ClassificationData, download, registry, seeded_split
from bayesx.data.csv import load_csv
from bayesx.data.digits import load_digits
from bayesx.data.idx import load_idx_dataset, read_idx, write_idx
from bayesx.data.mnist import load_mnist01, load_mnist_images
from bayesx.data.synthetic import load_synthetic, make_synthetic
from bayesx.errors import BayesxError

UNREACHABLE = "http://127.0.0.1:9/"  # the discard port: connections are refused at once


@pytest.fixture(autouse=True)
def empty_data_cache(tmp_path, monkeypatch):
    """Point the data cache at an empty folder so no test sees (or writes) the user's cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BAYESX_DATA_DIR", str(cache))
    return cache


def one_line(excinfo) -> str:
    """The error message, checked to be a single line."""
    message = str(excinfo.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------------- ClassificationData


def test_classification_data_converts_to_float64():
    data = ClassificationData("t", [[1, 2], [3, 4]], [0, 1], [[5, 6]], [1], "d", "generated")
    assert data.x_train.dtype == np.float64 and data.y_test.dtype == np.float64
    assert (data.n_train, data.n_test, data.n_features) == (2, 1, 2)


def test_classification_data_rejects_nan():
    with pytest.raises(BayesxError) as excinfo:
        ClassificationData("t", [[1.0, np.nan]], [0], [[1.0, 2.0]], [1], "d", "generated")
    message = one_line(excinfo)
    assert "NaN or infinite" in message and "x_train" in message and "'t'" in message


def test_classification_data_rejects_non_binary_labels():
    with pytest.raises(BayesxError) as excinfo:
        ClassificationData("t", [[1.0], [2.0]], [0, 2], [[1.0]], [1], "d", "generated")
    message = one_line(excinfo)
    assert "0/1" in message and "2.0" in message and "map" in message


def test_classification_data_rejects_shape_mismatch():
    with pytest.raises(BayesxError, match="rows"):
        ClassificationData("t", [[1.0], [2.0]], [0], [[1.0]], [1], "d", "generated")
    with pytest.raises(BayesxError, match="features"):
        ClassificationData("t", [[1.0], [2.0]], [0, 1], [[1.0, 2.0]], [1], "d", "generated")


def test_seeded_split_is_stratified_and_deterministic():
    x = np.arange(100, dtype=float).reshape(50, 2)
    y = np.array([0.0] * 40 + [1.0] * 10)
    first = seeded_split(x, y, 0.2, seed=3)
    again = seeded_split(x, y, 0.2, seed=3)
    other = seeded_split(x, y, 0.2, seed=4)
    x_train, y_train, x_test, y_test = first
    assert len(y_test) == 10 and y_test.sum() == 2  # 20% of each class
    assert len(y_train) == 40 and y_train.sum() == 8
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[2], other[2])
    rows = np.concatenate([x_train[:, 0], x_test[:, 0]])
    assert sorted(rows.tolist()) == x[:, 0].tolist()  # a partition of the rows


def test_seeded_split_with_fraction_zero_keeps_every_row_for_training():
    x, y = np.arange(20.0).reshape(10, 2), np.array([0, 1] * 5)
    x_train, y_train, x_test, y_test = seeded_split(x, y, 0.0, seed=0)
    assert len(y_train) == 10 and len(y_test) == 0 and x_test.shape == (0, 2)
    assert sorted(x_train[:, 0].tolist()) == x[:, 0].tolist()


@pytest.mark.parametrize("fraction", [1.0, -0.1, 1.5])
def test_seeded_split_rejects_bad_fraction(fraction):
    with pytest.raises(BayesxError) as excinfo:
        seeded_split(np.zeros((10, 1)), np.zeros(10), fraction, seed=0)
    assert "test_fraction" in one_line(excinfo)


# ------------------------------------------------------------------------------------ synthetic


def test_synthetic_shapes_and_labels():
    data = load_synthetic()
    assert data.x_train.shape == (550, 500) and data.x_test.shape == (150, 500)
    assert set(np.unique(data.y_train)) == {0.0, 1.0}
    assert data.name == "synthetic" and data.source == "generated"
    assert "n_train=550" in data.description


def test_synthetic_is_deterministic_by_seed():
    a, b, c = load_synthetic(seed=1), load_synthetic(seed=1), load_synthetic(seed=2)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)


def test_synthetic_correlation_structure():
    x, _, beta = make_synthetic(seed=0, n_features=80, n_correlated=20, rho=0.85, n_rows=4000)
    corr = np.corrcoef(x.T)
    block = corr[:20, :20][np.triu_indices(20, 1)]
    rest = corr[20:, 20:][np.triu_indices(60, 1)]
    cross = corr[:20, 20:]
    assert abs(block.mean() - 0.85) < 0.03
    assert abs(rest.mean()) < 0.01 and abs(cross.mean()) < 0.01
    assert np.allclose(x.std(axis=0), 1.0, atol=0.05)
    assert beta.min() >= -1.0 and beta.max() <= 1.0


def test_synthetic_labels_follow_the_logistic_model():
    x, y, beta = make_synthetic(seed=5, n_features=10, n_correlated=3, n_rows=5000, beta_scale=2.0)
    probability = 1.0 / (1.0 + np.exp(-(x @ beta)))
    assert abs(y.mean() - probability.mean()) < 0.03
    assert y[probability > 0.9].mean() > 0.85 and y[probability < 0.1].mean() < 0.15


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"rho": 1.0}, "data.rho"),
        ({"rho": -0.1}, "data.rho"),
        ({"n_correlated": 600}, "data.n_correlated"),
        ({"n_features": 0}, "data.n_features"),
        ({"n_train": -5}, "data.n_train"),
        ({"seed": -1}, "data.seed"),
        ({"seed": 1.5}, "data.seed"),
    ],
)
def test_synthetic_rejects_bad_arguments(kwargs, key):
    with pytest.raises(BayesxError) as excinfo:
        load_synthetic(**kwargs)
    assert key in one_line(excinfo)


# --------------------------------------------------------------------------------------- digits


def test_digits_two_classes():
    data = load_digits(classes=(3, 8), test_fraction=0.25, seed=0)
    assert data.n_features == 64 and data.source == "sklearn"
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert set(np.unique(data.y_train)) == {0.0, 1.0} and set(np.unique(data.y_test)) == {0.0, 1.0}
    total = data.n_train + data.n_test
    assert 340 < total < 370  # about 180 images per digit
    assert abs(data.n_test / total - 0.25) < 0.01
    assert "3 vs 8" in data.description


def test_digits_unscaled_and_deterministic():
    a, b = load_digits(seed=7, scale=False), load_digits(seed=7, scale=False)
    assert a.x_train.max() == 16.0
    assert np.array_equal(a.x_test, b.x_test)


@pytest.mark.parametrize("classes", [(1, 1), (0, 10), (0,), "01", (0, 1, 2), (0.5, 1)])
def test_digits_rejects_bad_classes(classes):
    with pytest.raises(BayesxError) as excinfo:
        load_digits(classes=classes)
    assert "data.classes" in one_line(excinfo)


# ---------------------------------------------------------------------------------------- MNIST


def test_mnist01_vendored_works_offline():
    data = load_mnist01(source="auto")
    assert data.source == "vendored" and data.name == "mnist01"
    assert data.n_features == 784
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert data.n_train + data.n_test == 1001 + 1127  # all vendored 0s and 1s
    assert abs(data.y_train.mean() - 1127 / 2128) < 0.01
    assert "vendored" in data.description and f"n_train={data.n_train}" in data.description


def test_mnist01_vendored_is_deterministic_and_other_classes():
    a, b = load_mnist01(classes=(4, 9), seed=2), load_mnist01(classes=(4, 9), seed=2)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_train, b.y_train)
    assert a.n_train + a.n_test == 980 + 978


def test_mnist01_full_missing_is_an_error(empty_data_cache):
    with pytest.raises(BayesxError) as excinfo:
        load_mnist01(source="full")
    message = one_line(excinfo)
    assert "full MNIST not found" in message and "bayesx data fetch mnist" in message
    assert str(empty_data_cache / "mnist") in message


def test_mnist01_rejects_unknown_source():
    with pytest.raises(BayesxError) as excinfo:
        load_mnist01(source="cloud")
    assert "data.source" in one_line(excinfo)


def test_mnist_images_vendored():
    images, labels, description = load_mnist_images(source="vendored")
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and np.array_equal(np.bincount(labels)[:2], [1001, 1127])
    assert images.max() == 255 and "10,000" in description


def write_fake_mnist(directory: Path, n_train: int = 30, n_test: int = 12, suffix: str = ".gz") -> None:
    """Write the four MNIST IDX files with small random content."""
    rng = np.random.default_rng(0)
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = np.arange(n, dtype=np.uint8) % 10
        write_idx(directory / f"{prefix}-images-idx3-ubyte{suffix}", images)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte{suffix}", labels)


def test_mnist01_uses_full_mnist_when_present(empty_data_cache):
    write_fake_mnist(empty_data_cache / "mnist")
    data = load_mnist01(classes=(0, 1), source="auto")
    assert data.source.startswith("fetched:")
    assert (data.n_train, data.n_test) == (6, 4)  # labels cycle 0..9: 3+3 of 30, 2+2 of 12
    assert "full MNIST" in data.description and data.n_features == 784
    images, labels, description = load_mnist_images()
    assert images.shape == (42, 28, 28) and labels.shape == (42,) and "full MNIST" in description
    assert load_mnist01(source="vendored").source == "vendored"


# ------------------------------------------------------------------------------------------ CSV


def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def good_csv(tmp_path):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "a": rng.normal(5.0, 3.0, 40),
            "b": rng.normal(size=40),
            "const": np.full(40, 2.0),
            "label": np.tile([0, 1], 20),
        }
    )
    return write_csv(tmp_path / "good.csv", frame)


def test_csv_loads_and_standardizes(good_csv):
    data = load_csv(path=str(good_csv), target="label", test_fraction=0.25, seed=0)
    assert data.x_train.shape == (30, 3) and data.x_test.shape == (10, 3)
    assert np.allclose(data.x_train[:, :2].mean(axis=0), 0.0) and np.allclose(data.x_train[:, :2].std(axis=0), 1.0)
    assert np.allclose(data.x_train[:, 2], 0.0) and np.allclose(data.x_test[:, 2], 0.0)  # constant: centred only
    assert data.source == f"file:{good_csv.resolve()}" and "good.csv" in data.description
    again = load_csv(path=str(good_csv), target="label", test_fraction=0.25, seed=0)
    assert np.array_equal(data.x_test, again.x_test)


def test_csv_without_standardizing_keeps_values(good_csv):
    data = load_csv(path=good_csv, target="label", standardize=False)
    assert np.all(data.x_train[:, 2] == 2.0)


def test_csv_accepts_boolean_labels(tmp_path):
    path = tmp_path / "bool.csv"
    path.write_text("x,y\n1,True\n2,False\n3,True\n4,False\n5,True\n6,False\n")
    data = load_csv(path=path, target="y", test_fraction=0.5)
    assert set(np.unique(np.concatenate([data.y_train, data.y_test]))) == {0.0, 1.0}


def csv_error(**kwargs) -> str:
    with pytest.raises(BayesxError) as excinfo:
        load_csv(**kwargs)
    return one_line(excinfo)


def test_csv_path_unset():
    assert "data.path is not set" in csv_error(path=None, target="y")


def test_csv_path_missing(tmp_path):
    message = csv_error(path=str(tmp_path / "nope.csv"), target="y")
    assert "not found" in message and "nope.csv" in message and "data.path" in message


def test_csv_unreadable(tmp_path):
    binary = tmp_path / "image.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "could not read" in csv_error(path=binary, target="y")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty" in csv_error(path=empty, target="y")
    assert "is not a file" in csv_error(path=tmp_path, target="y")


def test_csv_target_absent(tmp_path):
    frame = pd.DataFrame({f"col{i}": [0.0, 1.0] for i in range(15)})
    path = write_csv(tmp_path / "wide.csv", frame)
    message = csv_error(path=path, target="label")
    assert "target column 'label' not found" in message and "col0" in message
    assert "col14" not in message and "5 more" in message  # truncated list
    assert "data.target is not set" in csv_error(path=path, target=None)


def test_csv_non_numeric_features(tmp_path):
    frame = pd.DataFrame({"city": ["a", "b"], "size": [1.0, 2.0], "colour": ["x", "y"], "y": [0, 1]})
    message = csv_error(path=write_csv(tmp_path / "text.csv", frame), target="y")
    assert "non-numeric" in message and "city" in message and "colour" in message and "size" not in message


def test_csv_labels_not_binary(tmp_path):
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [1, 2, 3]})
    message = csv_error(path=write_csv(tmp_path / "multi.csv", frame), target="y")
    assert "0/1" in message and "1, 2, 3" in message and "map" in message
    frame = pd.DataFrame({"x": [1.0, 2.0], "y": ["no", "yes"]})
    message = csv_error(path=write_csv(tmp_path / "words.csv", frame), target="y")
    assert "no, yes" in message


def test_csv_nan_and_inf(tmp_path):
    path = tmp_path / "holes.csv"
    path.write_text("a,b,c,y\n1,2,3,0\n1,,3,1\n1,2,inf,0\n1,2,3,1\n")
    message = csv_error(path=path, target="y")
    assert "NaN" in message and "columns: b, c;" in message


def test_csv_bad_fraction(good_csv):
    assert "test_fraction" in csv_error(path=good_csv, target="label", test_fraction=1.0)


# ------------------------------------------------------------------------------------------ IDX


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_idx_round_trip(tmp_path, suffix, dtype):
    array = (np.arange(2 * 3 * 5) - 7).reshape(2, 3, 5).astype(dtype)
    path = write_idx(tmp_path / f"a.idx{suffix}", array)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (suffix == ".gz")
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype) and back.shape == (2, 3, 5)
    assert np.array_equal(back, array)


def test_idx_gzip_detected_by_content(tmp_path):
    path = write_idx(tmp_path / "labels.gz", np.array([3, 1, 4], dtype=np.uint8))
    renamed = path.rename(tmp_path / "labels-idx1-ubyte")  # gzip without .gz suffix
    assert read_idx(renamed).tolist() == [3, 1, 4]


def test_idx_bad_magic(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(b"PK\x03\x04" + bytes(20))
    with pytest.raises(BayesxError) as excinfo:
        read_idx(path)
    message = one_line(excinfo)
    assert "bad magic number" in message and "0x0000" in message and "0x504B0304" in message
    assert "is this an IDX file?" in message


def test_idx_truncated(tmp_path):
    path = write_idx(tmp_path / "full.idx", np.zeros((10, 28, 28), dtype=np.uint8))
    cut = tmp_path / "cut.idx"
    cut.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(BayesxError) as excinfo:
        read_idx(cut)
    message = one_line(excinfo)
    assert "truncated" in message and "expected 7840 bytes" in message and "found 7740" in message
    assert "re-download" in message


def test_idx_truncated_gzip_and_missing(tmp_path):
    path = write_idx(tmp_path / "a.gz", np.arange(1000, dtype=np.int32))
    broken = tmp_path / "b.gz"
    broken.write_bytes(path.read_bytes()[:40])
    with pytest.raises(BayesxError, match="re-download"):
        read_idx(broken)
    with pytest.raises(BayesxError, match="not found"):
        read_idx(tmp_path / "missing.idx")


def test_load_idx_dataset(tmp_path):
    write_fake_mnist(tmp_path / "raw", suffix="")
    train_x, train_y, test_x, test_y = load_idx_dataset(tmp_path / "raw")
    assert train_x.shape == (30, 28, 28) and test_y.shape == (12,)
    with pytest.raises(BayesxError) as excinfo:
        load_idx_dataset(tmp_path / "absent")
    assert "train-images-idx3-ubyte" in one_line(excinfo) and "not found" in str(excinfo.value)
    (tmp_path / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(BayesxError) as excinfo:
        load_idx_dataset(tmp_path / "raw")
    assert "t10k-labels-idx1-ubyte" in one_line(excinfo) and "train-images" not in str(excinfo.value)


# ------------------------------------------------------------------------------------- registry


def test_data_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BAYESX_DATA_DIR", str(tmp_path / "elsewhere"))
    assert registry.data_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("BAYESX_DATA_DIR")
    assert registry.data_dir() == Path.home() / ".cache" / "bayesx" / "data"


def test_registry_lists_datasets_and_status(empty_data_cache):
    infos = {info.name: info for info in registry.list_datasets()}
    expected = {"synthetic", "digits", "mnist10k", "mnist", "fashion_mnist", "cifar10", "cnae9"}
    assert set(infos) == expected
    for name in ("synthetic", "digits", "mnist10k"):
        assert infos[name].status() == "built-in" and not infos[name].fetchable
    assert Path(infos["mnist10k"].location).is_file()
    for name in ("mnist", "cifar10", "cnae9"):
        assert infos[name].status() == "missing" and infos[name].fetchable
        assert infos[name].location == str(empty_data_cache / name)
    write_fake_mnist(empty_data_cache / "mnist")
    assert infos["mnist"].status() == "present"


def test_fashion_mnist_found_in_system_dir(monkeypatch, tmp_path):
    system = tmp_path / "usr-share-fashion"
    write_fake_mnist(system)
    info = dataclasses.replace(registry.get_dataset("fashion_mnist"), system_dirs=(str(system),))
    assert info.status() == "present" and info.location == str(system)


def test_fetch_unknown_and_builtin():
    with pytest.raises(BayesxError) as excinfo:
        registry.fetch("imagenet")
    message = one_line(excinfo)
    assert "unknown data set 'imagenet'" in message and "mnist" in message and "cnae9" in message
    result = registry.fetch("synthetic")
    assert result.status == "built-in" and "nothing to fetch" in result.message


def point_urls(monkeypatch, name: str, *bases: str, served: Path | None = None) -> None:
    """Make data set ``name`` download its files from ``bases`` (tried in order); with ``served``, the
    files there (fakes, small) become the ones whose checksums the fetch expects."""
    info = registry.get_dataset(name)
    files = tuple(
        dataclasses.replace(remote, urls=tuple(base + remote.filename for base in bases),
                            sha256=download.sha256_of(served / remote.filename) if served else remote.sha256)
        for remote in info.remote_files
    )
    monkeypatch.setitem(registry.DATASETS, name, dataclasses.replace(info, remote_files=files))


def test_fetch_offline_error(monkeypatch, empty_data_cache):
    point_urls(monkeypatch, "cnae9", UNREACHABLE)
    with pytest.raises(BayesxError) as excinfo:
        registry.fetch("cnae9", progress=False)
    message = one_line(excinfo)
    assert message.startswith("could not download cnae9 from http://127.0.0.1:9/CNAE-9.data: ")
    assert "check the network connection" in message and str(empty_data_cache / "cnae9") in message
    assert list((empty_data_cache / "cnae9").iterdir()) == []  # no half files left
    assert registry.get_dataset("cnae9").status() == "missing"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def local_server(tmp_path):
    """Serve ``tmp_path/served`` on 127.0.0.1; yields (folder, base URL)."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


def test_fetch_cnae9_from_local_server(monkeypatch, empty_data_cache, local_server):
    folder, base = local_server
    (folder / "CNAE-9.data").write_text("1,0,0,1\n2,1,0,0\n")
    point_urls(monkeypatch, "cnae9", base)
    result = registry.fetch("cnae9", progress=False)
    target = empty_data_cache / "cnae9"
    assert result.status == "present" and result.location == str(target)
    assert "no known checksum to verify CNAE-9.data (sha256 " in result.message
    assert (target / "CNAE-9.data").read_text() == "1,0,0,1\n2,1,0,0\n"
    assert sorted(p.name for p in target.iterdir()) == ["CNAE-9.data"]
    again = registry.fetch("cnae9", progress=False)
    assert "already present" in again.message and again.downloaded == ()
    (folder / "CNAE-9.data").write_text("new\n")
    assert registry.fetch("cnae9", force=True, progress=False).downloaded
    assert (target / "CNAE-9.data").read_text() == "new\n"


def test_fetch_mnist_with_mirror_fallback(monkeypatch, empty_data_cache, local_server):
    folder, base = local_server
    write_fake_mnist(folder)
    point_urls(monkeypatch, "mnist", UNREACHABLE, base, served=folder)  # first mirror refuses, second works
    result = registry.fetch("mnist", progress=False)
    assert result.status == "present" and len(result.downloaded) == 4
    assert "checksums verified" in result.message
    assert registry.get_dataset("mnist").status() == "present"
    data = load_mnist01(source="full")
    assert data.source == f"fetched:{empty_data_cache / 'mnist'}" and data.n_features == 784


def test_fetch_http_error_names_status(monkeypatch, local_server):
    _, base = local_server
    point_urls(monkeypatch, "mnist", base)  # the server has no such files: 404
    with pytest.raises(BayesxError) as excinfo:
        registry.fetch("mnist", progress=False)
    assert "HTTP 404" in one_line(excinfo)


def test_fetch_cifar10_extracts_archive(monkeypatch, empty_data_cache, local_server):
    folder, base = local_server
    with tarfile.open(folder / "cifar-10-python.tar.gz", "w:gz") as tar:
        for relative in registry.get_dataset("cifar10").required:
            content = b"fake batch"
            entry = tarfile.TarInfo(relative)
            entry.size = len(content)
            tar.addfile(entry, io.BytesIO(content))
    point_urls(monkeypatch, "cifar10", base, served=folder)
    result = registry.fetch("cifar10", progress=False)
    target = empty_data_cache / "cifar10"
    assert result.status == "present"
    assert (target / "cifar-10-batches-py" / "test_batch").read_bytes() == b"fake batch"
    assert not (target / "cifar-10-python.tar.gz").exists()  # archive removed after unpacking
    assert sorted(p.name for p in target.iterdir()) == ["cifar-10-batches-py"]


def test_fetch_refuses_a_corrupt_download_and_keeps_the_cache_as_it_was(monkeypatch, empty_data_cache, local_server):
    """A served file whose bytes differ from the known SHA-256 (truncated, altered, a captive portal's
    page) is an error naming the checksum; the cache keeps its earlier copy and no temporary file."""
    folder, base = local_server
    write_fake_mnist(folder)
    point_urls(monkeypatch, "mnist", base, served=folder)
    registry.fetch("mnist", progress=False)
    target = empty_data_cache / "mnist"
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    name = "train-labels-idx1-ubyte.gz"
    (folder / name).write_bytes((folder / name).read_bytes()[:-5])  # now truncated on the server
    with pytest.raises(BayesxError) as excinfo:
        registry.fetch("mnist", force=True, progress=False)
    message = one_line(excinfo)
    assert f"could not download mnist from {base}{name}: SHA-256 mismatch" in message
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # untouched, no .part left


def test_fetch_replaces_a_corrupt_file_left_in_the_cache(monkeypatch, empty_data_cache, local_server):
    folder, base = local_server
    write_fake_mnist(folder)
    point_urls(monkeypatch, "mnist", base, served=folder)
    target = empty_data_cache / "mnist"
    target.mkdir(parents=True)
    name = "t10k-labels-idx1-ubyte.gz"
    (target / name).write_bytes(b"half a file")  # from a crashed earlier fetch, not ours
    result = registry.fetch("mnist", progress=False)
    assert (target / name).read_bytes() == (folder / name).read_bytes() and len(result.downloaded) == 4


def test_known_checksums_are_sha256_hex():
    for info in registry.list_datasets():
        for remote in info.remote_files:
            assert remote.sha256 is None or (len(remote.sha256) == 64 and int(remote.sha256, 16) >= 0)
    assert all(r.sha256 for name in ("mnist", "fashion_mnist", "cifar10")
               for r in registry.get_dataset(name).remote_files)


def test_vendored_file_is_small_and_licensed():
    embedded = Path(registry.EMBEDDED_DIR)
    assert (embedded / "mnist10k.npz").stat().st_size < 3 * 1024 * 1024
    licence = (embedded / "LICENSE-mnist.txt").read_text()
    assert "MIT License" in licence and "LeCun" in licence and "1.1.0" in licence


def test_gzip_module_reads_written_idx(tmp_path):
    """write_idx's .gz output is a standard gzip stream (readable by other tools)."""
    path = write_idx(tmp_path / "x.gz", np.array([[1, 2]], dtype=np.uint8))
    raw = gzip.decompress(path.read_bytes())
    assert raw == b"\x00\x00\x08\x02" + b"\x00\x00\x00\x01\x00\x00\x00\x02" + b"\x01\x02"


def test_training_split_with_one_class_is_rejected():
    import numpy as np
    import pytest

    from bayesx.data.classification import ClassificationData
    from bayesx.errors import BayesxError

    with pytest.raises(BayesxError, match="only the label 1"):
        ClassificationData("one", np.ones((4, 2)), np.ones(4), np.ones((2, 2)), np.array([0.0, 1.0]), "d", "generated")
