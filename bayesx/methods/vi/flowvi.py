"""Variational inference with a normalizing flow (``method=flowvi``; Rezende and Mohamed 2015; the
advanced-VI lecture; the research journal's sec. 3.5).

q_K is K layers of one flow family (bayesx.nn.flows) on a Gaussian base q0, and Adam maximizes the
flow ELBO over ``batch_size`` draws per iteration,

    ELBO = E_q0[ log p(z_K) - log q0(z_0) + sum_k log |det df_k / dz_{k-1}| ],

(the lecture's slide has the sign of the log-determinant wrong; the journal's Algorithm 6, line 7,
has it right). Only the target's ``log_prob_and_grad`` is used: the gradient of E log p(z_K) flows
into the flow's parameters through z_K by the surrogate grad log p(z_K)^T z_K (the gradient held
fixed), so any target works, not only those written in differentiable torch.

``anneal: exp`` is the journal's Algorithm 6: the target of iteration t is
(1 - beta_t) log N(z; 0, I) + beta_t log p(z) with beta_t = 1 - exp(-anneal_rate t), so the first
iterations fit something close to the standard normal and the flow is led to the posterior
gradually. The traced ``elbo`` is always against p itself (windowed means over ``check_every``).
``compile: true`` hands the layers to torch.compile: fewer, fused kernels per iteration after a
compilation of tens of seconds, worth it for long fits only (results/bench_flows.md has the times).

A target that lives in a box (``support_box``: U2-U4 on [-4, 4]^2) gets a last layer y = h tanh(z)
onto it, so no draw falls where its density is zero.

``frame: gaussian`` (the default ``auto``'s choice from three dimensions on; bayesx.methods.vi.frame says why not
below) first fits full-rank Gaussian VI with method=vi's defaults
(bayesx.methods.vi.frame, shared with GAP and SVGD) and ends the flow with the fixed affine layer
z = m + L w of its q (FixedAffine): the flow then starts at that q and refines it in whitened
coordinates, where the base N(0, I) and Adam's steps of ``lr`` fit whatever the posterior's scales
(posteriordb's diamonds: from 0.001 to 0.3; without the frame the flow ends hundreds of sds off there). Its gradients are counted in ``n_grad_evals``. ``frame: none`` is the flow
before issue 34; a target in a box never gets a frame (the squashing layer must come last).
Convergence of the fixed budget: ``converged`` where the mean windowed ELBO of the last fifth of the
iterations rose by less than ``tol`` nats over the fifth before (``elbo_last_fifth_rise``); else a
one-line warning.

``base``: ``standard`` keeps q0 = N(base_mean, base_scale^2 I) fixed (the journal's choice, and
its Figure 34 with base_mean [4, 0] and base_scale^2 1 or 10); ``diagonal`` learns its mean and
scales from that start. Cost per iteration: batch_size gradients of the target and a forward and
backward pass of the flow (O(K dim) per draw for planar and radial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import torch

from bayesx.nn.distributions import LOG_2PI, GaussianQ
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit
from bayesx.methods.vi.frame import FrameChoice, fit_frame
from bayesx.methods.vi.windows import ElboWindows
from bayesx.nn.flows import FAMILIES, Flow, build_flow, check_dimension
from bayesx.nn.flows.base import FixedAffine
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, InvalidSetting, Positive

Family = Literal[FAMILIES]  # the choices are the flow package's families, listed once there


@dataclass(frozen=True)
class FlowVISettings(ApproximationSettings):
    flow: Family = "planar"
    n_layers: Annotated[int, AtLeast(1)] = 16  # K
    hidden: Annotated[int, AtLeast(1)] = 64  # width of the coupling and MADE networks
    base: Literal["standard", "diagonal"] = "diagonal"
    base_mean: float | tuple[float, ...] = 0.0  # a number for every coordinate, or one per coordinate
    base_scale: Annotated[float, Positive()] = 1.0
    batch_size: Annotated[int, AtLeast(1)] = 256
    iterations: Annotated[int, AtLeast(1)] = 5000
    lr: Annotated[float, Positive()] = 3e-3
    anneal: Literal["none", "exp"] = "none"
    anneal_rate: Annotated[float, Positive()] = 1e-3  # a in beta_t = 1 - exp(-a t)
    check_every: Annotated[int, AtLeast(1)] = 100
    frame: FrameChoice = "auto"
    tol: Annotated[float, AtLeast(0.0)] = 0.05  # the convergence rule's largest rise of the last fifth's ELBO (nats)
    compile: bool = False  # torch.compile the flow's layers: fewer, fused kernels per iteration after a compilation


class FlowVI(Approximation):
    """VI with a normalizing flow; see the module docstring and ``conf/method/flowvi.yaml``."""

    Settings = FlowVISettings
    name = "flowvi"

    def check(self, target, n_chains: int) -> None:
        check_dimension(self.settings.flow, target.dim)
        mean = self.settings.base_mean
        if isinstance(mean, tuple) and len(mean) != target.dim:
            raise InvalidSetting("base_mean", f"has {len(mean)} values for a target of dimension {target.dim}: "
                                 f"give one number or {target.dim}")

    def build(self, target, gen: torch.Generator, frame: GaussianQ | None = None) -> Flow:
        """The flow of the settings; with a Gaussian ``frame``, a last fixed layer maps its whitened coordinates
        onto the target's (FixedAffine)."""
        cfg = self.settings
        options = dict(dtype=target.dtype, device=target.device)
        mean = (torch.tensor(cfg.base_mean, **options) if isinstance(cfg.base_mean, tuple)
                else torch.full((target.dim,), float(cfg.base_mean), **options))
        seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device))
        flow = build_flow(cfg.flow, target.dim, cfg.n_layers, cfg.hidden, mean, torch.full_like(mean, cfg.base_scale),
                          cfg.base == "diagonal", torch.Generator().manual_seed(seed), target.support_box())
        if frame is not None:
            flow.layers.append(FixedAffine(frame).to(dtype=target.dtype, device=target.device))
        return flow

    def beta(self, iteration: int) -> float:
        return 1.0 - math.exp(-self.settings.anneal_rate * iteration) if self.settings.anneal == "exp" else 1.0

    def gradient_batch(self, inputs: RunInputs) -> int:
        return self.settings.batch_size

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """k-hat's warning (the family's), and one line where the ELBO was still rising at the end (last_fifth_rise)."""
        found = super().warnings(metrics)
        gap = metrics.get("log_evidence", float("nan")) - metrics.get("elbo_final", float("nan"))
        if gap > max(ELBO_GAP_WARN, 3.0 * metrics.get("log_evidence_se", 0.0)):
            found.append(f"flowvi's ELBO ended {gap:.2f} nats below its importance-sampled evidence: q is that far "
                         f"(KL(q || p)) from the posterior; raise method.iterations or method.n_layers, or try "
                         f"{OTHER_FRAME[self.settings.frame]}")
        if metrics.get("converged") == 0.0:
            found.append(f"flowvi did not converge: the mean ELBO of the last fifth of the iterations rose by "
                         f"{metrics.get('elbo_last_fifth_rise', float('nan')):.3g} nats over the fifth before "
                         f"(rule: below method.tol = {self.settings.tol:g}); raise method.iterations")
        return found

    def approximate(self, target, inputs: RunInputs) -> Fit:
        gen, progress = inputs.gen, inputs.progress
        out = Fit()
        cfg = self.settings
        # a target in a box never gets a frame: the squashing layer onto the box must come last
        frame, frame_tag = fit_frame("none" if target.support_box() is not None else cfg.frame, target, inputs,
                                     "flowvi")
        flow = self.build(target, gen, frame.gaussian)
        optim = torch.optim.Adam(flow.parameters(), lr=cfg.lr)
        push = torch.compile(flow.push) if cfg.compile else flow.push
        windows, iteration = ElboWindows(cfg.check_every), 0
        bar = progress_bar(cfg.iterations, f"flowvi ({cfg.flow}, K={cfg.n_layers})", progress, "it")
        with interruptible(out, bar, lambda: f"fit (iteration {iteration})"):
            for iteration in range(1, cfg.iterations + 1):
                z, log_q = push(*flow.base.sample_and_log_prob(cfg.batch_size, gen))
                log_p, grad = inputs.density.logp_and_grad(z.detach())
                elbo = (log_p - log_q.detach()).mean()
                if not torch.isfinite(elbo):
                    out.error = (f"the flow drew points where the target's density is zero at iteration {iteration}: "
                                 f"a flow's draws cover the space (or the box the target declares), so flowvi "
                                 f"needs a density positive there"
                                 if bool(torch.isneginf(log_p).any()) else
                                 f"the flow ELBO is not finite at iteration {iteration}: lower method.lr (now "
                                 f"{cfg.lr:g}) or use method.anneal=exp")
                    break
                beta = self.beta(iteration)
                log_normal = -0.5 * (z * z).sum(-1) - 0.5 * z.shape[1] * LOG_2PI
                surrogate = (beta * (z * grad).sum(-1) + (1.0 - beta) * log_normal - log_q).mean()
                optim.zero_grad()
                (-surrogate).backward()
                optim.step()
                bar.update(1)
                if windows.add(iteration, float(elbo)):
                    bar.set_postfix(elbo=f"{windows.last:.4g}", beta=f"{beta:.3f}")
        windows.record(out)
        out.metrics.update(last_fifth_rise(windows.trace, cfg.tol))
        out.metrics.update({"n_steps": float(iteration),
                            "n_grad_evals": float(iteration * cfg.batch_size) + frame.grad_evals,
                            "n_flow_parameters": float(sum(p.numel() for p in flow.parameters()))})
        out.tags["flow_frame"] = frame_tag
        out.tags.update({"q_family": f"flow:{cfg.flow}", "flow_layers": str(cfg.n_layers), "anneal": cfg.anneal})
        flow.requires_grad_(False)
        out.approximation = flow
        return out


