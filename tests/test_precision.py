"""A float64 density that computes in float32 inside is said in one line before the run, naming the operation and
the fix (bayesx.targets.precision); the same density written with theta.new_tensor is not, nor one whose float32
numbers are exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bayesx.targets.custom import CustomModel

CASES = Path(__file__).resolve().parent / "models" / "float32_densities.py"


def _model(name: str, dtype=torch.float64) -> CustomModel:
    return CustomModel(log_density=f"{CASES}:{name}", dim=2, dtype=dtype)


def test_gamma_of_python_floats_is_said_with_the_operation_and_the_fix(capsys):
    model = _model("gamma_of_floats")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bayesx: warning: "), err
    assert "torch.xlogy computes in float32" in err[0] and "theta.new_tensor(...)" in err[0]
    assert model.describe()["precision_warning"] in err[0]


def test_gamma_of_new_tensors_is_not_said(capsys):
    model = _model("gamma_of_new_tensors")
    assert capsys.readouterr().err == "" and "precision_warning" not in model.describe()


@pytest.mark.parametrize("name, said", [("rounded_constant", "reads a float32 tensor whose numbers float32 rounded"),
                                        ("exact_float32_constants", None)])
def test_a_rounded_constant_is_said_and_exact_ones_are_not(capsys, name, said):
    _model(name)
    err = capsys.readouterr().err
    assert (said in err) if said else err == "", err


def test_a_float32_run_is_not_checked(capsys):
    _model("gamma_of_floats", dtype=torch.float32)
    assert capsys.readouterr().err == ""
