"""The C NUTS (bayesx/native/nuts.h) and the PyTorch NUTS (bayesx.kernels.nuts) are one algorithm, draw for draw.

From the same point, momentum, step size, metric and chains' seeds (every uniform is a function of a seed and
its index, bayesx.kernels.nuts.tree_uniforms and common.h's splitmix64_at), the two build the same trees and
return the same draw: position, log density and gradient to 1e-9, and the same tree depth, leapfrog steps,
divergence flag, mean acceptance statistic and energy at the draw. Checked transition by transition (each
transition starts both from the C kernel's last draw, so the chains never drift apart by rounding) on three
densities, with diagonal and dense metrics, at step sizes that give ordinary trees, divergences and trees
stopped at the maximum depth:

- a correlated Gaussian and a logistic regression, the C side on the hand-written logistic form
  (bayesx/native/logistic_form.h);
- Neal's funnel, the C side on the density compiled from its PyTorch code (bayesx.native.compiled).

Negative controls: one uniform read one place off, a seed with one bit flipped, a step size 1e-6 larger: each
makes the draws differ.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bayesx.data.classification import ClassificationData
from bayesx.kernels import backend, nuts
from bayesx.kernels.hmc import HMCState
from bayesx.kernels.metric import make_metric
from bayesx.native import compiled
from bayesx.native import logistic as native
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.logreg import LogisticRegression
from bayesx.targets.toy import Density

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler: the native kernels could not be built")

CHAINS = 4
TOL = dict(rtol=1e-9, atol=1e-9)
# (step size, max depth) in turn: ordinary trees, a step past the leapfrog's stability limit (divergences),
# a tiny step (trees stopped at the maximum depth)
SCHEDULES = {
    "gaussian": [(0.3, 5), (0.25, 5), (20.0, 5), (0.35, 5), (0.005, 4)],
    "logreg": [(0.4, 5), (0.3, 5), (20.0, 5), (0.5, 5), (0.002, 4)],
    "funnel": [(0.2, 5), (0.3, 5), (1.2, 5), (0.25, 5), (0.001, 4)],
}
COMPARED = ("position", "log_prob", "grad", "accept_prob", "moved", "energy", "divergent", "n_leaves", "depth")


def splitmix64(seed: int, n: int) -> int:
    """Output n of splitmix64 from ``seed`` (Steele, Lea and Flood 2014) in plain Python integers: the
    reference for the PyTorch int64 arithmetic."""
    mask = 2**64 - 1
    z = (seed + (n + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_tree_uniforms_are_splitmix64_outputs():
    """The PyTorch generator equals the integer definition (wrapping int64 products, logical shifts), for
    seeds of both signs; the uniforms lie strictly inside (0, 1) in both precisions."""
    seeds = torch.tensor([0, 1, -1, 2**63 - 1, -(2**63), 0x123456789ABCDEF], dtype=torch.int64)
    u = nuts.tree_uniforms(seeds, 5, 40, torch.float64)
    for c, seed in enumerate(seeds.tolist()):
        for i in range(40):
            m = splitmix64(seed % 2**64, 5 + i) >> 12
            assert u[i, c].item() == (m + 0.5) * 2.0**-52
    assert splitmix64(0, 0) == 0xE220A8397B1DCDAF  # the published first output from seed 0
    for dtype in (torch.float64, torch.float32):
        many = nuts.tree_uniforms(seeds, 0, 20000, dtype)
        assert bool((many > 0).all() and (many < 1).all())
        assert abs(float(many.double().mean()) - 0.5) < 0.01 and abs(float(many.double().var()) - 1 / 12) < 0.005


class Case:
    """A density with its C transition (``native(q, p, lp, grad, step, inv_mass, depth, seeds)``) and the target
    the PyTorch tree runs on."""

    def __init__(self, name, target, native_nuts, inv_mass, scale):
        self.name, self.target, self.native_nuts, self.inv_mass, self.scale = name, target, native_nuts, inv_mass, scale

    def start(self, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return self.scale * torch.randn(CHAINS, self.target.dim, generator=g, dtype=torch.float64)


def gaussian_case(dense: bool) -> Case:
    target = Gaussian(dim=5, kind="correlated", rho=0.9)
    form = target.density_form()
    inv_mass = target.cov.clone() * 0.8 if dense else torch.linspace(0.5, 1.5, 5, dtype=torch.float64)
    return Case("gaussian", target, lambda *a: native.nuts(form, *a), inv_mass, 1.0)


def logreg_case(dense: bool) -> Case:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 4))
    y = (rng.random(60) < 1 / (1 + np.exp(-x @ np.array([1.5, -1.0, 0.5, 0.0])))).astype(float)
    target = LogisticRegression(ClassificationData("t", x, y, x[:5], y[:5], "test", "generated"), prior_scale=2.0)
    form = target.density_form()
    k = target.dim
    inv_mass = (0.1 * torch.eye(k, dtype=torch.float64) + 0.02 * torch.ones(k, k, dtype=torch.float64)) if dense \
        else torch.full((k,), 0.12, dtype=torch.float64)
    return Case("logreg", target, lambda *a: native.nuts(form, *a), inv_mass, 0.3)


@pytest.fixture(scope="module")
def funnel_case(tmp_path_factory) -> Case:
    target = Density(name="funnel")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BAYESX_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        try:
            density = compiled.compiled_density(target.log_prob, target.dim, torch.float64)
        except compiled.NotCompiled as exc:
            pytest.skip(f"the funnel could not be compiled here: {exc}")
    return Case("funnel", target, density.nuts, torch.ones(target.dim, dtype=torch.float64), 0.5)


def pytorch_transition(case: Case, q, p, lp, grad, step, inv_mass, depth, seeds):
    state, info = nuts.transition(HMCState(q, lp, grad), p, seeds, backend.on_pytorch(case.target),
                                  nuts.NUTSParams(step, make_metric(inv_mass), depth))
    return dict(position=state.position, log_prob=state.log_prob, grad=state.grad, accept_prob=info.accept_prob,
                moved=info.accepted, energy=info.energy, divergent=info.divergent, n_leaves=info.n_grad_evals,
                depth=info.tree_depth)


def c_transition(case: Case, q, p, lp, grad, step, inv_mass, depth, seeds):
    out = case.native_nuts(q, p, lp, grad, step, inv_mass, depth, seeds)
    return dict(position=out.position, log_prob=out.log_prob, grad=out.grad, accept_prob=out.accept_prob,
                moved=out.moved, energy=out.energy, divergent=out.divergent, n_leaves=out.n_leaves, depth=out.depth)


def disagreement(a: dict, b: dict) -> list[str]:
    """The compared fields where two transitions' results differ beyond rounding."""
    wrong = []
    for key in COMPARED:
        x, y = a[key], b[key]
        if x.dtype in (torch.bool, torch.long):
            same = torch.equal(x, y)
        else:
            same = bool(torch.isclose(x, y, **TOL).all())
        if not same:
            wrong.append(key)
    return wrong


