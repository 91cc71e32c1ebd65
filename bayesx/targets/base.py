"""The target contract: a log density over a flat parameter vector, batched over chains.

A target class declares what it can do once, in :class:`Capabilities`; the runner and the methods
read that declaration and never probe for attributes. :class:`TargetBase` gives every target the
whole interface with defaults (autograd gradients, uniform initial points, no density form, no
evaluation, no artifacts), so a new target writes ``log_prob`` and what it does better than the
default. A target describes its density and nothing else: the samplers and their backends
(bayesx.kernels) decide how to move on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol

import numpy as np
import torch
from torch import Tensor

from bayesx.settings import Settings, configure
from bayesx.targets.forms import LogisticForm


@dataclass(frozen=True)
class Capabilities:
    """What a target class can do, declared as a class attribute ``capabilities``: what the runner needs
    to know before it builds a target. Structure that a method relies on is asked by a typed question
    instead, answered by a typed view or None (TargetBase.gaussian_prior, coarse_levels, logistic_design,
    closed_form_hessian, autograd_log_prob).

    posterior             it has a log density to sample or approximate (False: a model that is
                          trained, such as the VAE; only trainer methods take it)
    uses_data             it is built from the ``data`` group (False: it makes its own observations)
    default_data          the ``data`` choice used when neither the command line nor an experiment
                          names one (None: the global default)
    exact_moments         ``evaluate`` reports errors against exactly known moments (or against gold-standard
                          reference draws, model=posteriordb), so no reference posterior run is needed
    reference_affordable  a NUTS reference run is cheap enough to make by default for methods whose
                          draws are approximate
    exact_log_normalizer  ``log_normalizer()`` gives log Z of the unnormalized density exactly (closed
                          form or quadrature): runs that estimate the evidence report ``log_evidence_err``
    cpu_dtype             the precision ``device.dtype=auto`` gives it on a CPU: float64 unless single
                          precision is known to give the same answers faster (logistic regression)
    """

    posterior: bool = True
    uses_data: bool = True
    default_data: str | None = None
    exact_moments: bool = False
    reference_affordable: bool = True
    exact_log_normalizer: bool = False
    cpu_dtype: Literal["float32", "float64"] = "float64"


class GaussianPrior(Protocol):
    """A posterior log pi(q) = l(q) + log N(q; 0, C) whose prior can be sampled (what pCN-type methods need;
    ``target.gaussian_prior()``)."""

    def log_likelihood(self, q: Tensor) -> Tensor:
        """l(q), (...,) for q (..., dim)."""

    def sample_prior(self, n: int, gen: torch.Generator) -> Tensor:
        """n draws (n, dim) from N(0, C)."""

    def prior_log_prob(self, q: Tensor) -> Tensor:
        """log N(q; 0, C) up to a constant."""

    def prior_factor(self) -> Tensor:
        """L with C = L L^T (dim, dim)."""


class CoarseLevels(Protocol):
    """Cheaper approximations of the same Gaussian likelihood l = -|y - F(q)|^2 / (2 sigma^2) on coarser
    meshes, what delayed-acceptance samplers (method=dapcn) screen proposals with
    (``target.coarse_levels()``); mesh None is the likelihood's own level."""

    def check_level(self, mesh: int, key: str) -> None:
        """Raise InvalidSetting(key, ...) where ``mesh`` is not a coarser level of this model."""

    def level_log_likelihood(self, q: Tensor, mesh: int) -> Tensor:
        """l on level ``mesh``."""

    def level_inputs(self, q: Tensor, mesh: int | None) -> Tensor:
        """What level ``mesh`` reads of q, a *linear* map (the field at its nodes)."""

    def level_predictions_at(self, inputs: Tensor, mesh: int | None) -> Tensor:
        """The sensor values of level ``mesh`` from its inputs (the solve)."""

    def sensor_data(self) -> tuple[Tensor, float]:
        """The observations y and the noise sd sigma."""

    def prediction_jacobian(self, q: Tensor, mesh: int | None = None) -> Tensor:
        """dF_mesh/dq (m, dim) at one q (method=dapcn proposal=lis builds its directions from it)."""


@dataclass(frozen=True)
class LogisticDesign:
    """A Bayesian logistic regression y ~ Bernoulli(sigmoid(X q)), q ~ N(0, prior_var I)
    (``target.logistic_design()``; the Jaakkola-Jordan bound of method=vi family=jj uses it)."""

    x: Tensor  # (n, dim), with the intercept column where there is one
    y: Tensor  # (n,) in {0, 1}
    prior_var: float


