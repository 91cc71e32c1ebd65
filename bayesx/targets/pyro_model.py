"""A Pyro model as a bayesx target (``model=pyro``): its latent sample sites become named, constrained parameters,
and its joint log density is what bayesx's samplers run on, through the same compiled path as any torch density.

    bayesx run model=pyro model.fn=examples/eight_schools_pyro.py:model method=nuts
    bayesx run model=pyro model.fn=mymodels.py:model model.data_file=data.npz method=nuts

``model.fn`` names the model function (``path/to/file.py:function`` or ``package.module:function``; ``:model`` when
the function part is left out). It is called with no arguments, or with ``model.data_file``'s arrays as keyword
arguments (a .npz's arrays, or a .csv's columns, by name). It may use ``pyro.sample`` (latent, or observed with
``obs=``), ``pyro.plate`` (without subsampling), ``pyro.deterministic`` and ``pyro.factor``.

The model is run once to find its latent sites: their names, shapes and supports. Each continuous support that
bayesx.targets.parameters maps (real, positive and other bounds, intervals, simplexes, Cholesky factors of
correlation matrices, positive-definite matrices) becomes a parameter of that name and shape; the density at a point
is ``poutine.trace(poutine.condition(model, values)).log_prob_sum()`` plus the maps' log-Jacobians, as Pyro's own
NUTS computes it (``pyro.infer.mcmc.util.potential_energy`` with ``biject_to``). A discrete latent site (a mixture's
assignment) is refused in one line naming it, and so is anything else bayesx cannot sample (``pyro.param``,
subsampled plates, a support it has no map for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor
from torch.distributions import constraints

from bayesx.errors import BayesxError
from bayesx.settings import Positive, Settings, InvalidSetting
from bayesx.targets import parameters as constrained
from bayesx.targets.custom import CustomModel, load_data, load_function

try:  # pyro-ppl is an extra (pip install 'bayesx[pyro]'); its absence is one line when model=pyro is asked for
    import pyro
    from pyro import poutine
except ImportError:  # pragma: no cover - exercised where pyro is not installed
    pyro = poutine = None


@dataclass(frozen=True)
class PyroSettings(Settings):
    fn: str | None = None  # path/to/file.py:function or package.module:function
    data_file: str | None = None  # its arrays are passed to the model as keyword arguments
    init: dict | None = None  # constrained starting values by site name; null: the origin of the unconstrained space
    init_scale: Annotated[float, Positive()] = 1.0

    def check(self):
        if not self.fn:
            raise InvalidSetting("fn", "must be set: model.fn=path/to/file.py:model (a Pyro model function)")

    # what CustomModel's messages and digests read
    @property
    def log_density(self) -> str:
        return self.fn

    param_names = None


def _kind(site: str, support) -> tuple[str, float, float]:
    """The parameters' map for a site's support: (kind, low, high); refuses what has none."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    name = type(support).__name__
    if support is constraints.real or name == "_Real":
        return "real", 0.0, 1.0
    if name in ("_GreaterThan", "_GreaterThanEq"):
        low = float(support.lower_bound)
        return ("positive", 0.0, 1.0) if low == 0 else ("greater_than", low, low)
    if name == "_LessThan":
        return "less_than", float(support.upper_bound), float(support.upper_bound)
    if name in ("_Interval", "_HalfOpenInterval"):
        return "interval", float(support.lower_bound), float(support.upper_bound)
    kinds = {"_Simplex": "simplex", "_CorrCholesky": "corr_cholesky", "_PositiveDefinite": "positive_definite",
             "_OrderedVector": "ordered", "_PositiveOrderedVector": "positive_ordered"}
    if name in kinds:
        return kinds[name], 0.0, 1.0
    raise BayesxError(f"model.fn: the latent site '{site}' has support {support}, which bayesx has no map for; give "
                      f"it a distribution on the reals, a bounded interval, a simplex or a correlation Cholesky factor")


def _parameter(site: dict) -> constrained.Parameter:
    name, value = site["name"], site["value"]
    kind, low, high = _kind(name, site["fn"].support)
    shape = tuple(value.shape)
    if kind in constrained.VECTORS + constrained.MATRICES:
        core = shape[-1:] if kind in constrained.VECTORS else shape[-2:]
        if shape != core:
            raise BayesxError(f"model.fn: the latent site '{name}' is a batch {shape} of {kind} values; bayesx maps "
                              f"one {kind} per site: declare one site per {kind}")
        spec = f"{kind}[{shape[0]}]"
    elif kind in ("greater_than", "less_than"):
        spec = f"{kind}({low})" + (f"[{', '.join(map(str, shape))}]" if shape else "")
    elif kind == "interval":
        spec = f"interval({low}, {high})" + (f"[{', '.join(map(str, shape))}]" if shape else "")
    else:
        spec = kind + (f"[{', '.join(map(str, shape))}]" if shape else "")
    (parameter,) = constrained.parse({name: spec})
    return parameter