def run_both(case: Case, transitions: int, seed: int = 0, c_step_factor: float = 1.0) -> tuple[list, dict]:
    """``transitions`` transitions of both kernels from the same inputs, each from the C kernel's last draw; the
    disagreements per transition and what the trees did (divergent transitions, capped trees, depths)."""
    g = torch.Generator().manual_seed(seed + 100)
    metric = make_metric(case.inv_mass)
    q = case.start(seed)
    lp, grad = case.target.log_prob_and_grad(q)
    schedule = SCHEDULES[case.name]
    disagreements, seen = [], {"divergent": 0, "capped": 0, "depths": set(), "moved": 0}
    for t in range(transitions):
        step, depth = schedule[t % len(schedule)]
        p = torch.randn(CHAINS, q.shape[1], generator=g, dtype=torch.float64)
        p = p @ metric.chol_inv if metric.dense else p * metric.chol_inv
        seeds = torch.randint(-(2**63), 2**63 - 1, (CHAINS,), generator=g, dtype=torch.int64)
        ours = c_transition(case, q, p, lp, grad, step * c_step_factor, case.inv_mass, depth, seeds)
        theirs = pytorch_transition(case, q, p, lp, grad, step, case.inv_mass, depth, seeds)
        disagreements.append(disagreement(ours, theirs))
        seen["divergent"] += int(ours["divergent"].sum())
        seen["capped"] += int((ours["depth"] == depth).sum())
        seen["moved"] += int(ours["moved"].sum())
        seen["depths"] |= set(ours["depth"].tolist())
        q, lp, grad = ours["position"], ours["log_prob"], ours["grad"]
    return disagreements, seen


