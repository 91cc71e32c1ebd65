"""model=custom as users write it: a batch is evaluated row by row only where every row equals its point alone
(a density coupling the chains is evaluated point by point), the posterior is identified by what the density
computes (an edit in a module it imports counts, a comment does not), data arrive with their kinds, and errors
point at the row and the option to fix."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from bayesx.errors import BayesxError, DensityError
from bayesx.targets.custom import CustomModel

COUPLED = """
import torch
def log_density(theta):
    # the branch reads the batch's mean: each chain's value depends on the others
    shift = 1.0 if bool(theta[..., 0].mean() > 0.5) else 0.0
    return -0.5 * ((theta - shift) ** 2).sum(-1)
"""

BATCHED = """
def log_density(theta):
    return -0.5 * ((theta - 1.0) ** 2).sum(-1)
"""


def model(tmp_path, text: str, name: str = "density", **options) -> CustomModel:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return CustomModel(log_density=f"{path}:log_density", **{"dim": 2, **options})


def test_a_density_coupling_the_chains_is_evaluated_point_by_point(tmp_path):
    coupled = model(tmp_path, COUPLED, "coupled")
    assert coupled.evaluation != "batched"
    q = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.2, 1.0]], dtype=torch.float64)
    shifts = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)[:, None]
    torch.testing.assert_close(coupled.log_prob(q), -0.5 * ((q - shifts) ** 2).sum(-1))
    assert coupled.describe()["evaluation"] == coupled.evaluation
    # the control: a density that is batched row by row stays batched
    assert model(tmp_path, BATCHED, "batched").evaluation == "batched"


HELPER = "SCALE = {scale}\n"
IMPORTING = """
import sys
sys.path.insert(0, {folder!r})
import importlib, helper_for_identity
importlib.reload(helper_for_identity)
def log_density(theta):
    return -0.5 * ((theta / helper_for_identity.SCALE) ** 2).sum(-1)
"""


def test_the_identity_is_what_the_density_computes(tmp_path):
    folder = tmp_path / "helpers"
    folder.mkdir()
    (folder / "helper_for_identity.py").write_text(HELPER.format(scale=1.0))
    source = IMPORTING.format(folder=str(folder))
    first = model(tmp_path, source).content_digests()
    # the same density under another file name, with a comment added: the same posterior
    assert model(tmp_path, "# a comment\n" + source, "renamed").content_digests() == first
    # an edit in the module the density imports: another posterior (the negative control)
    (folder / "helper_for_identity.py").write_text(HELPER.format(scale=5.0))
    sys.modules.pop("helper_for_identity", None)
    assert model(tmp_path, source, "edited").content_digests() != first


FAILS_FAR = """
import torch
TABLE = torch.arange(8.0)
def log_density(theta):
    index = torch.floor(theta[..., 0].abs() * 2).long()
    return -0.5 * (theta ** 2).sum(-1) + 0.0 * TABLE[index]
"""


def test_a_density_failing_only_far_out_is_told_from_one_that_does_not(tmp_path):
    near = model(tmp_path, BATCHED.replace("1.0", "0.0"), "plain").content_digests()
    far = model(tmp_path, FAILS_FAR, "table").content_digests()
    assert near != far  # equal near the start, but the table density raises IndexError at scale 10


def test_integer_arrays_arrive_as_integers_and_a_byte_order_mark_is_not_a_header(tmp_path):
    np.savez(tmp_path / "d.npz", group=np.array([0, 1, 1]), x=np.array([0.5, 1.5, 2.5]), flag=np.array([True, False, True]))
    text = "def log_density(theta, data):\n    return -0.5 * ((theta[..., 0] - data['x'][data['group']].sum()) ** 2)" \
           " - 0.5 * theta[..., 1] ** 2\n"
    target = model(tmp_path, text, "grouped", data_file=str(tmp_path / "d.npz"))
    assert target.data["group"].dtype == torch.int64 and target.data["flag"].dtype == torch.bool
    assert target.data["x"].dtype == torch.float64
    (tmp_path / "bom.csv").write_bytes("\ufeffy,x\n1,2\n0,3\n".encode("utf-8"))
    text = "def log_density(theta, data):\n    return -0.5 * ((theta - data['y'].mean()) ** 2).sum(-1)\n"
    assert sorted(model(tmp_path, text, "bom", data_file=str(tmp_path / "bom.csv")).data) == ["x", "y"]


RAISES_BEYOND_3 = """
def log_density(theta):
    if bool((theta[..., 0] > 3).any()):
        raise ValueError("beyond three")
    return -0.5 * (theta ** 2).sum(-1)
"""


def test_a_density_error_names_the_row_that_failed(tmp_path):
    target = model(tmp_path, RAISES_BEYOND_3, "beyond")
    with pytest.raises(DensityError, match=r"e\.g\. \[4\.0, 0\.5\]"):
        target.log_prob(torch.tensor([[0.0, 0.0], [4.0, 0.5]], dtype=torch.float64))


def test_an_index_error_at_the_start_names_model_dim(tmp_path):
    text = "def log_density(theta):\n    return -0.5 * (theta[..., 0] ** 2 + theta[..., 1] ** 2 + theta[..., 2] ** 2)\n"
    with pytest.raises(BayesxError, match=r"model\.dim=2"):
        model(tmp_path, text, "three")
    assert model(tmp_path, text, "three_ok", dim=3).dim == 3  # the control: the right dim runs


def test_a_custom_run_prints_and_stores_a_posterior_summary_named_by_its_data_file(tmp_path_factory, tmp_path):
    """The run prints mean, sd, quantiles, ESS and R-hat per named parameter, stores posterior_summary.csv, and is
    named after its data file's stem (not ``none``)."""
    from cli_helpers import isolated_store, run_ok
    from mlflow.tracking import MlflowClient

    np.savez(tmp_path / "counts.npz", m=np.array([1.0, -1.0]))
    density = tmp_path / "shifted.py"
    density.write_text("def log_density(theta, data):\n    return -0.5 * ((theta - data['m']) ** 2).sum(-1)\n")
    with isolated_store(tmp_path_factory, "summary") as (_, uri):
        from cli_helpers import call

        argv = ["run", "model=custom", f"model.log_density={density}:log_density", "model.dim=2",
                f"model.data_file={tmp_path / 'counts.npz'}", "model.param_names=[up,down]", "method.num_warmup=100",
                "method.num_draws=200", "method.max_draws=null", "progress=false", "plots.n_coords=0"]
        run = run_ok(uri, argv)
        code, out, _ = call(argv)
        assert code == 0
        assert run.info.run_name == "nuts-custom-counts-seed0"
        header = next(line for line in out.splitlines() if "ess_bulk" in line and "parameter" in line)
        assert header.split() == ["parameter", "mean", "sd", "q5", "q95", "ess_bulk", "ess_tail", "r_hat"]
        up = next(line for line in out.splitlines() if line.strip().startswith("up "))
        assert abs(float(up.split()[1]) - 1.0) < 0.3
        path = MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "posterior_summary.csv")
        import pandas as pd

        table = pd.read_csv(path, index_col=0)
        assert list(table.index) == ["up", "down"] and table.loc["down", "mean"] < 0