def latent_parameters(model, kwargs: dict) -> tuple[constrained.Parameter, ...]:
    """The model's latent sample sites as parameters, in the order the model draws them; one line for what bayesx
    cannot sample."""
    with _quiet():
        try:
            trace = poutine.trace(model).get_trace(**kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's model failed: say where, in one line
            raise BayesxError(f"model.fn: running the Pyro model failed: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    params = [name for name, site in trace.nodes.items() if site["type"] == "param"]
    if params:
        raise BayesxError(f"model.fn: the model has pyro.param sites ({', '.join(params)}), which are optimised, not "
                          f"sampled; give each a prior with pyro.sample")
    latent, discrete = [], []
    for name, site in trace.nodes.items():
        if (site["type"] != "sample" or site["is_observed"] or site["infer"].get("_deterministic")
                or poutine.util.site_is_subsample(site)):  # a plate's own site
            continue
        if any(frame.size != frame.full_size for frame in site["cond_indep_stack"] if frame.full_size is not None):
            raise BayesxError(f"model.fn: the site '{name}' is in a subsampled plate; bayesx evaluates the whole "
                              f"data set: drop subsample_size")
        if site["fn"].support.is_discrete:
            discrete.append(name)
            continue
        latent.append(site)
    if discrete:
        raise BayesxError(f"model.fn: the latent site{'s' if len(discrete) > 1 else ''} {', '.join(discrete)} "
                          f"{'are' if len(discrete) > 1 else 'is'} discrete; bayesx samples continuous parameters: "
                          f"marginalise {'them' if len(discrete) > 1 else 'it'} out (a mixture's assignment with "
                          f"MixtureSameFamily)")
    if not latent:
        raise BayesxError("model.fn: the Pyro model has no latent sample sites (every pyro.sample is observed); "
                          "there is nothing to sample")
    return tuple(_parameter(site) for site in latent)


def _quiet():
    """Pyro's argument validation off while the density is evaluated (it branches on values, which the compiled
    path cannot trace; out-of-support values are never proposed: the parameters are mapped onto their supports);
    the user's own setting comes back after (pyro.validation_enabled restores it)."""
    return pyro.validation_enabled(False)


def joint_log_density(model, kwargs: dict, declared: tuple[constrained.Parameter, ...]):
    """log p(values, data) + log |det J| at one unconstrained point (dim,): the model conditioned on the mapped
    values, its trace's log_prob_sum (observed and latent sites, factors included)."""
    def log_density(theta: Tensor) -> Tensor:
        values, log_jacobian = constrained.constrain(declared, theta)
        with _quiet():
            trace = poutine.trace(poutine.condition(model, data=values)).get_trace(**kwargs)
            return trace.log_prob_sum() + log_jacobian
    return log_density


class PyroModel(CustomModel):
    """A Pyro model's posterior over its latent sites (module docstring)."""

    Settings = PyroSettings

    def __init__(self, settings: PyroSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        if pyro is None:
            raise BayesxError("model=pyro needs pyro-ppl: pip install 'bayesx[pyro]' (make install includes it)")
        self.settings = self.configure(settings, options)
        self.device, self.dtype = torch.device(device), dtype
        self.init_scale = self.settings.init_scale
        model = load_function(self.settings.fn, key="model.fn", default="model")
        kwargs = load_data(self.settings.data_file, dtype, self.device) if self.settings.data_file else {}
        with torch.random.fork_rng():  # finding the sites draws from the priors: the run's seed is left alone
            torch.manual_seed(0)
            self.parameters = latent_parameters(model, kwargs)
        self.dim = constrained.dimension(self.parameters)
        self.function = joint_log_density(model, kwargs, self.parameters)
        self.data = None  # the data are the model's arguments, bound in the function
        self.centre = (constrained.unconstrain(self.parameters, self.settings.init, dtype).to(self.device)
                       if self.settings.init is not None else torch.zeros(self.dim, dtype=dtype, device=self.device))
        self._batched = self._probe()

    def describe(self) -> dict[str, str]:
        tags = {"dim": str(self.dim), "fn": self.settings.fn, "evaluation": self.evaluation,
                "params": ", ".join(f"{p.name}: {p.kind}{list(p.shape) if p.shape else ''}" for p in self.parameters)}
        if self.settings.data_file:
            tags["data_file"] = str(self.settings.data_file)
        if self.precision_warning:
            tags["precision_warning"] = self.precision_warning
        return tags
