"""Tests for the CNAE-9 loader on a small fake CNAE-9.data in a temporary data cache (no network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bayesx.data.cnae9 import N_FEATURES, load_cnae9
from bayesx.errors import BayesxError

N_ROWS = 45  # five rows of each class 1-9


@pytest.fixture(autouse=True)
def empty_data_cache(tmp_path, monkeypatch):
    """Point the data cache at an empty folder so no test sees (or writes) the user's cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BAYESX_DATA_DIR", str(cache))
    return cache


def fake_table(n_rows: int = N_ROWS, seed: int = 0) -> np.ndarray:
    """Rows of (label 1-9, 856 sparse integer counts), labels cycling 1..9."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(0.05, size=(n_rows, N_FEATURES)) * rng.integers(1, 4, size=(n_rows, N_FEATURES))
    labels = np.arange(n_rows) % 9 + 1
    return np.column_stack([labels, counts]).astype(np.int64)


def write_cnae9(cache: Path, table: np.ndarray | None = None, text: str | None = None) -> Path:
    """Write ``table`` (or raw ``text``) as cnae9/CNAE-9.data in the cache, in the UCI format."""
    path = cache / "cnae9" / "CNAE-9.data"
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        table = fake_table() if table is None else table
        text = "".join(",".join(str(v) for v in row) + "\n" for row in table)
    path.write_text(text)
    return path


def one_line(excinfo) -> str:
    """The error message, checked to be a single line."""
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def cnae9_error(**kwargs) -> str:
    with pytest.raises(BayesxError) as excinfo:
        load_cnae9(**kwargs)
    return one_line(excinfo)


def test_loads_two_classes(empty_data_cache):
    table = fake_table()
    path = write_cnae9(empty_data_cache, table)
    data = load_cnae9(classes=[3, 7], test_fraction=0.2, seed=0, scale=False)
    assert data.name == "cnae9" and data.n_features == N_FEATURES
    assert data.n_train == 8 and data.n_test == 2  # five rows per class, round(0.2 * 5) = 1 test row each
    assert set(np.unique(data.y_train)) == {0.0, 1.0} and set(np.unique(data.y_test)) == {0.0, 1.0}
    assert data.y_test.sum() == 1.0
    # every row comes from class 3 (label 0) or class 7 (label 1), with its raw counts
    rows = {tuple(row[1:]): row[0] for row in table}
    for x, y in zip(np.vstack([data.x_train, data.x_test]), np.concatenate([data.y_train, data.y_test])):
        assert rows[tuple(x.astype(np.int64))] == (7 if y == 1.0 else 3)
    assert "UCI CNAE-9" in data.source and str(path) in data.source
    assert "3 vs 7" in data.description and "raw word counts" in data.description


def test_scaling_uses_the_training_maximum(empty_data_cache):
    write_cnae9(empty_data_cache)
    raw, scaled = load_cnae9(scale=False), load_cnae9(scale=True)
    largest = raw.x_train.max()
    assert largest > 1 and scaled.x_train.max() == 1.0 and scaled.x_train.min() == 0.0
    assert np.allclose(scaled.x_train * largest, raw.x_train) and np.allclose(scaled.x_test * largest, raw.x_test)
    assert np.array_equal(scaled.y_train, raw.y_train)


def test_keeps_constant_columns(empty_data_cache):
    table = fake_table()
    table[:, 1:11] = 0  # ten all-zero columns stay
    write_cnae9(empty_data_cache, table)
    data = load_cnae9()
    assert data.n_features == N_FEATURES and not data.x_train[:, :10].any()


def test_deterministic_by_seed(empty_data_cache):
    write_cnae9(empty_data_cache, fake_table(n_rows=180))
    a, b, c = load_cnae9(seed=4), load_cnae9(seed=4), load_cnae9(seed=5)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    assert a.n_train == 32 and a.n_test == 8


def test_missing_file_names_the_fix(empty_data_cache):
    message = cnae9_error()
    assert str(empty_data_cache / "cnae9" / "CNAE-9.data") in message
    assert "`bayesx data fetch cnae9`" in message and "BAYESX_DATA_DIR" in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "is empty"),
        ("1,2,3\n2,0,1\n", "has 3 columns, expected 857"),
        ("1," + ",".join(["0"] * N_FEATURES) + "\n2,0,1\n", "could not read"),
        ("1," + ",".join(["x"] * N_FEATURES) + "\n", "could not read"),
    ],
)
def test_unreadable_content(empty_data_cache, text, expected):
    write_cnae9(empty_data_cache, text=text)
    message = cnae9_error()
    assert expected in message and "bayesx data fetch cnae9" in message


@pytest.mark.parametrize("bad_label", [0, 10, 2.5])
def test_labels_outside_1_to_9(empty_data_cache, bad_label):
    table = fake_table().astype(np.float64)
    table[3, 0] = bad_label
    text = "".join(",".join(f"{v:g}" for v in row) + "\n" for row in table)
    write_cnae9(empty_data_cache, text=text)
    message = cnae9_error()
    assert "outside 1-9" in message and f"{bad_label:g}" in message


def test_a_chosen_class_absent(empty_data_cache):
    table = fake_table()
    write_cnae9(empty_data_cache, table[table[:, 0] != 2])
    message = cnae9_error(classes=[1, 2])
    assert "no rows of class 2" in message and "data.classes" in message


@pytest.mark.parametrize("classes", [(1, 1), (0, 1), (1, 10), (1,), "12", (1, 2, 3), (1.0, 2), None])
def test_rejects_bad_classes(empty_data_cache, classes):
    write_cnae9(empty_data_cache)
    message = cnae9_error(classes=classes)
    assert "data.classes" in message and "1-9" in message


def test_hydra_config_composes_and_builds(empty_data_cache):
    from bayesx.cli.config import compose
    from bayesx.runner import build

    cfg = compose(["data=cnae9", "data.classes=[4,9]", "data.scale=false"])
    assert cfg.data._target_ == "bayesx.data.cnae9.load_cnae9"
    assert cfg.data.test_fraction == 0.2 and cfg.data.seed == 0
    with pytest.raises(BayesxError, match="bayesx data fetch cnae9"):
        build(cfg.data, "data")
    write_cnae9(empty_data_cache)
    data = build(cfg.data, "data")
    assert data.n_features == N_FEATURES and "4 vs 9" in data.description