def assert_same_draws(case: Case, transitions: int):
    disagreements, seen = run_both(case, transitions)
    bad = [(t, keys) for t, keys in enumerate(disagreements) if keys]
    assert not bad, f"{case.name}: the C and PyTorch trees differ at transitions {bad[:5]} of {transitions}"
    # the comparison covered what it claims: divergences, capped trees, trees of several depths, moves
    n = transitions * CHAINS
    assert seen["divergent"] >= n // 10 and seen["capped"] >= n // 10, seen
    assert len(seen["depths"]) >= 3 and seen["moved"] >= n // 2, seen


@pytest.mark.parametrize("dense", [False, True], ids=["diagonal", "dense"])
def test_gaussian_draw_for_draw(dense):
    assert_same_draws(gaussian_case(dense), 30)


@pytest.mark.parametrize("dense", [False, True], ids=["diagonal", "dense"])
def test_logistic_regression_draw_for_draw(dense):
    assert_same_draws(logreg_case(dense), 30)


def test_compiled_funnel_draw_for_draw(funnel_case):
    assert_same_draws(funnel_case, 30)


def mostly_differ(disagreements: list, transitions: int) -> bool:
    return sum(1 for keys in disagreements if "position" in keys) > transitions // 2


def test_a_changed_step_size_makes_the_draws_differ():
    """Negative control: a step 1e-6 larger in C than in PyTorch gives other draws (positions differ
    by more than 1e-9 in most transitions)."""
    disagreements, _ = run_both(gaussian_case(False), 12, c_step_factor=1 + 1e-6)
    assert mostly_differ(disagreements, 12), disagreements


def test_a_perturbed_uniform_makes_the_draws_differ(monkeypatch):
    """Negative controls: the PyTorch tree reading each subtree's uniforms one place off, and a seed with
    one bit flipped, give other trees and draws."""
    case = gaussian_case(False)
    correct = nuts.uniform_index
    monkeypatch.setattr(nuts, "uniform_index", lambda depth, j: correct(depth, j) + 1)
    disagreements, _ = run_both(case, 12)
    assert mostly_differ(disagreements, 12), disagreements
    monkeypatch.setattr(nuts, "uniform_index", correct)
    real = nuts.transition
    monkeypatch.setattr(nuts, "transition", lambda state, p0, seeds, *rest: real(state, p0, seeds ^ 1, *rest))
    disagreements, _ = run_both(case, 12)
    assert mostly_differ(disagreements, 12), disagreements


def test_a_u_turn_rule_without_the_checks_across_halves_is_told_apart(monkeypatch):
    """Negative control of the U-turn rule: PyTorch trees that check only each merged whole (Hoffman and
    Gelman's and Betancourt's criterion without Stan's checks across the halves) stop elsewhere than C's."""
    monkeypatch.setattr(nuts, "merge_turns", lambda earlier, later: nuts.is_turning(
        earlier.rho + later.rho, earlier.first_velocity, later.last_velocity))
    disagreements, _ = run_both(gaussian_case(False), 12)
    assert any("n_leaves" in keys for keys in disagreements), disagreements


def test_a_chain_is_the_same_whichever_backend_builds_its_trees():
    """nuts.step draws the momentum and then the chains' seeds from the run's generator whichever backend
    builds the trees, so a chain of 20 transitions is the same with the C trees and with the PyTorch trees
    (forced by a backend that offers no native transition). Negative control: another generator seed."""
    target = gaussian_case(False).target
    params = nuts.NUTSParams(0.3, make_metric(torch.linspace(0.5, 1.5, 5, dtype=torch.float64)), 8)

    def chain(seed: int, density) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        state = nuts.init(torch.randn(CHAINS, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
                          density)
        positions = []
        for _ in range(20):
            state, _ = nuts.step(state, density, params, g)
            positions.append(state.position)
        return torch.stack(positions)

    prepared = backend.prepare(target, backend.Workload(torch.zeros(CHAINS, 5, dtype=torch.float64), calls=10**6))
    assert prepared.nuts_transition is not None, prepared.name  # the C trees are offered
    native_transition, native_calls = prepared.nuts_transition, []

    def counted(*args, **kwargs):
        out = native_transition(*args, **kwargs)
        native_calls.append(out is not None)
        return out
    prepared.nuts_transition = counted
    with_c = chain(5, prepared)
    assert native_calls and all(native_calls)  # the C trees ran
    on_pytorch = backend.on_pytorch(target)
    assert on_pytorch.nuts_transition is None
    torch.testing.assert_close(chain(5, on_pytorch), with_c, **TOL)
    assert not torch.isclose(chain(6, on_pytorch), with_c, **TOL).all()
