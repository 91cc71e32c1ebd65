"""bayesx.methods.common.lbfgs: torch's L-BFGS iteration as a function. It reaches torch.optim.LBFGS's iterates bit
for bit (the same operations in the same order), it finds known minima, a run of it loads no torch._dynamo, and a
negative control: a different history size (another algorithm's iterates) is told apart by the same comparison."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bayesx.methods.common import lbfgs


def rosenbrock_rows(x: torch.Tensor) -> torch.Tensor:
    """Sum over rows of the 2-d Rosenbrock function of each row of x (rows, 2): minimum 0 at (1, 1)."""
    return (100.0 * (x[:, 1] - x[:, 0] ** 2) ** 2 + (1.0 - x[:, 0]) ** 2).sum()


def objective_of(f, shape):
    def objective(flat):
        x = flat.view(shape).detach().requires_grad_(True)
        value = f(x)
        (grad,) = torch.autograd.grad(value, x)
        return float(value.detach()), grad.reshape(-1)
    return objective


def torch_lbfgs(f, start, history_size=20, max_iter=200):
    q = start.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS([q], lr=1.0, max_iter=max_iter, tolerance_grad=1e-8, tolerance_change=1e-12,
                            history_size=history_size, line_search_fn="strong_wolfe")
    calls = 0

    def closure():
        nonlocal calls
        calls += 1
        opt.zero_grad()
        value = f(q)
        value.backward()
        return value

    opt.step(closure)
    return q.detach(), calls


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_iterates_are_torch_lbfgs_bit_for_bit_and_a_different_history_is_told_apart(seed):
    start = torch.randn(4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 1.5
    theirs, their_calls = torch_lbfgs(rosenbrock_rows, start, max_iter=30)  # stopped early: the path, not the end
    mine, my_calls = lbfgs.minimize(objective_of(rosenbrock_rows, start.shape), start.reshape(-1), max_iter=30,
                                    tolerance_grad=1e-8, tolerance_change=1e-12, history_size=20)
    assert my_calls == their_calls
    assert torch.equal(mine.view(start.shape), theirs)
    other, _ = torch_lbfgs(rosenbrock_rows, start, history_size=2, max_iter=30)  # the control
    assert not torch.equal(other, theirs)


def test_it_finds_the_minimum_of_a_quadratic_and_of_rosenbrock():
    a = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=torch.float64)
    b = torch.tensor([1.0, -1.0], dtype=torch.float64)
    quadratic = objective_of(lambda x: 0.5 * x @ a @ x - b @ x, (2,))
    found, _ = lbfgs.minimize(quadratic, torch.zeros(2, dtype=torch.float64), max_iter=100, tolerance_grad=1e-10,
                              tolerance_change=1e-14, history_size=10)
    assert torch.allclose(found, torch.linalg.solve(a, b), atol=1e-8)
    start = torch.full((3, 2), -1.2, dtype=torch.float64)
    found, evals = lbfgs.minimize(objective_of(rosenbrock_rows, start.shape), start.reshape(-1), max_iter=500,
                                  tolerance_grad=1e-9, tolerance_change=1e-14, history_size=20)
    assert torch.allclose(found, torch.ones(6, dtype=torch.float64), atol=1e-6) and 10 < evals <= 625


def test_a_mode_search_loads_no_dynamo():
    """torch.optim's optimizers load torch._dynamo when constructed (1.3-3 s); find_mode does not. The control: the
    same check sees dynamo once a torch optimizer is made."""
    code = ("import sys, torch\n"
            "from bayesx.methods.common.optimize import find_mode\n"
            "from bayesx.kernels import backend\n"
            "from bayesx.targets.gaussian import Gaussian\n"
            "start = torch.ones(2, 3, dtype=torch.float64)\n"
            "density = backend.prepare(Gaussian(dim=3), backend.Workload(start, 10), 'never')\n"
            "find_mode(density, start)\n"
            "print('torch._dynamo' in sys.modules)\n"
            "torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
