"""``model=posteriordb model.name=<posterior>``: a posterior of the posteriordb suite, and every run's
errors against its gold-standard reference draws.

    bayesx run model=posteriordb model.name=eight_schools_noncentered method=nuts
    bayesx run -m model=posteriordb model.name=diamonds,garch11 method=nuts,pathfinder,vi
    bayesx run model=posteriordb model.name=sv_latent method=nuts     # the second tier (suite.TIER2)

The target samples the torch density on Stan's unconstrained space (bayesx/targets/posteriordb/torch_models.py;
initial points uniform on [-2, 2]^dim, as Stan's). ``evaluate`` maps the draws to the constrained
parameters and compares each parameter's marginal with the reference draws (Magnusson, Bürkner and
Vehtari, posteriordb), in units of the reference sd s_j:

    ref_mean_err_{max,median}   |mean_j - mean_ref_j| / s_j
    ref_sd_err_{max,median}     |sd_j - sd_ref_j| / s_j
    ref_w1_mean                 mean over j of W1(draws_j, ref_j) / s_j (1-Wasserstein of the marginals)

Parameters whose marginals have no mean (the horseshoe's half-Cauchy scales: ``SuiteEntry.compared_on_log``) are
compared on their logarithm, where the moments exist.

The gold standard replaces bayesx's own NUTS reference run (the target declares ``exact_moments``).
Its own Monte Carlo error puts a floor of about 1 / sqrt(10,000) = 0.01 under the mean errors. The second
tier's references are long NumPyro NUTS runs (experiments/make_tier2.py), 1,000 to 10,000 kept draws each
(``Posterior.info`` says how many and how they were made), so their floor is 0.01 to 0.03.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from bayesx.diagnostics.convergence import named_blocks
from bayesx.settings import Settings
from bayesx.targets.base import Capabilities, Evaluation, TargetBase
from bayesx.targets.posteriordb import NAMES, check_name, load

CHUNK = 4096  # draws constrained at a time


@dataclass(frozen=True)
class PosteriorDBSettings(Settings):
    name: str = "eight_schools_noncentered"  # one of bayesx.targets.posteriordb.suite.ALL_NAMES (either tier)

    def check(self):
        check_name(self.name)


def reference_errors(draws: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Marginal errors of ``draws`` (n, p) against ``reference`` (m, p), in reference sds (module docstring)."""
    from scipy.stats import wasserstein_distance

    ref_mean, ref_sd = reference.mean(0), reference.std(0, ddof=1)
    mean_err = np.abs(draws.mean(0) - ref_mean) / ref_sd
    sd_err = np.abs(draws.std(0, ddof=1) - ref_sd) / ref_sd
    if np.isfinite(draws).all():
        w1 = np.array([wasserstein_distance(draws[:, j], reference[:, j]) for j in range(draws.shape[1])]) / ref_sd
    else:
        w1 = np.full(draws.shape[1], np.inf)
    return {"ref_mean_err_max": float(mean_err.max()), "ref_mean_err_median": float(np.median(mean_err)),
            "ref_sd_err_max": float(sd_err.max()), "ref_sd_err_median": float(np.median(sd_err)),
            "ref_w1_mean": float(w1.mean())}


class PosteriorDB(TargetBase):
    """One posterior of the posteriordb suite (module docstring)."""

    Settings = PosteriorDBSettings
    capabilities = Capabilities(uses_data=False, exact_moments=True)
    param_name = "q"  # the unconstrained parameters; evaluate reports on the constrained ones

    def __init__(self, settings: PosteriorDBSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        self.settings = self.configure(settings, options)
        self.posterior = load(self.settings.name)
        self.device, self.dtype = torch.device(device), dtype
        self.model = self.posterior.torch_model(dtype, self.device)
        self.dim = self.posterior.dim

    def log_prob(self, q: Tensor) -> Tensor:
        return self.model.log_prob(q)

    def coordinate_names(self) -> list[str]:
        return list(self.posterior.coordinates)

    def constrain(self, q: Tensor) -> Tensor:
        """The constrained parameters (..., p), named ``self.posterior.param_names``."""
        flat = q.reshape(-1, self.dim)
        out = torch.cat([self.model.constrain(flat[i:i + CHUNK]) for i in range(0, len(flat), CHUNK)])
        return out.reshape(*q.shape[:-1], out.shape[-1])

    def reported_names(self) -> list[str]:
        return list(self.posterior.param_names)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]] | None:
        """posteriordb's parameters by name (``theta[1]`` ... ``theta[8]``: theta of shape (8,)), for draws.nc."""
        return named_blocks(self.reported_names())

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        with torch.no_grad():
            params = self.constrain(draws.to(self.dtype)).reshape(-1, len(self.posterior.param_names))
        post = self.posterior
        metrics = reference_errors(post.compared(params.double().cpu().numpy()),
                                   post.compared(post.reference.astype(np.float64)))
        if post.entry.tier == 1:
            source = f"posteriordb's reference draws of {post.entry.posterior}"
        else:
            source = (f"the reference draws of the second tier's {post.name} (a long NumPyro NUTS run, "
                      f"experiments/make_tier2.py)")
        logged = f"; {', '.join(post.entry.compared_on_log)} on the log scale" if post.entry.compared_on_log else ""
        return Evaluation(metrics, remarks=[f"errors against {source} ({len(post.reference)} draws{logged})"])

    def describe(self) -> dict[str, str]:
        entry = self.posterior.entry
        return {"dim": str(self.dim), "posterior": self.settings.name, "posteriordb": entry.posterior,
                "shape": entry.shape, "tier": str(entry.tier)}


__all__ = ["NAMES", "PosteriorDB", "reference_errors"]
