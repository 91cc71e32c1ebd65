"""Tempered sequential Monte Carlo (``method=smc``; Del Moral, Doucet and Jasra 2006; the adaptive
tempering of Jasra et al. 2011, as PyMC's and BlackJAX's tempered SMC do it).

``n_particles`` particles start at q0 (N(base_mean, base_scale^2 I), or the Laplace approximation with
``base: laplace``) (beta = 0) and move along the
geometric path pi_beta ∝ q0^(1 - beta) p^beta (bayesx.methods.vi.tempering). At each stage:

1. the next beta' is the largest one whose incremental weights w_i = exp((beta' - beta) [log p(z_i)
   - log q0(z_i)]) keep an effective sample size of ``target_ess`` x n_particles (bisection);
2. log Z += log mean_i w_i (the particles are equally weighted after each resampling, so this
   product of means is the unbiased SMC estimate of Z);
3. multinomial resampling by w, then ``n_steps`` MCMC moves leaving pi_beta' invariant (``kernel``
   mh or hmc, the step size nudged towards its usual acceptance from stage to stage).

It stops when beta reaches 1; the particles are then equally weighted draws (n_particles of them)
and ``log_evidence`` is the running sum. The number of stages is recorded as ``n_stages``; a path
needing more than ``max_stages`` stops with an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, Fit, Particles
from bayesx.methods.vi.tempering import Tempered, TemperedSettings, log_ratio, start_path
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, Between


@dataclass(frozen=True)
class SMCSettings(TemperedSettings):
    n_particles: Annotated[int, AtLeast(2)] = 1000
    target_ess: Annotated[float, Between(0.0, 1.0)] = 0.5  # the incremental weights' ESS fraction per stage
    max_stages: Annotated[int, AtLeast(1)] = 1000


def next_beta(increment: Tensor, beta: float, target_ess: float) -> float:
    """The largest beta' in (beta, 1] with ESS(exp((beta' - beta) increment)) >= target_ess n."""
    n = increment.shape[0]
    inc = torch.nan_to_num(increment, nan=-math.inf)

    def ess(delta: float) -> float:
        lw = delta * inc
        w = torch.exp(lw - lw.max())
        return float(w.sum() ** 2 / (w * w).sum())

    if ess(1.0 - beta) >= target_ess * n:
        return 1.0
    low, high = 0.0, 1.0 - beta
    for _ in range(50):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if ess(mid) >= target_ess * n else (low, mid)
    return beta + max(low, 1e-12)


class SMC(Approximation):
    """Adaptive tempered SMC; see the module docstring and ``conf/method/smc.yaml``."""

    Settings = SMCSettings
    name = "smc"
    summary_keys = ("log_evidence", "n_stages", "n_grad_evals", "fit_time_s")
    compare_keys = ("log_evidence", "n_stages", "fit_time_s")

    def needs_gradients(self) -> bool:
        return self.settings.uses_gradients()

    def approximate(self, target, inputs: RunInputs) -> Fit:
        cfg, gen, out = self.settings, inputs.gen, Fit()
        base, z, mover = start_path(target, cfg, cfg.n_particles, inputs.initial, gen)
        beta, log_z, stages = 0.0, 0.0, []
        bar = progress_bar(None, "smc stages", inputs.progress, "stage")
        with interruptible(out, bar, lambda: "fit"):  # an unfinished path's particles are no draws
            while beta < 1.0:
                if len(stages) >= cfg.max_stages:
                    raise BayesxError(f"SMC reached beta={beta:.3g} after method.max_stages={cfg.max_stages} stages; "
                                      f"raise it, lower method.target_ess or use a base closer to the posterior")
                with torch.no_grad():
                    increment = log_ratio(target, base, z)
                new_beta = next_beta(increment, beta, cfg.target_ess)
                lw = torch.nan_to_num((new_beta - beta) * increment, nan=-math.inf)
                log_z += float(torch.logsumexp(lw, 0)) - math.log(cfg.n_particles)
                pick = torch.multinomial(torch.exp(lw - lw.max()).to(gen.device), cfg.n_particles, replacement=True,
                                         generator=gen)
                z = z[pick.to(z.device)]
                beta = new_beta
                z, accept = mover.move(z, Tempered(target, base, beta), gen)
                stages.append((len(stages) + 1, beta))
                bar.update(1)
                bar.set_postfix(beta=f"{beta:.3g}", accept=f"{accept:.2f}")
        out.traces["smc_beta"] = stages
        out.metrics.update({"n_stages": float(len(stages)), "n_grad_evals": float(mover.grad_evals)})
        if out.interrupted:
            return out
        out.tags["smc_kernel"] = cfg.kernel
        out.approximation = Particles(z, None, log_evidence=log_z)
        return out
