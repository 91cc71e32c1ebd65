"""The posteriordb suite, built in: posteriors with gold-standard reference draws.

posteriordb (Magnusson, Bürkner and Vehtari, "posteriordb: a set of posteriors for Bayesian inference
and probabilistic programming"; github.com/stan-dev/posteriordb, BSD-3) pairs Stan programs and data
with reference draws from long Stan runs (10 chains x 1,000 draws). bayesx carries 45 of its 46 posteriors with
reference draws, and a centred eight schools, 46 in all (bayesx/targets/posteriordb/suite.py; the table of them, their
dimensions and what makes each hard: docs/posteriordb.md), each written twice: a batched torch density on
Stan's unconstrained space (torch_models.py, what bayesx samples; the Stan program's loops over time kept
as Python loops in the drive HMMs and the RK4-integrated ODE models) and an independent one-point
transcription for any array namespace (xp_models.py: numpy for the tests, jax.numpy for the peers' benchmark).

    post = load("eight_schools_noncentered")
    post.log_density(np, q, post.data)      # the xp transcription at one point q (dim,)
    post.constrain(np, q, post.data)        # the constrained parameters, named post.param_names
    post.reference                          # (n, p) gold-standard draws of those parameters
    post.torch_model(torch.float64, "cpu").log_prob(q)  # the torch density, q (..., dim)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from bayesx.settings import InvalidSetting
from bayesx.targets.posteriordb.suite import ALL_NAMES, ENTRIES, NAMES, SUITE, TIER2, TIER2_NAMES, SuiteEntry
from bayesx.targets.posteriordb.tier2_models import TIER2_TORCH
from bayesx.targets.posteriordb.tier2_xp import TIER2_XP, design_digest, logistic_design
from bayesx.targets.posteriordb.torch_models import TORCH_MODELS, TorchModel
from bayesx.targets.posteriordb.xp_models import XP_MODELS, XPModel

MODELS = {**TORCH_MODELS, **TIER2_TORCH}
TRANSCRIPTIONS = {**XP_MODELS, **TIER2_XP}

DATA = Path(str(resources.files("bayesx.targets.posteriordb") / "data"))


@dataclass(frozen=True)
class Posterior:
    """One posterior of the suite: its data, its reference draws and its two transcriptions."""

    name: str
    entry: SuiteEntry
    data: dict[str, np.ndarray]
    reference: np.ndarray  # (n, p) gold-standard draws of the constrained parameters
    param_names: tuple[str, ...]  # Stan's names, theta[1], ...
    xp_model: XPModel
    info: str = ""  # how the reference draws were made and checked (the second tier's)

    @property
    def dim(self) -> int:
        return self.entry.dim

    @property
    def coordinates(self) -> tuple[str, ...]:
        """Names of the unconstrained coordinates (log(sigma), logit(theta), ...)."""
        if self.entry.coordinates is not None:
            return self.entry.coordinates
        return (*self.param_names[:-1], f"log({self.param_names[-1]})")

    def log_density(self, xp, q, data):
        """The xp transcription's log density at one unconstrained point q (dim,)."""
        return self.xp_model.log_density(xp, q, data)

    def constrain(self, xp, q, data):
        """The xp transcription's constrained parameters (p,) at one unconstrained point q (dim,)."""
        return self.xp_model.constrain(xp, q, data)

    def compared(self, params: np.ndarray) -> np.ndarray:
        """Constrained draws (n, p) as their reference errors compare them: the columns of the parameters in
        ``entry.compared_on_log`` (the horseshoe's local and global scales, whose Cauchy-tailed marginals have no
        mean) on the log scale, where their moments exist; the others as they are."""
        logged = [j for j, name in enumerate(self.param_names) if name.split("[")[0] in self.entry.compared_on_log]
        if not logged:
            return params
        out = np.array(params, dtype=np.float64)
        out[:, logged] = np.log(out[:, logged])
        return out

    def unconstrain(self, params: np.ndarray) -> np.ndarray:
        """Constrained draws (n, p) mapped to the unconstrained space (n, dim), in numpy."""
        return self.xp_model.unconstrain(np.asarray(params, dtype=np.float64), self.data)

    def torch_model(self, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu") -> TorchModel:
        return MODELS[self.name](self.data, dtype, torch.device(device))


def check_name(name: str, key: str = "name") -> None:
    if name not in ENTRIES:
        raise InvalidSetting(key, f"is {name!r}, not a posterior of the suite; choose one of {', '.join(ALL_NAMES)}")


def generated_data(saved) -> dict[str, np.ndarray]:
    """Arrays a data file names instead of storing: the 100,000-row GLM's design, made from its seed
    (tier2_xp.logistic_design) and checked against the digest written with the data."""
    if "design.seed" not in saved.files:
        return {}
    n, k = (int(v) for v in saved["design.shape"])
    x = logistic_design(int(saved["design.seed"]), n, k)
    if design_digest(x) != str(saved["design.sha256"]):
        raise RuntimeError("the GLM's design made from its seed differs from the one its data were simulated on "
                           "(tier2_xp.logistic_design); its reference draws do not apply")
    return {"X": x}


@cache
def load(name: str) -> Posterior:
    """The suite's posterior ``name`` (see suite.py); InvalidSetting naming model.name otherwise."""
    check_name(name)
    entry = ENTRIES[name]
    with np.load(DATA / f"{entry.file}.npz") as saved:
        data = {k[len("data."):]: saved[k] for k in saved.files if k.startswith("data.")}
        data.update(generated_data(saved))
        reference, names = saved["reference"], tuple(str(n) for n in saved["param_names"])
        info = str(saved["info"]) if "info" in saved.files else ""
    return Posterior(name, entry, data, reference, names, TRANSCRIPTIONS[name], info)


__all__ = ["ALL_NAMES", "NAMES", "TIER2_NAMES", "Posterior", "load"]
