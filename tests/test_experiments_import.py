"""Every experiment script imports (its main is behind a __main__ guard), so a moved module is caught here
rather than when someone runs a benchmark (the peers harness's logging is tested in test_report.py)."""

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


@pytest.mark.parametrize("stem", [s.stem for s in SCRIPTS  # helpers (densities, _runs...) have no main
                                  if s.stem not in ("densities", "pymc_models") and not s.stem.startswith("_")])
def test_experiment_script_imports(stem):
    assert callable(getattr(load(stem), "main", None))


def test_peers_reject_a_posterior_they_do_not_write(capsys):
    assert load("peers").main(["--posterior", "model=betabinomial", "--bayesx", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model=logreg" in err and "funnel" in err