ELBO_GAP_WARN = 0.1
OTHER_FRAME = {"none": "method.frame=gaussian", "gaussian": "method.frame=none",
               "auto": "the method.frame that auto did not choose (none below 3 dimensions, gaussian from 3)"}
"""Nats by which the ELBO may end below the importance-sampled log evidence before the run warns: the gap
estimates KL(q || p), and a flow that has reached the posterior closes it to Monte Carlo noise (U1, 16 planar
layers: 0.06); k-hat misses a q too wide or stalled in a corner, whose weights stay light-tailed (k-hat 0.18 at
a gap of 0.70)."""


def last_fifth_rise(trace: list[tuple[int, float]], tol: float) -> dict[str, float]:
    """The convergence rule of a fixed budget: the mean windowed ELBO of the last fifth of the windows less that
    of the fifth before it; ``converged`` where it rose by less than ``tol`` nats (with fewer than ten windows,
    or ``tol`` 0, no verdict: an empty dict)."""
    fifth = len(trace) // 5
    if fifth < 2 or tol <= 0:  # too short to judge, or not asked to: no verdict, no warning
        return {}
    values = [v for _, v in trace]
    rise = sum(values[-fifth:]) / fifth - sum(values[-2 * fifth:-fifth]) / fifth
    return {"converged": float(rise < tol), "elbo_last_fifth_rise": rise}
