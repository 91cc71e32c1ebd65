"""Every experiment script imports (its main is behind a __main__ guard), so a moved module is caught here
rather than when someone reproduces a table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*.py"))


def load(stem: str):
    script = next(s for s in SCRIPTS if s.stem == stem)
    spec = importlib.util.spec_from_file_location(f"experiment_{stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stem", [s.stem for s in SCRIPTS])
def test_experiment_script_imports(stem):
    assert callable(getattr(load(stem), "main", None))


@pytest.mark.parametrize("stem, argv", [("flows_u1", ["--target", "funnel"]), ("flows_families", ["--energies", "u1,t1"]),
                                        ("flows_u1", ["--target", "nope"])])
def test_plane_experiments_reject_other_targets(stem, argv, monkeypatch, capsys):
    """The 2-D flow experiments on a target of another dimension: exit 2 with one line naming the choices."""
    monkeypatch.setattr("sys.argv", [stem, *argv])
    assert load(stem).main() == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "[-4, 4]^2" in err and "u1, u2, u3, u4" in err and argv[1].split(",")[-1] in err


def test_bench_samplers_csv_without_a_path_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bench_samplers", "--posteriors", "csv"])
    assert load("bench_samplers").main() == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--csv PATH" in err
