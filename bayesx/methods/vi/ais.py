"""Annealed importance sampling (``method=ais``; Neal 2001; the advanced-VI lecture notes, sec. 2.7).

``n_samples`` independent runs, batched: each starts at z_0 ~ q0 (N(base_mean, base_scale^2 I), or the
Laplace approximation with ``base: laplace``; bayesx.methods.vi.tempering),
walks the geometric path pi_beta ∝ q0^(1 - beta) p^beta over ``n_temps`` linear temperatures
beta_t = t / T, and carries the log weight

    log w = sum_{t=1}^{T} (beta_t - beta_{t-1}) [log p(z_{t-1}) - log q0(z_{t-1})],

where z_t comes from ``n_steps`` moves leaving pi_{beta_t} invariant (``kernel``: random-walk
Metropolis ``mh`` or ``hmc``; bayesx.methods.vi.tempering). The t = 1 term, evaluated at the base
draw z_0, is the first factor f_1(z_0) / f_0(z_0) that the notes' printed Algorithm 2 leaves out
(their eq. 124 has it); without it the estimate is biased by E_q0[log p - log q0] / T.
E[w] = Z exactly, so ``log_evidence`` = log mean w with the delta-method standard error, and the
weights' ESS and PSIS k-hat say how well the path worked. The draws are ``num_draws``
multinomial resamples of the final states by w.

Cost: n_samples x n_temps x n_steps transitions (x ``n_leapfrog`` gradients for HMC).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, Fit, Particles
from bayesx.methods.vi.tempering import Tempered, TemperedSettings, log_ratio, start_path
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, Positive


@dataclass(frozen=True)
class AISSettings(TemperedSettings):
    n_temps: Annotated[int, AtLeast(1)] = 100  # linear temperatures beta_t = t / n_temps
    n_samples: Annotated[int, AtLeast(2)] = 1000  # independent AIS runs (batched)
    kernel: Literal["mh", "hmc"] = "mh"
    step_size: Annotated[float, Positive()] = 0.5


class AIS(Approximation):
    """Annealed importance sampling; see the module docstring and ``conf/method/ais.yaml``."""

    Settings = AISSettings
    name = "ais"
    summary_keys = ("log_evidence", "log_evidence_se", "weights_ess", "psis_khat", "n_grad_evals", "fit_time_s")
    compare_keys = ("log_evidence", "weights_ess", "fit_time_s")

    def needs_gradients(self) -> bool:
        return self.settings.uses_gradients()

    def approximate(self, target, inputs: RunInputs) -> Fit:
        cfg, gen, out = self.settings, inputs.gen, Fit()
        base, z, mover = start_path(target, cfg, cfg.n_samples, inputs.initial, gen)
        log_w = torch.zeros(cfg.n_samples, dtype=target.dtype, device=target.device)
        betas = torch.linspace(0.0, 1.0, cfg.n_temps + 1).tolist()
        bar = progress_bar(cfg.n_temps, "ais temperatures", inputs.progress, "temp")
        accept_trace = []
        with interruptible(out, bar, lambda: "fit"):  # an unfinished path's particles are no draws
            for t in range(1, cfg.n_temps + 1):
                with torch.no_grad():
                    log_w += (betas[t] - betas[t - 1]) * log_ratio(target, base, z)
                z, accept = mover.move(z, Tempered(target, base, betas[t]), gen)
                accept_trace.append((t, accept))
                bar.update(1)
                if t % 10 == 0:
                    bar.set_postfix(accept=f"{accept:.2f}", step=f"{mover.step_size:.3g}")
        out.traces["ais_accept_rate"] = accept_trace
        out.metrics["n_grad_evals"] = float(mover.grad_evals)
        out.metrics["final_step_size"] = mover.step_size
        if out.interrupted:
            return out
        out.tags["ais_kernel"] = cfg.kernel
        out.approximation = Particles(z, log_w)
        return out
