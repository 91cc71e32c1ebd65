"""The constrained parameters' maps (bayesx.targets.parameters): each lands in its support, its log-Jacobian equals
the log |det| of autograd's Jacobian of the map onto the value's free coordinates, its inverse undoes it, and it
works on a batch as on one point; bad declarations are one line."""

from __future__ import annotations

import pytest
import torch

from bayesx.errors import BayesxError
from bayesx.targets import parameters as P

F64 = torch.float64

DECLARED = {"mu": "real", "tau": "positive", "eta": "real[3]", "s": "interval(-1, 4)", "u": "unit_interval",
            "lo": "greater_than(2)", "hi": "less_than(-1)", "c": "ordered[4]", "d": "positive_ordered[3]",
            "w": "simplex[4]", "L": "corr_cholesky[4]", "S": "positive_definite[3]", "m": "real[2, 2]"}


def _free(p: P.Parameter, y: torch.Tensor) -> torch.Tensor:
    """The value's free coordinates (as many as the unconstrained ones): a simplex without its last weight, a
    correlation Cholesky factor's strict lower triangle, a covariance matrix's lower triangle."""
    if p.kind == "simplex":
        return y[:-1]
    k = p.shape[0] if p.kind in P.MATRICES else 0
    if p.kind == "corr_cholesky":
        rows, cols = torch.tril_indices(k, k, -1)
        return y[rows, cols]
    if p.kind == "positive_definite":
        rows, cols = torch.tril_indices(k, k)
        return y[rows, cols]
    return y.reshape(-1)


@pytest.mark.parametrize("name", list(DECLARED))
def test_each_map_has_the_log_jacobian_autograd_finds_and_its_inverse_undoes_it(name):
    (p,) = P.parse({name: DECLARED[name]})
    x = 0.8 * torch.randn(p.size, generator=torch.Generator().manual_seed(len(name)), dtype=F64)
    values, log_det = P.constrain((p,), x)
    y = values[name]
    assert tuple(y.shape) == p.shape
    jacobian = torch.autograd.functional.jacobian(lambda v: _free(p, P.constrain((p,), v)[0][name]), x)
    expected = torch.linalg.slogdet(jacobian.reshape(p.size, p.size))[1] if p.size else torch.tensor(0.0, dtype=F64)
    torch.testing.assert_close(log_det, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(P.unconstrain((p,), {name: y.tolist()}, torch.float64), x, rtol=1e-8, atol=1e-8)


def test_the_values_lie_in_their_supports_far_out_and_on_a_batch():
    params = P.parse(DECLARED)
    x = 3.0 * torch.randn(5, P.dimension(params), generator=torch.Generator().manual_seed(0), dtype=F64)
    values, log_det = P.constrain(params, x)
    assert log_det.shape == (5,)
    assert (values["tau"] > 0).all() and ((values["s"] > -1) & (values["s"] < 4)).all()
    assert (values["lo"] > 2).all() and (values["hi"] < -1).all()
    assert (torch.diff(values["c"]) > 0).all() and (values["d"] > 0).all() and (torch.diff(values["d"]) > 0).all()
    torch.testing.assert_close(values["w"].sum(-1), torch.ones(5, dtype=F64))
    corr = values["L"] @ values["L"].transpose(-1, -2)
    torch.testing.assert_close(torch.diagonal(corr, dim1=-2, dim2=-1), torch.ones(5, 4, dtype=F64))
    assert (torch.linalg.eigvalsh(values["S"]) > 0).all()
    one, one_det = P.constrain(params, x[2])  # one point as a row of the batch
    for name in values:
        torch.testing.assert_close(one[name], values[name][2])
    torch.testing.assert_close(one_det, log_det[2])
    flat = P.flatten(params, values)
    assert flat.shape == (5, len(P.reported_names(params)))


def test_reported_names_follow_the_shapes():
    params = P.parse({"tau": "positive", "eta": "real[2]", "L": "corr_cholesky[2]", "w": "simplex[3]"})
    assert P.reported_names(params) == ["tau", "eta[0]", "eta[1]", "L[0,0]", "L[0,1]", "L[1,0]", "L[1,1]",
                                        "w[0]", "w[1]", "w[2]"]
    assert P.dimension(params) == 1 + 2 + 1 + 2


@pytest.mark.parametrize("declared, message", [
    ({"tau": "postive"}, "is not a support; give one of"),
    ({"w": "simplex"}, "simplex takes one size"),
    ({"s": "interval(3, 1)"}, "low < high"),
    ({"eta": "real[0]"}, "a shape is positive integers"),
    ({"a b": "real"}, "not a Python name"),
    ({"tau": "positive(2)"}, "takes no bounds"),
    ({}, "must map each parameter"),
])
def test_a_bad_declaration_is_one_line_naming_it(declared, message):
    with pytest.raises(BayesxError, match=message):
        P.parse(declared)


def test_an_initial_value_outside_its_support_or_misshapen_is_one_line():
    params = P.parse({"tau": "positive", "w": "simplex[3]"})
    with pytest.raises(BayesxError, match="model.init.tau=.* is outside its support"):
        P.unconstrain(params, {"tau": -1.0, "w": [0.2, 0.3, 0.5]}, torch.float64)
    with pytest.raises(BayesxError, match="model.init.w has shape"):
        P.unconstrain(params, {"tau": 1.0, "w": [0.5, 0.5]}, torch.float64)
    with pytest.raises(BayesxError, match="missing w"):
        P.unconstrain(params, {"tau": 1.0}, torch.float64)
