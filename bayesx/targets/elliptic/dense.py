"""A batched dense LU path for the elliptic model, in torch on any device (``model.solver=dense``).

The same algebra as fem.py (K.data = S k_q, k_q = exp(I u), the adjoint gradient
-I^T [k_q * S^T (lambda_rows * x_cols)]), with the saddle-point matrices of all chains formed
densely in torch and factorized by LU. On a GPU one batched LU trades O(N^3) arithmetic for
parallelism; on the CPU each matrix goes to LAPACK's getrf through SciPy (:class:`LapackLU`), which
beats SuperLU's per-call overhead on small levels (a few hundred unknowns) and loses beyond.

Why not torch's LU on the CPU: its batched ``lu_factor_ex`` calls MKL's getrf from inside torch's
own OpenMP loop over the batch, and those nested calls deadlocked (py-spy: the main thread spinning
in MKL's thread team, ``mkl_lapack_dgetrf`` inside ``GOMP_parallel`` inside ``apply_lu_factor``) in
the slow test process, after earlier tests had run OpenMP regions; reproduced on demand there.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
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


BATCHED_LU_MAX_SIZE = 2048  # unknowns: above, one LU call per matrix (cuSOLVER's getrf) beats the batched kernel
MAX_BATCH_BYTES = 8 * 2**30  # the chains' dense matrices and their LU factors formed at once, at most


class TorchLU:
    """torch's LU of matrices (batch, n, n), for CUDA: one batched call for small matrices (on an H100, 256 chains of
    the 20 x 20 mesh, 1682 unknowns: 0.25 s per pCN iteration); above ``BATCHED_LU_MAX_SIZE`` one call per matrix,
    which torch hands to cuSOLVER's getrf (16 matrices of the 40 x 40 mesh's 6562 unknowns: 0.49 s against 0.81 s
    in one batched call, whose solves were 8x slower still; a pCN iteration of 4 chains: 0.12 s against 0.33 s)."""

    def __init__(self, matrices: Tensor):
        groups = [matrices] if matrices.shape[-1] <= BATCHED_LU_MAX_SIZE else matrices.split(1)
        factors = [torch.linalg.lu_factor_ex(group) for group in groups]
        self.factors = [(lu, pivots) for lu, pivots, _ in factors]
        self.failed = torch.cat([info for _, _, info in factors]) != 0

    def solve(self, rhs: Tensor) -> Tensor:
        """A^-1 b per matrix for right-hand sides (batch, n)."""
        parts = rhs.split([lu.shape[0] for lu, _ in self.factors])
        return torch.cat([torch.linalg.lu_solve(lu, pivots, b.unsqueeze(-1)).squeeze(-1)
                          for (lu, pivots), b in zip(self.factors, parts)])


class LapackLU:
    """LAPACK's getrf and getrs through SciPy, one matrix at a time, for CPU tensors (batch, n, n) of symmetric
    matrices (the saddle-point systems are: each row-major matrix is handed to Fortran as its transpose, without
    a copy, and factorized in place: the matrices are overwritten); see the module docstring for why not torch's
    LU. A non-finite entry or a zero pivot fails."""

    def __init__(self, matrices: Tensor):
        arrays = matrices.detach().numpy()
        getrf, self._getrs = scipy.linalg.get_lapack_funcs(("getrf", "getrs"), (arrays,))
        self.factors = []
        failed = np.zeros(len(arrays), dtype=bool)
        for i, matrix in enumerate(arrays):
            if np.isfinite(matrix).all():
                lu, pivots, info = getrf(matrix.T, overwrite_a=True)
                failed[i] = info != 0
            else:
                lu, pivots, failed[i] = None, None, True
            self.factors.append((lu, pivots))
        self.failed = torch.as_tensor(failed)
        self._dtype = matrices.dtype

    def solve(self, rhs: Tensor) -> Tensor:
        """A^-1 b per matrix for right-hand sides (batch, n); NaN where the factorization failed."""
        b = rhs.detach().numpy()
        out = np.full(b.shape, np.nan, dtype=b.dtype)
        for i, (lu, pivots) in enumerate(self.factors):
            if lu is not None:
                out[i] = self._getrs(lu, pivots, b[i])[0]
        return torch.as_tensor(out, dtype=self._dtype)


def factorize(matrices: Tensor) -> TorchLU | LapackLU:
    """The LU factors of matrices (batch, n, n): LAPACK per matrix on the CPU, torch's batched LU elsewhere."""
    return LapackLU(matrices) if matrices.device.type == "cpu" else TorchLU(matrices)


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

    def _chunks(self, u: Tensor) -> tuple[Tensor, ...]:
        """Rows of u in groups whose dense matrices and LU factors fit in MAX_BATCH_BYTES (256 chains of the 40 x 40
        mesh would need 176 GB at once)."""
        per_row = 2 * self.size * self.size * u.element_size()
        return u.split(max(1, MAX_BATCH_BYTES // per_row))

    def _solve(self, u: Tensor):
        """The LU factors of A(exp(u)) for rows u, and the solutions x (batch, dofs + 1)."""
        batch = u.shape[0]
        k_q = torch.exp(self.interp @ u.T).T  # (batch, n_quad)
        matrix = torch.zeros(batch, self.size * self.size, device=u.device, dtype=u.dtype)
        matrix[:, self.k_flat] = (self.stiffness @ k_q.T).T
        matrix[:, self.c_flat] = self.c_values
        factors = factorize(matrix.view(batch, self.size, self.size))
        return k_q, factors, factors.solve(self.rhs.expand(batch, -1))

    def predictions(self, u: Tensor) -> Tensor:
        """The sensor values O p(u) for rows u (batch, dofs); NaN rows where a factorization fails."""
        return torch.cat([self._predictions(chunk) for chunk in self._chunks(u)])

    def misfit_and_grad(self, u: Tensor, noise_sd: float) -> tuple[Tensor, Tensor]:
        """l(u) and its adjoint gradient for rows u, NaN where a factorization fails (the values alone:
        :meth:`predictions`)."""
        parts = [self._misfit_and_grad(chunk, noise_sd) for chunk in self._chunks(u)]
        return torch.cat([log_lik for log_lik, _ in parts]), torch.cat([grad for _, grad in parts])

    def _predictions(self, u: Tensor) -> Tensor:
        _, factors, x = self._solve(u)
        values = x[:, : self.n_dofs] @ self.obs.T
        failed = factors.failed | ~torch.isfinite(values).all(-1)
        return torch.where(failed[:, None], torch.full_like(values, float("nan")), values)

    def _misfit_and_grad(self, u: Tensor, noise_sd: float) -> tuple[Tensor, Tensor]:
        batch = u.shape[0]
        k_q, factors, x = self._solve(u)
        residual = (self.y - x[:, : self.n_dofs] @ self.obs.T) / noise_sd
        log_lik = -0.5 * (residual * residual).sum(-1)
        failed = factors.failed | ~torch.isfinite(log_lik)
        log_lik = torch.where(failed, torch.full_like(log_lik, float("nan")), log_lik)
        g = torch.cat([(residual / noise_sd) @ self.obs, torch.zeros(batch, 1, device=u.device, dtype=u.dtype)], 1)
        adjoint = factors.solve(g)  # A is symmetric
        weights = adjoint[:, self.k_rows] * x[:, self.k_cols]
        inner = k_q * (self.stiffness_t @ weights.T).T
        grad = -(self.interp_t @ inner.T).T.contiguous()  # rows, as the sparse path returns them
        grad = torch.where(failed[:, None], torch.full_like(grad, float("nan")), grad)
        return log_lik, grad