def protocol_members(protocol: type) -> list[str]:
    """The methods a typed view offers, in the order they are written (for error messages)."""
    return [name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")]


@dataclass
class Evaluation:
    """What a target says about a set of draws (chains, draws, dim).

    metrics     model-specific scalars (test_accuracy, field_rel_err, ...)
    quantities  per-draw quantities of interest, (chains, draws) or (chains, draws, k); the sampler
                family reports their ESS as ``ess_<name>`` (``ess_<name>_min`` when k > 1)
    notes       how a quantity was computed, shown beside it in plots
    summaries   posterior summaries the target's own artifacts plot (e.g. the mean and sd fields)
    remarks     sentences for the run's summary, e.g. why a metric is absent
    """

    metrics: dict[str, float] = field(default_factory=dict)
    quantities: dict[str, np.ndarray] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    summaries: dict[str, np.ndarray] = field(default_factory=dict)
    remarks: list[str] = field(default_factory=list)


class ModelBase:
    """What the runner needs of every model, sampled or trained: its capabilities, tags, evaluation
    of draws and files. Trained models (the VAE) derive from this alone."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    Settings: ClassVar[type[Settings]] = Settings
    """The model's options (the ``model`` config group), a bayesx.settings dataclass."""

    @classmethod
    def configure(cls, settings: Settings | None, options: dict) -> Settings:
        """The checked settings: given ones, or ``options`` checked (errors name ``model.<key>``)."""
        return configure(cls.Settings, settings if settings is not None else options, "model")

    def evaluate(self, draws: Tensor, sample_stats: dict[str, np.ndarray] | None = None) -> Evaluation:
        """Model-specific metrics of draws (chains, draws, dim); ``sample_stats`` are the sampler's
        per-draw statistics where a sampler made the draws."""
        return Evaluation()

    def write_artifacts(self, folder: Path, draws: Tensor | None, evaluation: Evaluation | None) -> dict[str, list[Path]]:
        """Model-specific files of a run (its data, field plots): artifact sub-folder -> paths."""
        return {}

    def describe(self) -> dict[str, str]:
        """Tags describing the model (data set, sizes) for the tracker."""
        return {}

    def content_digests(self) -> dict[str, str]:
        """Digests of the files that define this model, by the option that names each (a user's density
        and data files): what identifies the posterior is their content, not their paths (the reference
        posterior's cache key, bayesx.methods.reference)."""
        return {}


class TargetBase(ModelBase):
    """The target interface with its defaults.

    Subclasses set ``dim``, ``dtype``, ``device`` and implement ``log_prob`` (q (..., dim) -> (...),
    differentiable); they override ``log_prob_and_grad`` where an analytic gradient is cheaper than
    autograd and ``density_form`` where their density has a form that compiled code evaluates.
    """

    dim: int
    dtype: torch.dtype
    device: torch.device
    param_name = "theta"  # name of the parameter vector in saved draws
    init_scale = 2.0  # initial points are uniform on [-init_scale, init_scale]^dim, as in Stan

    def log_prob(self, q: Tensor) -> Tensor:
        raise NotImplementedError

    def log_prob_and_grad(self, q: Tensor) -> tuple[Tensor, Tensor]:
        with torch.enable_grad():
            q = q.detach().requires_grad_(True)
            lp = self.log_prob(q)
            (grad,) = torch.autograd.grad(lp.sum(), q)
        return lp.detach(), grad

    def gradient_problem(self) -> str | None:
        """Why autograd cannot differentiate ``log_prob`` where the target knows it (a user's function that
        leaves torch), in words that follow "but"; None where it can. Methods that use gradients ask first."""
        return None

    def density_form(self) -> LogisticForm | None:
        """This density as a typed description that a backend other than PyTorch can evaluate
        (bayesx.targets.forms), or None: the density is ``log_prob`` alone. bayesx.kernels.backend.prepare
        chooses a run's backend from it."""
        return None

    def coordinate_names(self) -> list[str] | None:
        """Names of the dim coordinates for the draws file and plots; None: ``<param_name>[j]``."""
        return None

    def constrain(self, q: Tensor) -> Tensor:
        """The parameters a user reads (..., p) at points q (..., dim) of the space the target is sampled on: q
        itself, unless the target samples a transformed space (posteriordb: Stan's unconstrained parameters)."""
        return q

    def read_draws(self, draws: Tensor) -> np.ndarray:
        """``draws`` (..., dim) on the parameters a user reads (:meth:`constrain`), in float64 numpy, outside any
        graph: what the summary, draws.nc, the plots and the reference's declared moments are computed from."""
        with torch.no_grad():
            return self.constrain(draws.to(self.dtype)).double().cpu().numpy()

    def reported_names(self) -> list[str]:
        """The names of the p parameters :meth:`constrain` returns (the run's posterior summary)."""
        return self.coordinate_names() or [f"{self.param_name}[{j}]" for j in range(self.dim)]

    def parameter_shapes(self) -> dict[str, tuple[int, ...]] | None:
        """The reported parameters by name with their shapes, in :meth:`reported_names`' order (their numbers
        flattened in C order), where the target declares them (the draws file's variables); None: one vector."""
        return None

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        u = torch.rand((n_chains, self.dim), generator=gen, dtype=self.dtype, device=self.device)
        return self.init_scale * (2.0 * u - 1.0)

    def restrict(self, offset: Tensor, basis: Tensor):
        """This density on the affine subspace q = offset + B u (:class:`AffineRestriction`)."""
        return AffineRestriction(self, offset, basis)

    def support_box(self) -> float | None:
        """h where the density is zero outside the box [-h, h]^dim (a flow then ends with a squashing
        layer onto it); None: positive everywhere."""
        return None

    def log_normalizer(self) -> float:
        """log of the integral of exp(log_prob) (targets declaring ``exact_log_normalizer``)."""
        raise NotImplementedError(f"{type(self).__name__} does not know its log normalizer")

    # --- typed questions: a view of this target where it has the structure, else None --------------
    def gaussian_prior(self) -> GaussianPrior | None:
        """This target as a Gaussian prior times a likelihood (pCN-type methods), or None."""
        return None

    def coarse_levels(self) -> CoarseLevels | None:
        """This target's coarser likelihood levels (delayed acceptance), or None."""
        return None

    def logistic_design(self) -> LogisticDesign | None:
        """This target's logistic-regression design (the Jaakkola-Jordan bound), or None."""
        return None

    def autograd_log_prob(self) -> Callable[[Tensor], Tensor] | None:
        """log pi as a torch function that autograd differentiates to any order (q (..., dim) -> (...)): what
        Hamiltonian VI's learned leapfrog and the autograd Hessian need; None where the density is computed
        outside torch's graph (the PDE solve, whose gradient is an adjoint). Default: ``log_prob``."""
        return self.log_prob

    def closed_form_hessian(self) -> Callable[[Tensor], Tensor] | None:
        """q (dim,) -> the Hessian of log pi at q in closed form (Laplace uses it instead of autograd's or
        finite differences), or None."""
        return None

    def describe(self) -> dict[str, str]:
        """Tags describing the target (data set, sizes) for the tracker."""
        return {"dim": str(self.dim)}


def moment_errors(draws: Tensor, mean: np.ndarray, sd: np.ndarray) -> Evaluation:
    """The largest error of the draws' mean and sd over coordinates, in units of the true sd (targets
    with ``exact_moments``)."""
    flat = draws.reshape(-1, draws.shape[-1]).double().cpu().numpy()
    return Evaluation({"posterior_mean_err_max": float((np.abs(flat.mean(0) - mean) / sd).max()),
                       "posterior_sd_err_max": float((np.abs(flat.std(0, ddof=1) - sd) / sd).max())})


class AffineRestriction(TargetBase):
    """A target seen through an affine map: pi_r(u) = pi(offset + B u), u in R^h, for u (chains, h);
    autograd-free given the target's gradient.

    Latent samplers evaluate the target only at decoded points q = offset + B u, where B (D, h) is the
    decoder's last linear layer scaled back to the parameter's units. The generic restriction maps u
    to q and pulls the gradient back, grad_u = B^T grad_q: O(D h) per call on top of the target's
    own cost. Targets whose log density depends on q through products X q (logistic regression)
    override ``restrict`` and precompute X B, so a call costs O(n h) and never touches R^D.
    """

    def __init__(self, target, offset: Tensor, basis: Tensor):
        self.target, self.offset, self.basis = target, offset, basis
        self.dim, self.dtype, self.device = basis.shape[1], basis.dtype, basis.device

    def point(self, u: Tensor) -> Tensor:
        return self.offset + u @ self.basis.T

    def log_prob(self, u: Tensor) -> Tensor:
        return self.target.log_prob(self.point(u))

    def log_prob_and_grad(self, u: Tensor) -> tuple[Tensor, Tensor]:
        lp, grad = self.target.log_prob_and_grad(self.point(u))
        return lp, grad @ self.basis

    def autograd_log_prob(self):
        return self.log_prob if self.target.autograd_log_prob() is not None else None

    def potential_grad(self, u: Tensor) -> Tensor:
        """-grad_u log pi_r(u)."""
        return -self.log_prob_and_grad(u)[1]
