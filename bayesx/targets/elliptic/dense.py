"""A batched dense LU path for the elliptic model, in torch on any device (``model.solver=dense``).

The same algebra as fem.py (K.data = S k_q, k_q = exp(I u), the adjoint gradient
-I^T [k_q * S^T (lambda_rows * x_cols)]), with the saddle-point matrices of all chains formed
densely and factorized by one batched LU. On a GPU this trades O(N^3) arithmetic for parallelism;
on the CPU the sparse path is far cheaper beyond small meshes.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor


def csr_tensor(matrix: sp.csr_matrix, device, dtype) -> Tensor:
    """A torch CSR tensor: its products with dense matrices are ~20x faster than COO's on the CPU."""
    matrix = matrix.tocsr()
    matrix.sort_indices()
    as_long = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=device)  # noqa: E731
    with warnings.catch_warnings():  # "sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(as_long(matrix.indptr), as_long(matrix.indices),
                                       torch.as_tensor(matrix.data, device=device, dtype=dtype), matrix.shape)


class DenseOperators:
    def __init__(self, space, obs: sp.csr_matrix, rhs: np.ndarray, observations: np.ndarray, device, dtype):
        self.n_dofs, self.size = space.n_dofs, space.n_dofs + 1
        as_long = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long, device=device)  # noqa: E731
        self.k_rows, self.k_cols = as_long(space.k_rows), as_long(space.k_cols)
        self.k_flat = self.k_rows * self.size + self.k_cols
        on_boundary = np.flatnonzero(space.boundary)
        self.c_flat = torch.cat([as_long(on_boundary * self.size + self.n_dofs),
                                 as_long(self.n_dofs * self.size + on_boundary)])
        values = space.boundary[on_boundary]
        self.c_values = torch.as_tensor(np.concatenate([values, values]), device=device, dtype=dtype)
        self.interp = csr_tensor(space.interp, device, dtype)
        self.interp_t = csr_tensor(space.interp_t, device, dtype)
        self.stiffness = csr_tensor(space.stiffness_map, device, dtype)
        self.stiffness_t = csr_tensor(space.stiffness_map_t, device, dtype)
        self.obs = torch.as_tensor(obs.toarray(), device=device, dtype=dtype)
        self.rhs = torch.as_tensor(rhs, device=device, dtype=dtype)
        self.y = torch.as_tensor(observations, device=device, dtype=dtype)

    def _solve(self, u: Tensor):
        """The batched LU factors of A(exp(u)) for rows u, and the solutions x (batch, dofs + 1)."""
        batch = u.shape[0]
        k_q = torch.exp(self.interp @ u.T).T  # (batch, n_quad)
        matrix = torch.zeros(batch, self.size * self.size, device=u.device, dtype=u.dtype)
        matrix[:, self.k_flat] = (self.stiffness @ k_q.T).T
        matrix[:, self.c_flat] = self.c_values
        lu, pivots, info = torch.linalg.lu_factor_ex(matrix.view(batch, self.size, self.size))
        x = torch.linalg.lu_solve(lu, pivots, self.rhs.expand(batch, -1).unsqueeze(-1)).squeeze(-1)
        return k_q, lu, pivots, info, x

    def predictions(self, u: Tensor) -> Tensor:
        """The sensor values O p(u) for rows u (batch, dofs); NaN rows where a factorization fails."""
        _, _, _, info, x = self._solve(u)
        values = x[:, : self.n_dofs] @ self.obs.T
        failed = (info != 0) | ~torch.isfinite(values).all(-1)
        return torch.where(failed[:, None], torch.full_like(values, float("nan")), values)

    def misfit_and_grad(self, u: Tensor, noise_sd: float) -> tuple[Tensor, Tensor]:
        """l(u) and its adjoint gradient for rows u, NaN where a factorization fails (the values alone:
        :meth:`predictions`)."""
        batch = u.shape[0]
        k_q, lu, pivots, info, x = self._solve(u)
        residual = (self.y - x[:, : self.n_dofs] @ self.obs.T) / noise_sd
        log_lik = -0.5 * (residual * residual).sum(-1)
        failed = (info != 0) | ~torch.isfinite(log_lik)
        log_lik = torch.where(failed, torch.full_like(log_lik, float("nan")), log_lik)
        g = torch.cat([(residual / noise_sd) @ self.obs, torch.zeros(batch, 1, device=u.device, dtype=u.dtype)], 1)
        adjoint = torch.linalg.lu_solve(lu, pivots, g.unsqueeze(-1)).squeeze(-1)  # A is symmetric
        weights = adjoint[:, self.k_rows] * x[:, self.k_cols]
        inner = k_q * (self.stiffness_t @ weights.T).T
        grad = -(self.interp_t @ inner.T).T.contiguous()  # rows, as the sparse path returns them
        grad = torch.where(failed[:, None], torch.full_like(grad, float("nan")), grad)
        return log_lik, grad
