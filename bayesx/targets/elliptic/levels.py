"""The forward model of the elliptic inverse problem on one mesh: a *level*.

A level solves -div(exp(u) grad p) = f with P2 elements on an n x n mesh and returns the misfit
of its 25 sensor values against the observations,

    l_n(u) = -1/2 sum_j ((y_j - (O_n p_n(R_n u))_j) / sigma)^2

where u is always the field on the model's own (fine) mesh and R_n restricts it to the level's
mesh (n divides the fine mesh, so the coarse mesh is nested in the fine one). Two restrictions,
``model.restriction``:

* ``projection`` (default): the L2 projection onto the coarse P2 space, R_n = M_n^-1 T_n with
  M_n the coarse mass matrix and T_n[i, j] = int phi^n_i phi_j (coarse against fine basis
  functions), both integrated exactly by the fine mesh's quadrature (a coarse P2 function is P2 on
  every fine triangle). It averages the field's fine-scale roughness instead of sampling it: on
  mesh 40's posterior the 5 x 5 level's log-likelihood error (after the adaptive error model) has
  sd 0.42 against 0.79 by injection, about what injection reaches only on the 10 x 10 mesh.
* ``injection``: every coarse P2 node is a fine one (both grids are {i / (2n)}), and the coarse
  field takes the fine field's values there.

R_n is linear, so a level's gradient with respect to u is R_n^T applied to its coarse adjoint
gradient (for injection: placed at the shared nodes, zero elsewhere).

The model's likelihood is the level of ``model.likelihood_mesh`` (its own mesh by default);
delayed-acceptance samplers (``method=dapcn``) use coarser levels as screens. Solves run per chain
with SuperLU (``sparse``) or dense LU (``dense``: LAPACK per chain on the CPU, one batched torch LU
on a GPU; dense.py); ``auto`` resolves per level (:func:`resolve_solver`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.targets.elliptic import problem
from bayesx.targets.elliptic.dense import csr_tensor
from bayesx.targets.elliptic.fem import P2Space


SMALL_SYSTEM_DOFS = 250  # auto on the CPU: dense LU up to this many unknowns (meshes up to 7 x 7), SuperLU above


def resolve_solver(solver: str, device: torch.device, n_dofs: int) -> str:
    """The solver ``auto`` means for a level of ``n_dofs`` unknowns: dense on a GPU; on the CPU dense for small
    systems, where LAPACK's LU beats SuperLU's fixed cost per call (4 chains on the 5 x 5 mesh, 121 unknowns:
    0.58 ms against 1.35 ms; 225 unknowns: 2.1 against 2.5), SuperLU above (289: 3.4 against 3.1)."""
    if solver != "auto":
        return solver
    return "dense" if device.type != "cpu" or n_dofs <= SMALL_SYSTEM_DOFS else "sparse"


def coarse_meshes_of(fine_mesh: int) -> list[int]:
    """The meshes whose P2 nodes are all nodes of the fine mesh: the divisors >= 2 below it."""
    return [n for n in range(2, fine_mesh) if fine_mesh % n == 0]


def level_mesh_problem(mesh, fine_mesh: int, fine_key: str = "model.mesh") -> str | None:
    """Why ``mesh`` cannot be a coarse level of ``fine_mesh`` (named ``fine_key``): a phrase completing "<key>", or None."""
    options = coarse_meshes_of(fine_mesh)
    hint = f"use one of {', '.join(map(str, options))}" if options else "use a finer model.mesh"
    if not isinstance(mesh, int) or isinstance(mesh, bool) or mesh < 2:
        return f"must be an integer >= 2 (squares per side), got {mesh!r}; {hint}"
    if mesh >= fine_mesh:
        return f"={mesh} is not coarser than {fine_key}={fine_mesh}; {hint}"
    if fine_mesh % mesh:
        return f"={mesh} does not divide {fine_key}={fine_mesh} (the coarse nodes must be nodes of the fine mesh); {hint}"
    return None


def injection(fine: P2Space, coarse: P2Space) -> np.ndarray:
    """Indices into the fine dofs of each coarse dof (the same point of the unit square)."""
    scale = 2 * fine.n  # fine P2 nodes sit at integer multiples of 1 / (2 n_fine)
    key = lambda xy: np.rint(xy[:, 0] * scale).astype(np.int64) * (scale + 1) + np.rint(xy[:, 1] * scale).astype(np.int64)  # noqa: E731
    fine_keys = key(fine.coords)
    order = np.argsort(fine_keys)
    coarse_keys = key(coarse.coords)
    found = order[np.searchsorted(fine_keys, coarse_keys, sorter=order)]
    if not np.allclose(fine.coords[found], coarse.coords, atol=1e-12):
        raise BayesxError(f"the {coarse.n} x {coarse.n} mesh's nodes are not nodes of the {fine.n} x {fine.n} mesh")
    return found


class Injection:
    """R u = u at the coarse nodes (indices into the fine dofs, :func:`injection`)."""

    def __init__(self, fine: P2Space, coarse: P2Space, device):
        self.index = torch.as_tensor(injection(fine, coarse), device=device)

    def __call__(self, u: Tensor) -> Tensor:
        return u[:, self.index]

    def adjoint(self, g: Tensor, fine_dim: int) -> Tensor:
        """R^T g for rows g (n, coarse dofs)."""
        full = g.new_zeros((g.shape[0], fine_dim))
        full[:, self.index] = g
        return full


class L2Projection:
    """R u = M^-1 T u, the L2 projection of a fine P2 field onto the coarse P2 space (the module docstring):
    T is kept sparse, M by its Cholesky factor."""

    def __init__(self, fine: P2Space, coarse: P2Space, device, dtype):
        x, y = fine.basis.mapping.F(fine.basis.X)
        points = np.stack([np.ravel(x), np.ravel(y)])  # the fine quadrature points, in fine.interp's row order
        weights = np.ravel(fine.basis.dx)
        coarse_at_points = coarse.basis.probes(points).tocsr()  # (fine n_quad, coarse dofs)
        weighted = coarse_at_points.T.multiply(weights[None, :]).tocsr()
        transfer = (weighted @ fine.interp).tocsr()  # T (coarse, fine)
        self.transfer, self.transfer_t = csr_tensor(transfer, device, dtype), csr_tensor(transfer.T, device, dtype)
        mass = (weighted @ coarse_at_points).toarray()
        self.mass_factor = torch.linalg.cholesky(torch.as_tensor(mass, device=device, dtype=dtype))

    def __call__(self, u: Tensor) -> Tensor:
        """R u for rows u (n, fine dofs)."""
        return torch.cholesky_solve(self.transfer @ u.T, self.mass_factor).T

    def adjoint(self, g: Tensor, fine_dim: int) -> Tensor:
        """R^T g = T^T M^-1 g for rows g (n, coarse dofs)."""
        return (self.transfer_t @ torch.cholesky_solve(g.T, self.mass_factor)).T


def make_restriction(kind: str, fine: P2Space, coarse: P2Space, device, dtype) -> Injection | L2Projection:
    """The restriction ``model.restriction`` names, from the fine to the nested coarse space."""
    return L2Projection(fine, coarse, device, dtype) if kind == "projection" else Injection(fine, coarse, device)


class ForwardLevel:
    """The misfit l_n(u) on an n x n mesh for fine fields u; see the module docstring."""

    def __init__(self, mesh: int, fine: P2Space, sensors: np.ndarray, observations: np.ndarray, noise_sd: float,
                 solver: str, device: torch.device, dtype: torch.dtype, restriction: str = "projection"):
        self.mesh, self.device, self.dtype = mesh, device, dtype
        self.space = fine if mesh == fine.n else P2Space(mesh)
        self.solver = resolve_solver(solver, device, self.space.n_dofs)
        self.fine_dim = fine.n_dofs
        self.restriction = None if mesh == fine.n else make_restriction(restriction, fine, self.space, device, dtype)
        self.obs = self.space.point_evaluation(sensors)
        self.obs_t = self.obs.T.tocsr()
        self.rhs = np.append(self.space.load_vector(problem.source), 0.0)
        self.observations, self.noise_sd = observations, noise_sd
        self._dense = None

    @property
    def linear_solver(self) -> str:
        """What solves this level's systems (the model's ``linear_solver`` tag)."""
        if self.solver == "sparse":
            return "superlu"
        return "lapack-lu" if self.device.type == "cpu" else "torch-batched-lu"

    def restrict(self, u: Tensor) -> Tensor:
        """R_n u for rows u (n, fine dofs)."""
        return u if self.restriction is None else self.restriction(u)

    def misfit(self, u: Tensor, need_grad: bool) -> tuple[Tensor, Tensor | None]:
        """l_n(u) and dl_n/du for each row of u (n, fine dofs); NaN (value and gradient) where a solve fails.
        Without the gradient, l_n is the Gaussian misfit of :meth:`predictions`."""
        if not need_grad:
            y = torch.as_tensor(self.observations, device=u.device, dtype=u.dtype)
            residual = (y - self.predictions(u)) / self.noise_sd
            return -0.5 * (residual * residual).sum(-1), None
        coarse = self.restrict(u)
        log_lik, grad = self._misfit_dense(coarse) if self.solver == "dense" else self._misfit_sparse(coarse)
        if self.restriction is not None:
            grad = self.restriction.adjoint(grad, u.shape[1])
        return log_lik, grad

    def _misfit_sparse(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """l_n and its adjoint gradient per row, one factorization each (SuperLU)."""
        u_np = u.detach().cpu().numpy().astype(np.float64)
        log_lik, grad = np.full(u_np.shape[0], np.nan), np.full(u_np.shape, np.nan)
        for row, field in enumerate(u_np):
            try:
                factorized, x = self._solve(field)
            except FloatingPointError:
                continue
            residual = (self.observations - self.obs @ x[:-1]) / self.noise_sd
            log_lik[row] = -0.5 * residual @ residual
            grad[row] = self._sensor_functional_gradient(factorized, x, residual / self.noise_sd)  # dl/du: w = r / sigma
        as_tensor = lambda a: torch.as_tensor(a, device=u.device, dtype=u.dtype)  # noqa: E731
        return as_tensor(log_lik), as_tensor(grad)

    def _dense_operators(self):
        if self._dense is None:
            from bayesx.targets.elliptic.dense import DenseOperators

            self._dense = DenseOperators(self.space, self.obs, self.rhs, self.observations, self.device, self.dtype)
        return self._dense

    def _misfit_dense(self, u: Tensor):
        return self._dense_operators().misfit_and_grad(u, self.noise_sd)

    def _solve(self, field: np.ndarray):
        """The factorized system for k = exp(field) and its solution (p, mu); FloatingPointError if it fails."""
        factorized = self.space.factorize(field)
        return factorized, factorized.solve(self.rhs)

    def predictions(self, u: Tensor) -> Tensor:
        """The sensor values O_n p_n(R_n u) for rows u (n, fine dofs); a row of NaN where a solve fails."""
        return self.predictions_at(self.restrict(u))

    def _sensor_functional_gradient(self, factorized, x: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """d(w . O_n p_n)/d(field) on this mesh for sensor weights w: one adjoint solve A lambda = [O_n^T w; 0] with
        the factorized (symmetric) system whose solution is x, then -lambda^T (dA/d field) x."""
        adjoint = factorized.solve(np.append(self.obs_t @ weights, 0.0))
        return -self.space.coefficient_gradient(factorized, x, adjoint)

    def prediction_jacobian(self, u: Tensor) -> Tensor:
        """d(O_n p_n(R_n u))/du (sensors, fine dofs) at one fine field u (fine dofs,): one factorization (SuperLU) and
        one adjoint solve per sensor (its unit weight), taken back to the fine dofs by R_n^T."""
        field = self.restrict(u.to(device=self.device, dtype=self.dtype)[None])[0].detach().cpu().numpy()
        factorized, x = self._solve(field.astype(np.float64))
        rows = np.stack([self._sensor_functional_gradient(factorized, x, unit) for unit in np.eye(self.obs.shape[0])])
        jacobian = torch.as_tensor(rows, device=self.device, dtype=self.dtype)
        return jacobian if self.restriction is None else self.restriction.adjoint(jacobian, self.fine_dim)

    def predictions_at(self, field: Tensor) -> Tensor:
        """The sensor values O_n p_n(field) for rows of the field at this mesh's nodes (n, its dofs)."""
        if self.solver == "dense":
            return self._dense_operators().predictions(field)
        coarse = field.detach().cpu().numpy().astype(np.float64)
        out = np.full((coarse.shape[0], self.obs.shape[0]), np.nan)
        for row, values in enumerate(coarse):
            try:
                out[row] = self.obs @ self._solve(values)[1][:-1]
            except FloatingPointError:
                continue
        return torch.as_tensor(out, device=field.device, dtype=field.dtype)

    def predict(self, u: np.ndarray) -> np.ndarray:
        """The sensor values for fine fields u (n, fine dofs); a clear error where a solve fails."""
        out = self.predictions(torch.as_tensor(u, device=self.device)).cpu().numpy()
        if not np.all(np.isfinite(out)):
            raise BayesxError("the PDE solve diverged for this field (no finite solution); is exp(u) finite and positive?")
        return out
