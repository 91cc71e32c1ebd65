"""Cholesky factorization and triangular solves as column loops of plain tensor operations, for tracing.

AOTInductor has no C shim for ``linalg_cholesky_ex`` or ``linalg_solve_triangular``: it runs them through a
proxy executor that only its C++ package loader provides, so a compiled density that factorizes a matrix (a
Gaussian process's kernel) cannot be called from the C kernels. Traced with these decompositions instead
(``make_fx(..., decomposition_table=DECOMPOSITIONS)``), the factorization becomes n steps of matrix-vector
products, square roots and divisions, which AOTInductor compiles like any arithmetic. For the small matrices
of a density (tens of rows) this costs about what LAPACK's call overhead does; the matrix size is fixed at
trace time, so the loop unrolls.

    cholesky_ex(A)                L (lower) with L L^T = A, and info: 0 where A is positive definite,
                                  otherwise the 1-based index of the first non-positive pivot (L is then NaN
                                  from that column on, where LAPACK leaves it partial: densities reject both)
    solve_triangular(A, B, ...)   X with A X = B (left) or X A = B, A triangular, by substitution

Column j of the Cholesky factor (Golub and Van Loan, Matrix Computations, Algorithm 4.2.1, the gaxpy form):
v = A[:, j] - L[:, :j] L[j, :j]^T, L[j, j] = sqrt(v_j), L[i, j] = v_i / L[j, j] for i > j.
"""

from __future__ import annotations

import torch
from torch import Tensor

aten = torch.ops.aten


UNROLL_UP_TO = 64
"""Matrices up to this size are unrolled (the traced graph grows as n^2 operations); larger ones keep the LAPACK
call, and their density is refused at compile time with the proxy executor's one line."""


def cholesky_ex(a: Tensor, upper: bool = False, check_errors: bool = False) -> tuple[Tensor, Tensor]:
    n = a.shape[-1]
    if n > UNROLL_UP_TO:
        return NotImplemented
    if upper:  # LAPACK reads the triangle it is asked for
        a = a.mT
    rows = torch.arange(n, device=a.device)
    columns: list[Tensor] = []
    info = torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    for j in range(n):
        v = a[..., :, j]
        if columns:
            done = torch.stack(columns, -1)  # (..., n, j)
            v = v - (done @ done[..., j, :, None])[..., 0]
        pivot = v[..., j]
        bad = ~(pivot > 0)
        info = torch.where(bad & (info == 0), torch.full_like(info, j + 1), info)
        column = v / torch.sqrt(pivot)[..., None]
        columns.append(torch.where(rows >= j, column, torch.zeros_like(column)))
    factor = torch.stack(columns, -1)
    return (factor.mT if upper else factor), info


def solve_triangular(a: Tensor, b: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    n = a.shape[-1]
    if n > UNROLL_UP_TO:
        return NotImplemented
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return solve_triangular(a.mT, b.mT, upper=not upper, unitriangular=unitriangular).mT
    order = range(n - 1, -1, -1) if upper else range(n)
    solved: dict[int, Tensor] = {}
    for i in order:
        row = b[..., i, :]
        known = sorted(solved)
        if known:
            coefficients = a[..., i, known]  # (..., k)
            values = torch.stack([solved[k] for k in known], -2)  # (..., k, m)
            row = row - (coefficients[..., None, :] @ values)[..., 0, :]
        solved[i] = row if unitriangular else row / a[..., i, i, None]
    return torch.stack([solved[i] for i in range(n)], -2)


DECOMPOSITIONS = {
    aten.linalg_cholesky_ex.default: cholesky_ex,
    aten.linalg_solve_triangular.default: solve_triangular,
}
