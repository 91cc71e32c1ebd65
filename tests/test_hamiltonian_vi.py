"""method=hamiltonian_vi (Hamiltonian VI on a target) against known answers.

- The shared leapfrog has unit Jacobian (so the bound needs no log-determinant) and is reversible.
- On a correlated Gaussian, where mean-field VI (T = 0) cannot be exact, T = 4 transitions raise
  the bound towards log Z, both stay below it, and the importance-sampled evidence with the bound's
  integrand as weight recovers log Z within its error.
- The bound's gradient in the step sizes equals its central finite difference (same noise).
- A target whose density is not differentiable torch (the PDE) is refused in one line.
"""

from __future__ import annotations

import pytest
import torch
from cli_helpers import isolated_store, run_ok
from method_helpers import gen, infer

from bayesx.errors import BayesxError
from bayesx.methods.vi.hamiltonian_vi import HamiltonianChain, HamiltonianVI
from bayesx.nn.hamiltonian import leapfrog
from bayesx.targets.elliptic import EllipticInverse
from bayesx.targets.gaussian import Gaussian


@pytest.fixture(scope="module")
def correlated():
    return Gaussian(dim=2, kind="correlated", rho=0.9)


def test_leapfrog_has_unit_jacobian_and_is_reversible(correlated):
    step = torch.tensor([0.3, 0.2], dtype=torch.float64)

    def flow(state):
        z, v = leapfrog(correlated.log_prob, state[None, :2], state[None, 2:], step, 3, create_graph=True)
        return torch.cat([z[0], v[0]])

    state = torch.tensor([0.5, -1.0, 0.3, 0.7], dtype=torch.float64)
    jacobian = torch.autograd.functional.jacobian(flow, state)
    assert float(torch.linalg.det(jacobian)) == pytest.approx(1.0, abs=1e-10)
    out = flow(state).detach()
    back = flow(torch.cat([out[:2], -out[2:]])).detach()
    torch.testing.assert_close(back, torch.cat([state[:2], -state[2:]]))


@pytest.mark.slow  # a statistical test of several seconds: with the slow suite (CI runs both)
def test_transitions_raise_the_bound_towards_log_z(correlated):
    log_z = correlated.log_normalizer()
    options = dict(batch_size=128, iterations=1500, lr=0.01, num_draws=4000)
    mean_field = infer(HamiltonianVI(n_transitions=0, **options), correlated, seed=0).metrics
    hamiltonian = infer(HamiltonianVI(n_transitions=4, n_leapfrog=2, **options), correlated, seed=0).metrics
    assert mean_field["elbo_final"] < log_z and hamiltonian["elbo_final"] < log_z
    # mean-field's gap on this target is 0.5 log(1 / (1 - rho^2)) = 0.83 nats
    assert log_z - mean_field["elbo_final"] == pytest.approx(0.83, abs=0.05)
    assert hamiltonian["elbo_final"] > mean_field["elbo_final"] + 0.3
    assert abs(hamiltonian["log_evidence"] - log_z) < max(4 * hamiltonian["log_evidence_se"], 0.02)


def test_bound_gradient_in_the_step_sizes_matches_finite_differences(correlated):
    method = HamiltonianVI(n_transitions=2, n_leapfrog=2)
    chain = HamiltonianChain(torch.tensor([0.3, -0.2], dtype=torch.float64), method.settings)

    def bound() -> torch.Tensor:
        return chain.sample_and_log_weight(correlated, 32, gen(5), create_graph=True)[2].mean()

    (grad,) = torch.autograd.grad(bound(), chain.raw_step)
    h = 1e-6
    for index in [(0, 0), (1, 1)]:
        with torch.no_grad():
            chain.raw_step[index] += h
            up = float(bound())
            chain.raw_step[index] -= 2 * h
            down = float(bound())
            chain.raw_step[index] += h
        assert float(grad[index]) == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-7)


def test_a_density_outside_torch_is_refused_in_one_line():
    with pytest.raises(BayesxError, match=r"n_transitions > 0 needs second derivatives"):
        HamiltonianVI().check(EllipticInverse(mesh=3), 1)
    HamiltonianVI(n_transitions=0).check(EllipticInverse(mesh=3), 1)  # mean-field needs no second derivatives


def test_cli_records_a_run(tmp_path_factory):
    with isolated_store(tmp_path_factory, "hamiltonian_vi") as (_, uri):
        run = run_ok(uri, ["run", "method=hamiltonian_vi", "model=gaussian", "model.dim=3", "method.iterations=100",
                           "progress=false", "plots.n_coords=0"])
    assert run.data.tags["q_family"] == "hamiltonian:T=4,L=1"
    assert "log_evidence_err" in run.data.metrics and "elbo_final" in run.data.metrics
