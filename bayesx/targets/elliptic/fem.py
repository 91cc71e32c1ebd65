"""P2 finite elements for -div(k grad p) = f on the unit square (scikit-fem for the element data).

The weak form with a pure Neumann condition k grad p . n = 0 and the constraint
int_{boundary} p ds = 0, imposed by a scalar Lagrange multiplier mu, is the saddle-point system

    [ K(k)  c ] [p ]   [b]        K_ij = int k grad phi_i . grad phi_j dx
    [ c^T   0 ] [mu] = [0],       c_i  = int_{boundary} phi_i ds,   b_i = int f phi_i dx.

Assembly for a new coefficient costs one sparse product. With quadrature points x_eq (element e,
point q) and weights w_eq, every non-zero of K is linear in the coefficient there:

    K.data = S k_q,    S[(i,j), (e,q)] = w_eq grad phi_i(x_eq) . grad phi_j(x_eq)

S is built once per mesh. The coefficient is k = exp(u) with u interpolated from its values at
the degrees of freedom, k_q = exp(I u) (I: the P2 interpolation matrix to quadrature points).

For a functional J(p) with dJ/dp = g, the adjoint A lambda = g (A is symmetric) gives

    dJ/du = -I^T [ k_q * S^T (lambda_rows * x_cols) ]

where x = (p, mu) and (rows, cols) index the non-zeros of K: one extra solve with the same
factorization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from skfem import Basis, ElementTriP2, FacetBasis, LinearForm, MeshTri

from bayesx.errors import BayesxError

QUADRATURE_ORDER = 4  # exact for the P2 stiffness with a P2-interpolated coefficient's linear part


def unit_square_mesh(n: int) -> MeshTri:
    """n x n squares, each cut into two triangles; P2 dofs then form a (2n+1)^2 grid."""
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 2):
        raise BayesxError(f"model.mesh must be an integer >= 2 (squares per side), got {n!r}; set model.mesh=20")
    grid = np.linspace(0.0, 1.0, n + 1)
    return MeshTri.init_tensor(grid, grid)


@dataclass
class Factorized:
    """A factorized system for one coefficient field; solves with the same matrix are cheap."""

    lu: spla.SuperLU
    k_q: np.ndarray  # the coefficient at the quadrature points

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self.lu.solve(rhs)


class P2Space:
    """The P2 space of an n x n unit-square mesh with the operators the inverse problem needs."""

    def __init__(self, n: int):
        self.n = n
        self.mesh = unit_square_mesh(n)
        self.basis = Basis(self.mesh, ElementTriP2(), intorder=QUADRATURE_ORDER)
        self.n_dofs = int(self.basis.N)
        self.coords = np.asarray(self.basis.doflocs.T)  # (n_dofs, 2)
        self._build_interpolation()
        self._build_stiffness_map()
        facets = FacetBasis(self.mesh, ElementTriP2(), facets=self.mesh.boundary_facets(), intorder=QUADRATURE_ORDER)
        boundary = LinearForm(lambda v, w: v).assemble(facets)  # c_i = int_boundary phi_i ds
        on_boundary = np.zeros(self.n_dofs, dtype=bool)
        on_boundary[self.basis.get_dofs().all()] = True
        self.boundary = np.where(on_boundary, boundary, 0.0)  # drop 1e-17 rounding at interior neighbours
        self._build_pattern()

    # --- one-time precomputation --------------------------------------------------------------
    def _build_interpolation(self) -> None:
        """I (n_elements * n_quad, n_dofs): values at the quadrature points from values at the dofs."""
        basis = self.basis
        dofs = basis.element_dofs  # (n_local, n_elements)
        n_local, n_el = dofs.shape
        n_q = basis.dx.shape[1]
        values = np.stack([basis.basis[i][0].value for i in range(n_local)], axis=-1)  # (n_el, n_q, n_local)
        rows = np.repeat(np.arange(n_el * n_q), n_local)
        cols = np.broadcast_to(dofs.T[:, None, :], (n_el, n_q, n_local)).ravel()
        self.interp = sp.csr_matrix((values.ravel(), (rows, cols)), shape=(n_el * n_q, self.n_dofs))
        self.interp_t = self.interp.T.tocsr()
        self.n_quad = n_el * n_q

    def _build_stiffness_map(self) -> None:
        """S (nnz(K), n_quad) with K.data = S k_q, and the (row, col) of each non-zero of K."""
        basis = self.basis
        dofs = basis.element_dofs
        n_local, n_el = dofs.shape
        n_q = basis.dx.shape[1]
        grads = np.stack([basis.basis[i][0].grad for i in range(n_local)])  # (n_local, 2, n_el, n_q)
        local = np.einsum("iaeq,jaeq,eq->eijq", grads, grads, basis.dx)  # (n_el, n_local, n_local, n_q)
        rows = np.broadcast_to(dofs.T[:, :, None], (n_el, n_local, n_local)).astype(np.int64)
        cols = np.broadcast_to(dofs.T[:, None, :], (n_el, n_local, n_local)).astype(np.int64)
        keys, entry = np.unique((rows * self.n_dofs + cols).ravel(), return_inverse=True)  # sorted = CSR order
        quad = np.broadcast_to((np.arange(n_el)[:, None] * n_q + np.arange(n_q))[:, None, None, :], local.shape)
        self.stiffness_map = sp.csr_matrix((local.ravel(), (np.repeat(entry, n_q), quad.ravel())),
                                           shape=(keys.size, self.n_quad))
        self.stiffness_map_t = self.stiffness_map.T.tocsr()
        self.k_rows, self.k_cols = keys // self.n_dofs, keys % self.n_dofs

    def _build_pattern(self) -> None:
        """The CSC pattern of the saddle-point matrix and where K's and c's entries go in it."""
        n = self.n_dofs
        on_boundary = np.flatnonzero(self.boundary)
        rows = np.concatenate([self.k_rows, on_boundary, np.full(on_boundary.size, n)])
        cols = np.concatenate([self.k_cols, np.full(on_boundary.size, n), on_boundary])
        marker = sp.csc_matrix((np.arange(1, rows.size + 1, dtype=np.float64), (rows, cols)), shape=(n + 1, n + 1))
        marker.sort_indices()
        slot = np.empty(rows.size, dtype=np.int64)  # slot[entry] = its position in the CSC data
        slot[marker.data.astype(np.int64) - 1] = np.arange(rows.size)
        self._indices, self._indptr = marker.indices.copy(), marker.indptr.copy()
        self._k_slot, self._c_slot = slot[: self.k_rows.size], slot[self.k_rows.size:]
        self._c_values = np.concatenate([self.boundary[on_boundary], self.boundary[on_boundary]])

    # --- per-coefficient operations ----------------------------------------------------------
    def coefficient_at_quadrature(self, u: np.ndarray) -> np.ndarray:
        """k_q = exp(I u); overflow gives inf, which ``factorize`` reports as a failed solve."""
        with np.errstate(over="ignore"):
            return np.exp(self.interp @ u)

    def stiffness_values(self, k_q: np.ndarray) -> np.ndarray:
        """The non-zeros of K(k) in (k_rows, k_cols) order: one sparse product."""
        return self.stiffness_map @ k_q

    def saddle_matrix(self, k_q: np.ndarray) -> sp.csc_matrix:
        data = np.empty(self._indices.size)
        data[self._k_slot] = self.stiffness_values(k_q)
        data[self._c_slot] = self._c_values
        return sp.csc_matrix((data, self._indices, self._indptr), shape=(self.n_dofs + 1, self.n_dofs + 1))

    def factorize(self, u: np.ndarray) -> Factorized:
        """Sparse LU (SuperLU, minimum-degree ordering on A^T + A) of the system for k = exp(u)."""
        k_q = self.coefficient_at_quadrature(u)
        if not np.all(np.isfinite(k_q)):
            raise FloatingPointError("the coefficient exp(u) is not finite")
        try:
            lu = spla.splu(self.saddle_matrix(k_q), permc_spec="MMD_AT_PLUS_A")
        except RuntimeError as exc:  # "Factor is exactly singular"
            raise FloatingPointError(str(exc)) from None
        return Factorized(lu, k_q)

    def coefficient_gradient(self, factorized: Factorized, x: np.ndarray, adjoint: np.ndarray) -> np.ndarray:
        """d/du of adjoint^T A(exp(u)) x, i.e. I^T [k_q * S^T (adjoint_rows * x_cols)]."""
        weights = adjoint[self.k_rows] * x[self.k_cols]
        return self.interp_t @ (factorized.k_q * (self.stiffness_map_t @ weights))

    def load_vector(self, source) -> np.ndarray:
        """b_i = int f phi_i dx for a callable source(x, y) on arrays."""
        form = LinearForm(lambda v, w: source(w.x[0], w.x[1]) * v)
        return form.assemble(self.basis)

    def interpolate(self, function) -> np.ndarray:
        """A callable f(x, y) at the degrees of freedom (the P2 nodal interpolant)."""
        return np.asarray(function(self.coords[:, 0], self.coords[:, 1]), dtype=np.float64)

    def point_evaluation(self, points: np.ndarray) -> sp.csr_matrix:
        """O (n_points, n_dofs): the values of a P2 field at the given points."""
        return sp.csr_matrix(self.basis.probes(np.asarray(points, dtype=np.float64).T))

    def l2_norm(self, values: np.ndarray) -> float:
        """|| u_h ||_{L2} of a P2 field given at the dofs."""
        u_q = (self.interp @ values).reshape(self.basis.dx.shape)
        return float(np.sqrt(np.sum(u_q**2 * self.basis.dx)))

    def l2_error(self, values: np.ndarray, exact) -> float:
        """|| u_h - u ||_{L2} for a P2 field given at the dofs and a callable exact solution."""
        u_q = (self.interp @ values).reshape(self.basis.dx.shape)
        x, y = self.basis.mapping.F(self.basis.X)
        diff = u_q - exact(x, y)
        return float(np.sqrt(np.sum(diff**2 * self.basis.dx)))

