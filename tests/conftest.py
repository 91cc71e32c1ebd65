"""Fixtures shared by the end-to-end test files (each defines its own module-scoped ``store``)."""

from __future__ import annotations

import os

import pytest
import torch

from cli_helpers import empty_store


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """A temporary $BAYESX_DATA_DIR for a whole test file (e.g. the elliptic prior-factor cache)."""
    root = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BAYESX_DATA_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def bad_store(store):
    """A second MLflow store beside the module's ``store``, kept free of FINISHED runs, for bad input."""
    return empty_store(store[0])


@pytest.fixture
def bad_env(bad_store, monkeypatch):
    """Point the CLI at the bad-input store for one test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", bad_store)
    return bad_store


# Sampler runs in the tests stay on the PyTorch path unless a test asks for compiled densities (a compile
# costs 10-40 s; tests/test_compiled.py sets BAYESX_COMPILE itself): ``auto`` would compile every default run.
os.environ.setdefault("BAYESX_COMPILE", "never")


@pytest.fixture
def float64_by_default():
    """torch's default dtype float64 for one test, restored after it (the default is global: set at a module's
    import, it would turn every later module's float32 tensors float64)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)
