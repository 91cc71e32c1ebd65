"""L-BFGS with a strong-Wolfe line search, as a function of a flat tensor (Nocedal and Wright, *Numerical
Optimization*, 2nd ed. 2006: Algorithm 7.4's two-loop recursion for the direction, Algorithm 3.5's line search).

The iteration is ``torch.optim.LBFGS(line_search_fn="strong_wolfe").step`` operation for operation (the same
tensor operations in the same order, and torch's own line search, ``torch.optim.lbfgs._strong_wolfe``), so it
reaches the same iterates bit for bit (``tests/test_lbfgs.py`` checks it against torch's optimizer). It exists
because torch's optimizer classes load ``torch._dynamo`` when they are constructed (their ``add_param_group`` is
wrapped by ``torch._disable_dynamo``): 1.3-3 s on this machine, the largest fixed cost of a Laplace start (issue
56); a function of a tensor loads nothing.

From x_0, with g_k the gradient: the first direction is -g_0 and its step min(1, 1 / |g_0|_1) lr; later
directions are -H_k g_k, H_k the inverse-Hessian estimate from the last ``history_size`` pairs (s, y) = (x_(k+1) -
x_k, g_(k+1) - g_k) with y's > 1e-10, scaled by y's / y'y, and the step starts at lr; each step is chosen by the
strong-Wolfe search. It stops after ``max_iter`` iterations or ``max_eval`` evaluations, where max |g| <=
``tolerance_grad``, where the directional derivative g'd > -``tolerance_change``, or where the step or the change
of the objective falls below ``tolerance_change``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.optim.lbfgs import _strong_wolfe

Objective = Callable[[Tensor], tuple[float, Tensor]]
"""x (n,) -> (f(x), its gradient (n,)): the function to minimize."""


def minimize(objective: Objective, x: Tensor, *, max_iter: int, tolerance_grad: float, tolerance_change: float,
             history_size: int, lr: float = 1.0, max_eval: int | None = None) -> tuple[Tensor, int]:
    """Minimize ``objective`` from ``x`` (n,) by L-BFGS with a strong-Wolfe line search; returns the last iterate and
    the number of evaluations of ``objective``. ``max_eval`` defaults to 1.25 ``max_iter``, as torch's."""
    max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
    x = x.detach().clone()

    def evaluate(point: Tensor) -> tuple[float, Tensor]:
        with torch.enable_grad():  # as torch's step calls its closure
            return objective(point)

    def directional(x0: Tensor, step: float, direction: Tensor) -> tuple[float, Tensor]:
        return evaluate(torch.add(x0, direction, alpha=step))

    with torch.no_grad():
        loss, flat_grad = evaluate(x)
        evals = 1
        if flat_grad.abs().max() <= tolerance_grad:
            return x, evals
        old_dirs: list[Tensor] = []
        old_stps: list[Tensor] = []
        ro: list[Tensor] = []
        al: list[Tensor | None] = [None] * history_size
        h_diag: Tensor | float = 1
        d = t = prev_flat_grad = None
        for n_iter in range(1, max_iter + 1):
            if n_iter == 1:
                d = flat_grad.neg()
            else:
                y = flat_grad.sub(prev_flat_grad)
                s = d.mul(t)
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                q = flat_grad.neg()
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q.add_(old_dirs[i], alpha=-al[i])
                d = r = torch.mul(q, h_diag)
                for i in range(len(old_dirs)):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r.add_(old_stps[i], alpha=al[i] - be_i)
            prev_flat_grad = flat_grad.clone(memory_format=torch.contiguous_format)
            prev_loss = loss
            t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr if n_iter == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break
            loss, flat_grad, t, ls_evals = _strong_wolfe(directional, x.clone(memory_format=torch.contiguous_format),
                                                         t, d, loss, flat_grad, gtd, max_ls=max_eval - evals)
            x.add_(d, alpha=t)
            evals += ls_evals
            if n_iter == max_iter or evals >= max_eval or flat_grad.abs().max() <= tolerance_grad:
                break
            if d.mul(t).abs().max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
    return x, evals
