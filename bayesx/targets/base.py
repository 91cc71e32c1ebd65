"""The target contract: a log density over a flat parameter vector, batched over chains.

A target class declares what it can do once, in :class:`Capabilities`; the runner and the methods
read that declaration and never probe for attributes. :class:`TargetBase` gives every target the
whole interface with defaults (autograd gradients, uniform initial points, no density form, no
evaluation, no artifacts), so a new target writes ``log_prob`` and what it does better than the
default. A target describes its density and nothing else: the samplers and their backends
(bayesx.kernels) decide how to move on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from bayesx.settings import Settings, configure
from bayesx.targets.forms import LogisticForm


@dataclass(frozen=True)
class Capabilities:
    """What a target class can do, declared as a class attribute ``capabilities``.

    posterior             it has a log density to sample or approximate (False: a model that is
                          trained, such as the VAE; only trainer methods take it)
    uses_data             it is built from the ``data`` group (False: it makes its own observations)
    default_data          the ``data`` choice used when neither the command line nor an experiment
                          names one (None: the global default)
    gaussian_prior        log pi = l(q) + log N(q; 0, C) with ``log_likelihood``, ``sample_prior``,
                          ``prior_log_prob`` and ``prior_factor`` (what pCN-type methods need)
    exact_moments         ``evaluate`` reports errors against exactly known moments, so no reference
                          posterior run is needed
    reference_affordable  a NUTS reference run is cheap enough to make by default for methods whose
                          draws are approximate
    exact_log_normalizer  ``log_normalizer()`` gives log Z of the unnormalized density exactly (closed
                          form or quadrature): runs that estimate the evidence report ``log_evidence_err``
    differentiable        ``log_prob`` is written in differentiable torch, so autograd gives gradients of
                          its gradient (what Hamiltonian VI's learned leapfrog needs); False for a
                          density computed outside torch (the PDE solve)
    coarse_levels         (with gaussian_prior) cheaper approximations of the same likelihood on coarser
                          meshes: ``check_level(n, key)``, ``level_log_likelihood(q, n)``, the sensor
                          values ``level_predictions(q, n)`` (n None: the likelihood's own level) in two
                          parts, ``level_inputs(q, n)`` (what level n reads of q, a *linear* map: the
                          field at its nodes) and ``level_predictions_at(inputs, n)`` (the solve), and
                          ``sensor_data()`` (observations y and noise sd sigma of the Gaussian likelihood
                          l = -|y - F|^2 / (2 sigma^2)), what delayed-acceptance samplers (method=dapcn)
                          screen proposals with; and ``prediction_jacobian(q, n)``, dF_n/dq (m, dim) at one q
                          (method=dapcn proposal=lis builds its directions from it)
    closed_form_hessian   ``hessian(q)`` gives the Hessian of log pi at q (dim,) in closed form (Laplace uses it
                          instead of autograd's or finite differences)
    logistic_design       a Bayesian logistic regression y ~ Bernoulli(sigmoid(X q)), q ~ N(0, s^2 I), whose
                          ``logistic_design()`` returns (X, y, s^2) (for the Jaakkola-Jordan bound of method=vi)
    """

    posterior: bool = True
    uses_data: bool = True
    default_data: str | None = None
    gaussian_prior: bool = False
    exact_moments: bool = False
    reference_affordable: bool = True
    exact_log_normalizer: bool = False
    differentiable: bool = True
    closed_form_hessian: bool = False
    logistic_design: bool = False
    coarse_levels: bool = False


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
        posterior's cache key, bayesx.reference)."""
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

    def density_form(self) -> LogisticForm | None:
        """This density as a typed description that a backend other than PyTorch can evaluate
        (bayesx.targets.forms), or None: the density is ``log_prob`` alone. The kernels choose their
        backend from it (bayesx.kernels.backend)."""
        return None

    def coordinate_names(self) -> list[str] | None:
        """Names of the dim coordinates for the draws file and plots; None: ``<param_name>[j]``."""
        return None

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        u = torch.rand((n_chains, self.dim), generator=gen, dtype=self.dtype, device=self.device)
        return self.init_scale * (2.0 * u - 1.0)

    def restrict(self, offset: Tensor, basis: Tensor):
        """This density on the affine subspace q = offset + B u (see targets.restriction)."""
        from bayesx.targets.restriction import AffineRestriction

        return AffineRestriction(self, offset, basis)

    def level_predictions(self, q: Tensor, mesh: int | None) -> Tensor:
        """Targets with ``coarse_levels``: level ``mesh``'s sensor values at q, its inputs then its solve."""
        return self.level_predictions_at(self.level_inputs(q, mesh), mesh)

    def support_box(self) -> float | None:
        """h where the density is zero outside the box [-h, h]^dim (a flow then ends with a squashing
        layer onto it); None: positive everywhere."""
        return None

    def log_normalizer(self) -> float:
        """log of the integral of exp(log_prob) (targets declaring ``exact_log_normalizer``)."""
        raise NotImplementedError(f"{type(self).__name__} does not know its log normalizer")

    def describe(self) -> dict[str, str]:
        """Tags describing the target (data set, sizes) for the tracker."""
        return {"dim": str(self.dim)}


def moment_errors(draws: Tensor, mean: np.ndarray, sd: np.ndarray) -> Evaluation:
    """The largest error of the draws' mean and sd over coordinates, in units of the true sd (targets
    with ``exact_moments``)."""
    flat = draws.reshape(-1, draws.shape[-1]).double().cpu().numpy()
    return Evaluation({"posterior_mean_err_max": float((np.abs(flat.mean(0) - mean) / sd).max()),
                       "posterior_sd_err_max": float((np.abs(flat.std(0, ddof=1) - sd) / sd).max())})


GAUSSIAN_PRIOR_API = ("log_likelihood", "sample_prior", "prior_log_prob", "prior_factor")
"""What a target with ``capabilities.gaussian_prior`` provides (see bayesx.targets.elliptic)."""
