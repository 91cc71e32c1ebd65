"""The elliptic-PDE inverse problem of Deep MCMC sec. 4.2 as a target of the runner (``model=elliptic``).

Infer the log-transmissivity u (P2 values at the dofs of a ``mesh`` x ``mesh`` grid) from 25 noisy
pressure readings, -div(exp(u) grad p) = f, with

    log pi(u | y) = l(u) + log N(u; 0, C) + const,   l(u) = -1/2 sum_j ((y_j - (O p(u))_j) / sigma)^2

l is the negative data misfit without the Gaussian normalizing constant (what the published
log-likelihood -7.47 measures). Its gradient costs one adjoint solve with the same factorization
(see fem.py). With ``whiten=true`` the parameter is v with u = L v (C = L L^T), the prior is
N(0, I) and grad_v = L^T grad_u: the parameterization in which HMC's identity mass fits the prior.

The data are generated from the true field on a mesh twice as fine (no inverse crime) with seeded
noise. Solves run per chain with SuperLU on the CPU (``solver=sparse``) or by dense LU on any device
(``solver=dense``: LAPACK per chain on the CPU, batched in torch on a GPU); ``auto`` takes dense on
CUDA and, on the CPU, for levels of at most 250 unknowns (levels.resolve_solver).

``likelihood_mesh`` (default: ``mesh``) evaluates l on a coarser mesh that divides ``mesh``, the
field restricted to it (``restriction``: its L2 projection by default, or injection; levels.py): a
cheaper but *different*, approximate posterior, tagged and
reported as such. Every mesh dividing ``mesh`` is available as a level, ``level_log_likelihood(q, n)``
and its sensor values ``level_predictions(q, n)`` (with ``sensor_data()``, what the adaptive error
model of delayed-acceptance samplers needs), for ``method=dapcn``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
from torch import Tensor

from bayesx.data.registry import data_dir
from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, InvalidSetting, Positive, Settings
from bayesx.targets.base import Capabilities, CoarseLevels, Evaluation, GaussianPrior, TargetBase
from bayesx.targets.elliptic import problem
from bayesx.targets.elliptic.fem import P2Space
from bayesx.targets.elliptic.levels import ForwardLevel, level_mesh_problem
from bayesx.targets.elliptic.prior import GaussianFieldPrior, cholesky_factor, circulant_sampler

FIELD_PROBES = np.array([[0.3, 0.3], [0.5, 0.5], [0.7, 0.3], [0.7, 0.7], [0.3, 0.7]])  # dofs whose ESS is reported


@dataclass(frozen=True)
class EllipticSettings(Settings):
    mesh: Annotated[int, AtLeast(2)] = 20  # squares per side: (2 mesh + 1)^2 P2 dofs
    prior_sd: Annotated[float, Positive()] = 1.25  # sigma_u of the exponential covariance kernel
    prior_length: Annotated[float, Positive()] = 0.0625  # its length scale s0
    snr: Annotated[float, Positive()] = problem.SNR  # noise sd = max|u0| / snr
    noise_sd: Annotated[float | None, Positive()] = None  # overrides the snr rule
    data_mesh_factor: Annotated[int, AtLeast(1)] = 2  # data come from a mesh this many times finer
    data_seed: Annotated[int, AtLeast(0)] = 2017
    whiten: bool = False  # sample v with u = L v
    solver: Literal["auto", "sparse", "dense"] = "auto"
    eval_draws: Annotated[int, AtLeast(1)] = 400  # draws whose log-likelihood is computed when not recorded
    likelihood_mesh: Annotated[int | None, AtLeast(2)] = None  # evaluate the likelihood on this coarser mesh (approximate)
    restriction: Literal["projection", "injection"] = "projection"  # how a coarser level reads the field (levels.py)

    def check(self):
        if self.likelihood_mesh is not None and self.likelihood_mesh != self.mesh:
            problem = level_mesh_problem(self.likelihood_mesh, self.mesh)
            if problem:
                raise InvalidSetting("likelihood_mesh", problem)


class EllipticInverse(TargetBase):
    """Posterior of the log-transmissivity field; see the module docstring and conf/model/elliptic.yaml."""

    # it makes its own observations; a NUTS reference costs up to a thousand PDE solves per draw (opt in
    # with reference.enabled=true)
    Settings = EllipticSettings
    capabilities = Capabilities(uses_data=False, reference_affordable=False)
    param_name = "u"

    def __init__(self, settings: EllipticSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        cfg = self.configure(settings, options)
        mesh, whiten, solver, eval_draws = cfg.mesh, cfg.whiten, cfg.solver, cfg.eval_draws
        self.device, self.dtype = torch.device(device), dtype
        self.space = P2Space(mesh)
        self.mesh, self.dim, self.whiten, self.eval_draws = mesh, self.space.n_dofs, whiten, eval_draws
        self.solver = solver  # auto is resolved by each level for its size (levels.resolve_solver)
        self.restriction = cfg.restriction
        self.noise_sd = cfg.noise_sd if cfg.noise_sd is not None else problem.default_noise_sd(cfg.snr)
        self.sensors = problem.sensor_points()
        self.true_u = self.space.interpolate(problem.true_field)
        self.clean, self.observations = self._generate_data(mesh * cfg.data_mesh_factor, cfg.data_seed)
        self.prior = GaussianFieldPrior(cholesky_factor(self.space.coords, cfg.prior_sd, cfg.prior_length,
                                                        data_dir() / "elliptic"), self.device, dtype,
                                        circulant_sampler(self.space.coords, cfg.prior_sd, cfg.prior_length,
                                                          self.device, dtype))
        self._levels: dict[int, ForwardLevel] = {}
        self.likelihood_mesh = cfg.likelihood_mesh or mesh
        self.likelihood_level = self.level(self.likelihood_mesh)

    def _generate_data(self, fine_mesh: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        fine = P2Space(fine_mesh)
        factorized = fine.factorize(fine.interpolate(problem.true_field))
        clean = fine.point_evaluation(self.sensors) @ factorized.solve(np.append(fine.load_vector(problem.source), 0.0))[:-1]
        noise = np.random.default_rng(seed).normal(size=clean.shape) * self.noise_sd
        return clean, clean + noise

    # --- the documented API ------------------------------------------------------------------------
    @property
    def dof_coordinates(self) -> np.ndarray:
        """(dim, 2) coordinates of the degrees of freedom (the P2 nodes)."""
        return self.space.coords

    def field(self, q: Tensor) -> Tensor:
        """The field u at the dofs for parameters q (..., dim): q itself, or L q when whitened."""
        return self.prior.color(q) if self.whiten else q

    def forward(self, u) -> np.ndarray:
        """The 25 sensor values O p(u) on the likelihood's mesh for a field u (dim,) or fields (n, dim) at the dofs."""
        single = np.ndim(u.detach().cpu() if isinstance(u, Tensor) else u) == 1
        out = self.likelihood_level.predict(self._checked_field(u))
        return out[0] if single else out

    def _checked_field(self, u) -> np.ndarray:
        arr = np.asarray(u.detach().cpu() if isinstance(u, Tensor) else u, dtype=np.float64)
        if arr.ndim not in (1, 2) or arr.shape[-1] != self.dim:
            raise BayesxError(f"forward expects a field of length {self.dim} (the P2 dofs of the {self.mesh} x "
                              f"{self.mesh} mesh), or an array (n, {self.dim}); got shape {tuple(arr.shape)}")
        return np.atleast_2d(arr)

    def log_likelihood(self, q: Tensor) -> Tensor:
        """l(u(q)) for parameters q (chains, dim); NaN where the solve fails."""
        return self._misfit(q, need_grad=False)[0]

    def level(self, mesh: int) -> ForwardLevel:
        """The forward model on an n x n mesh dividing the model's mesh (built once, then cached)."""
        if mesh not in self._levels:
            if mesh not in (self.mesh, self.likelihood_mesh):
                self.check_level(mesh, "coarse_mesh")
            self._levels[mesh] = ForwardLevel(mesh, self.space, self.sensors, self.observations, self.noise_sd,
                                              self.solver, self.device, self.dtype, self.restriction)
        return self._levels[mesh]

    def check_level(self, mesh, key: str) -> None:
        """Raise InvalidSetting(key, ...) unless ``mesh`` is coarser than the likelihood's mesh and divides it."""
        fine_key = "model.likelihood_mesh" if self.approximate else "model.mesh"
        problem = level_mesh_problem(mesh, self.likelihood_mesh, fine_key)
        if problem:
            raise InvalidSetting(key, problem)

    def _level_of(self, mesh: int | None) -> ForwardLevel:
        return self.likelihood_level if mesh is None else self.level(mesh)

    def level_inputs(self, q: Tensor, mesh: int | None) -> Tensor:
        """The field at the n x n mesh's nodes (None: the likelihood's mesh) for parameters q (chains, dim):
        R_n u(q), linear in q (u = q, or L q when whitened)."""
        return self._level_of(mesh).restrict(self.field(q.reshape(-1, self.dim)))

    def level_predictions(self, q: Tensor, mesh: int | None) -> Tensor:
        """F_n(q): the sensor values on the n x n mesh (None: the likelihood's), its inputs then its solve."""
        return self.level_predictions_at(self.level_inputs(q, mesh), mesh)

    def level_predictions_at(self, field: Tensor, mesh: int | None) -> Tensor:
        """The 25 sensor values on the n x n mesh from the field at its nodes (:meth:`level_inputs`); NaN rows
        where a solve fails. l_n is their Gaussian misfit against :meth:`sensor_data`."""
        return self._level_of(mesh).predictions_at(field)

    def prediction_jacobian(self, q: Tensor, mesh: int | None = None) -> Tensor:
        """dF_n/dq (25, dim) of the n x n level's sensor values (None: the likelihood's) at one parameter q (dim,):
        the level's adjoint Jacobian with respect to the field, times L when whitened (u = L q)."""
        try:
            return self._pull_back(self._level_of(mesh).prediction_jacobian(self.field(q.reshape(1, self.dim))[0]))
        except FloatingPointError:
            raise BayesxError("the PDE solve diverged at this parameter, so its Jacobian is undefined; is exp(u) "
                              "finite and positive?") from None

    def sensor_data(self) -> tuple[Tensor, float]:
        """The observations y (25,) and the noise sd sigma of l(u) = -|y - O p(u)|^2 / (2 sigma^2)."""
        return torch.as_tensor(self.observations, device=self.device, dtype=self.dtype), float(self.noise_sd)

    def level_log_likelihood(self, q: Tensor, mesh: int) -> Tensor:
        """l_n(u(q)) on the n x n mesh for parameters q (chains, dim); the model's own mesh is the exact l."""
        return self.level(mesh).misfit(self.field(q.reshape(-1, self.dim)), need_grad=False)[0]

    @property
    def approximate(self) -> bool:
        """True when the likelihood is evaluated on a coarser mesh than the model's (a different posterior)."""
        return self.likelihood_mesh != self.mesh

    # --- the target interface ----------------------------------------------------------------------------
    def log_prob(self, q: Tensor) -> Tensor:
        return self.log_prob_and_grad(q, need_grad=False)[0]

    def log_prob_and_grad(self, q: Tensor, need_grad: bool = True) -> tuple[Tensor, Tensor | None]:
        shape = q.shape
        q = q.reshape(-1, self.dim)
        log_lik, grad_u = self._misfit(q, need_grad)
        log_prior, grad_prior = self.prior_log_prob_and_grad(q)
        lp = (log_lik + log_prior).reshape(shape[:-1])
        if not need_grad:
            return lp, None
        grad = self._pull_back(grad_u) + grad_prior
        return lp, grad.reshape(shape)

    def _pull_back(self, rows: Tensor) -> Tensor:
        """Derivatives with respect to the field u, as rows, taken to the parameters q: L^T g when whitened (u = L q)."""
        return rows @ self.prior.chol if self.whiten else rows

    def prior_log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        """log N(q; 0, prior) up to a constant, and its gradient, in the target's parameterization."""
        if self.whiten:
            return -0.5 * (q * q).sum(-1), -q
        return self.prior.log_prob_and_grad(q)

    def prior_log_prob(self, q: Tensor) -> Tensor:
        """log N(q; 0, prior) up to a constant (one triangular solve; no gradient)."""
        w = q if self.whiten else self.prior.whiten(q)
        return -0.5 * (w * w).sum(-1)

    def sample_prior(self, n: int, gen: torch.Generator) -> Tensor:
        """n draws from the prior, in the target's parameterization."""
        if self.whiten:
            return torch.randn((n, self.dim), generator=gen, device=self.device, dtype=self.dtype)
        return self.prior.sample(n, gen)

    def prior_factor(self) -> Tensor:
        """L with prior covariance L L^T in the target's parameterization (I when whitened)."""
        if self.whiten:
            return torch.eye(self.dim, device=self.device, dtype=self.dtype)
        return self.prior.chol

    def autograd_log_prob(self) -> None:
        """None: the likelihood's gradient is an adjoint solve outside torch's graph, so autograd cannot
        differentiate it twice (Laplace takes finite differences of the gradient instead)."""
        return None

    def gaussian_prior(self) -> GaussianPrior:
        """The prior is the Gaussian field's (log_likelihood, sample_prior, prior_log_prob, prior_factor above)."""
        return self

    def coarse_levels(self) -> CoarseLevels:
        """The same PDE on coarser meshes (check_level, level_log_likelihood, level_inputs, ... above)."""
        return self

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        return self.sample_prior(n_chains, gen)

    # --- solves -------------------------------------------------------------------------------------------
    def _misfit(self, q: Tensor, need_grad: bool) -> tuple[Tensor, Tensor | None]:
        """l(u) and dl/du (on the likelihood's mesh) for each row of q; NaN where a solve fails."""
        return self.likelihood_level.misfit(self.field(q.reshape(-1, self.dim)), need_grad)

    # --- reporting ------------------------------------------------------------------------------------------
    def describe(self) -> dict[str, str]:
        return {"dim": str(self.dim), "mesh": str(self.mesh), "elements": "P2", "n_obs": str(len(self.observations)),
                "noise_sd": f"{self.noise_sd:g}", "whiten": str(self.whiten).lower(),
                "solver": self.likelihood_level.solver, "linear_solver": self.likelihood_level.linear_solver,
                "likelihood_mesh": str(self.likelihood_mesh), "restriction": self.restriction,
                "prior_draws": "cholesky" if self.prior.circulant is None else "circulant",
                "posterior": f"approximate (likelihood on the {self.likelihood_mesh} x {self.likelihood_mesh} mesh)"
                             if self.approximate else "exact"}

    def field_probe_dofs(self) -> np.ndarray:
        """Indices of the dofs nearest FIELD_PROBES (their ESS is reported as ess_field_min)."""
        d = ((self.space.coords[None, :, :] - FIELD_PROBES[:, None, :]) ** 2).sum(-1)
        return d.argmin(1)

    def evaluate(self, draws: Tensor, sample_stats: dict | None = None) -> Evaluation:
        """field_rel_err, the relative L2 error of the posterior mean field against the true field, and
        log_likelihood, the mean over retained draws (from the sampler's ``log_lik`` statistic when it
        recorded it, else on up to eval_draws evenly thinned draws). The per-draw quantities are the
        log-likelihood trace and the field at five probes (FIELD_PROBES): a sampler reports their ESS."""
        fields = self.field(draws.to(self.device, self.dtype)).cpu()
        mean = fields.mean((0, 1)).numpy()
        metrics = {"field_rel_err": self.space.l2_norm(mean - self.true_u) / self.space.l2_norm(self.true_u)}
        stats = sample_stats or {}
        if "log_lik" in stats:
            trace = np.asarray(stats["log_lik"], dtype=np.float64)
            source = "every retained draw"
        else:
            n_chains, n_draws = draws.shape[:2]
            keep = np.unique(np.linspace(0, n_draws - 1, max(1, min(n_draws, self.eval_draws // n_chains))).astype(int))
            thinned = draws[:, keep].reshape(-1, self.dim).to(self.device, self.dtype)
            trace = self.log_likelihood(thinned).cpu().numpy().reshape(n_chains, len(keep))
            source = f"{len(keep)} evenly spaced draws per chain"
        metrics["log_likelihood"] = float(np.nanmean(trace))
        quantities = {"field": fields[:, :, self.field_probe_dofs()].numpy(), "log_likelihood": trace}
        summaries = {"field_mean": mean, "field_sd": fields.reshape(-1, self.dim).std(0).numpy()}
        remarks = [f"approximate posterior: the likelihood is evaluated on the {self.likelihood_mesh} x "
                   f"{self.likelihood_mesh} mesh, not the model's {self.mesh} x {self.mesh} (model.likelihood_mesh)"
                   ] if self.approximate else []
        return Evaluation(metrics, quantities, {"log_likelihood": source}, summaries, remarks)

    def write_artifacts(self, folder: Path, draws: Tensor | None = None,
                        evaluation: Evaluation | None = None) -> dict[str, list[Path]]:
        """The observations (csv) and plots: true field with sensors (Deep MCMC Fig. 4), and from an evaluation the
        posterior mean and sd fields and the log-likelihood trace of their evaluation."""
        from bayesx.targets.elliptic import plots

        folder = Path(folder)
        table = folder / "observations.csv"
        header = "x,y,clean,observed"
        np.savetxt(table, np.column_stack([self.sensors, self.clean, self.observations]), delimiter=",",
                   header=header, comments="", fmt="%.10g")
        out = {"data": [table], "plots": [plots.true_field(self, folder / "true_field.png")]}
        if evaluation is not None and "field_mean" in evaluation.summaries:
            out["plots"].append(plots.posterior_fields(self, evaluation.summaries["field_mean"],
                                                       evaluation.summaries["field_sd"], folder / "posterior_fields.png"))
            out["plots"].append(plots.log_likelihood_trace(evaluation.quantities["log_likelihood"],
                                                           evaluation.notes["log_likelihood"],
                                                           folder / "log_likelihood_trace.png"))
        return out
