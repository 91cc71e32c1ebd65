"""Pyro models run by bayesx (``model=pyro``): the latent sites become named, constrained parameters, the density
equals the same model written by hand, the run reports the sites by name on the compiled path, data files reach the
model as keyword arguments, and what bayesx cannot sample is refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import assert_rejected, empty_store, isolated_store, run_ok
from mlflow.tracking import MlflowClient

pytest.importorskip("pyro")

from bayesx.errors import BayesxError  # noqa: E402
from bayesx.targets.custom import CustomModel  # noqa: E402
from bayesx.targets.pyro_model import PyroModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EIGHT_SCHOOLS = ROOT / "examples" / "eight_schools_pyro.py"
CASES = Path(__file__).resolve().parent / "models" / "pyro_cases.py"


def test_the_latent_sites_are_the_parameters_and_the_density_is_the_hand_written_one():
    """Against the same model written with model.params (examples/eight_schools_constrained.py): the log densities
    differ by one constant at every point (Pyro's normalising constants), so the posteriors are the same; control:
    a model with another prior scale differs by a non-constant."""
    target = PyroModel(fn=f"{EIGHT_SCHOOLS}:model")
    assert target.reported_names()[:3] == ["mu", "tau", "eta[0]"] and target.dim == 10
    assert target.parameter_shapes() == {"mu": (), "tau": (), "eta": (8,)}
    by_hand = CustomModel(log_density=f"{ROOT / 'examples' / 'eight_schools_constrained.py'}:noncentered",
                          params={"mu": "real", "tau": "positive", "eta": "real[8]"})
    q = torch.randn(6, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    difference = target.log_prob(q) - by_hand.log_prob(q)
    torch.testing.assert_close(difference, difference[0].expand(6), rtol=0, atol=1e-9)
    torch.testing.assert_close(target.constrain(q), by_hand.constrain(q))
    centred = PyroModel(fn=f"{EIGHT_SCHOOLS}:centered")
    other = centred.log_prob(q) - by_hand.log_prob(q)
    assert float(other.max() - other.min()) > 1.0
    # the centred Pyro model is the centred constrained form (tested against posteriordb in test_constrained_models)
    centred_by_hand = CustomModel(log_density=f"{ROOT / 'examples' / 'eight_schools_constrained.py'}:centered",
                                  params={"mu": "real", "tau": "positive", "theta": "real[8]"})
    same = centred.log_prob(q) - centred_by_hand.log_prob(q)
    torch.testing.assert_close(same, same[0].expand(6), rtol=0, atol=1e-9)
    torch.testing.assert_close(centred.constrain(q), centred_by_hand.constrain(q))


def test_data_file_arrays_are_the_models_keyword_arguments(tmp_path):
    x = np.concatenate([np.random.default_rng(0).normal(-2, 0.5, 30), np.random.default_rng(1).normal(3, 1, 30)])
    np.savez(tmp_path / "mixture.npz", x=x)
    target = PyroModel(fn=f"{CASES}:mixture", data_file=str(tmp_path / "mixture.npz"))
    assert target.parameter_shapes() == {"w": (3,), "loc": (3,), "scale": (3,)}
    assert target.dim == 2 + 3 + 3
    weights = target.constrain(torch.zeros(1, 8, dtype=torch.float64))[0, :3]
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("case, message", [
    ("with_assignment", "the latent site z is discrete; .* marginalise it out"),
    ("with_param", r"pyro.param sites \(loc\)"),
    ("subsampled", "subsampled plate"),
])
def test_what_bayesx_cannot_sample_is_one_line(tmp_path, case, message):
    kwargs = {}
    if case == "with_assignment":
        np.savez(tmp_path / "x.npz", x=np.zeros(5))
        kwargs["data_file"] = str(tmp_path / "x.npz")
    with pytest.raises(BayesxError, match=message):
        PyroModel(fn=f"{CASES}:{case}", **kwargs)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "pyro") as (root, uri):
        yield root, uri


def test_a_pyro_run_reports_its_sites_by_name_on_the_compiled_path(store):
    _, uri = store
    run = run_ok(uri, ["run", "model=pyro", f"model.fn={EIGHT_SCHOOLS}:model", "method=nuts", "method.num_warmup=200",
                       "method.num_draws=200", "n_chains=2", "device.compile=always"])
    assert run.data.tags["kernels"] == "compiled" and run.data.tags["density_compiler"] == "plain C", run.data.tags
    summary = MlflowClient(tracking_uri=uri).download_artifacts(run.info.run_id, "posterior_summary.csv")
    names = [line.split(",")[0] for line in Path(summary).read_text().splitlines()[1:]]
    assert names[:3] == ["mu", "tau", "eta[0]"], names


def test_a_missing_model_function_is_one_line(tmp_path):
    uri = empty_store(tmp_path)
    assert_rejected(["run", "model=pyro", f"model.fn={EIGHT_SCHOOLS}:nothing", "method=nuts", f"tracking.uri={uri}"],
                    uri, "model.fn:", "has no function 'nothing'")
