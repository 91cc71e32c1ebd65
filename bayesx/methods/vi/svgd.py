"""Stein variational gradient descent (``method=svgd``; Liu and Wang 2016; the MCMC-inside-VI
slides).

n particles x_i move along the kernelized Stein direction

    phi(x_i) = 1/n sum_j [ k(x_j, x_i) grad log p(x_j) + grad_{x_j} k(x_j, x_i) ],

the first term pulling them to high density, the second (the repulsive term) keeping them apart,
with the RBF kernel k(x, y) = exp(-|x - y|^2 / h) and h = med^2 / log n, med the median pairwise
distance (Liu and Wang's choice), recomputed every step. The step is AdaGrad with momentum, as in
the authors' code: G <- 0.9 G + 0.1 phi^2, x <- x + lr phi / (1e-6 + sqrt(G)). The particles are
equally weighted draws; there is no density of them, so no ELBO, evidence or k-hat. Instead the run checks
Stein's identity on the final particles in the frame's coordinates (bayesx.diagnostics.stein: their spread as a
fraction of the posterior's variance, and the z-score of their mean gradient), one more gradient per particle,
and warns where either fails; judge a fit also by its error against a reference (``reference.enabled``). Per
step: n gradient evaluations and O(n^2 dim) kernel work.

Conditioning (issue 34). One isotropic bandwidth and AdaGrad's per-coordinate steps cannot follow a posterior
whose scales differ by orders of magnitude along correlated directions: on posteriordb's kilpisjarvi, arma11 and
sblri_blr SVGD from the initial points ended tens to thousands of posterior sds off. ``frame: gaussian`` (the
default) first fits full-rank Gaussian VI (bayesx.methods.vi.frame, as flowvi and GAP) and runs SVGD on the
target's density in the whitened coordinates w = L^-1 (z - m) of its q, grad_w = L^T grad_z, with the particles
drawn from N(0, I) there (the VI fit's q) and mapped back, z = m + L w. This is the affine preconditioning of
Wang, Tang, Bajaj and Liu (2019), "Stein variational gradient descent with matrix-valued kernels": the RBF kernel
on w is a kernel with the metric (L L^T)^-1 on z. The VI fit's gradients count in ``n_grad_evals``; a target
without a gradient, or a failed VI fit, gets no frame (tag ``frame``). ``frame: none`` is SVGD before issue 34,
from the target's initial points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
from torch import Tensor

from bayesx.diagnostics.stein import stein_checks
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit, Particles
from bayesx.methods.vi.frame import FrameChoice, fit_frame
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, Positive

MOMENTUM, FUDGE = 0.9, 1e-6


@dataclass(frozen=True)
class SVGDSettings(ApproximationSettings):
    n_particles: Annotated[int, AtLeast(2)] = 100
    num_steps: Annotated[int, AtLeast(1)] = 1000
    lr: Annotated[float, Positive()] = 0.05  # AdaGrad step
    bandwidth: Annotated[float | None, Positive()] = None  # h; null: median heuristic, every step
    repulsive: bool = True  # false drops the repulsive term: every particle climbs to a mode (a control)
    frame: FrameChoice = "gaussian"  # gaussian: move the particles in the whitened coordinates of a Gaussian VI fit


def stein_direction(x: Tensor, grad: Tensor, bandwidth: float | None, repulsive: bool = True) -> Tensor:
    """phi(x_i) for all particles x (n, dim) with grad log p at them (n, dim)."""
    n = x.shape[0]
    diff = x[:, None, :] - x[None, :, :]  # x_i - x_j, (n, n, dim)
    sq = (diff * diff).sum(-1)
    if bandwidth is None:
        med2 = torch.quantile(sq[~torch.eye(n, dtype=torch.bool, device=x.device)], 0.5)
        h = float(med2) / math.log(n + 1.0) if float(med2) > 0 else 1.0
    else:
        h = bandwidth
    k = torch.exp(-sq / h)  # symmetric, k[i, j] = k(x_i, x_j)
    drive = k @ grad  # sum_j k(x_j, x_i) grad log p(x_j)
    if not repulsive:
        return drive / n
    # grad_{x_j} k(x_j, x_i) = 2 (x_i - x_j) / h k(x_j, x_i), summed over j
    repel = (2.0 / h) * (k[..., None] * diff).sum(1)
    return (drive + repel) / n


class SVGD(Approximation):
    """Stein variational gradient descent; see the module docstring and ``conf/method/svgd.yaml``."""

    Settings = SVGDSettings
    name = "svgd"
    summary_keys = ("stein_spread_min", "stein_spread_max", "stein_score_zmax", "n_grad_evals", "fit_time_s")
    compare_keys = ("stein_spread_min", "stein_score_zmax", "fit_time_s")

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> Tensor:
        """``n_particles`` of the target's initial points: the particles' start without a frame, and the Gaussian VI
        fit's start with one."""
        return target.initial_point(self.settings.n_particles, gen)

    def gradient_batch(self, inputs: RunInputs) -> int:
        return self.settings.n_particles

    def approximate(self, target, inputs: RunInputs) -> Fit:
        cfg, out = self.settings, Fit()
        frame, out.tags["frame"] = fit_frame(cfg.frame, target, inputs, "SVGD")
        x = inputs.initial.clone() if frame.gaussian is None else torch.randn(
            inputs.initial.shape, generator=inputs.gen, dtype=inputs.initial.dtype, device=inputs.gen.device
        ).to(inputs.initial.device)  # the frame's q, N(0, I) in its coordinates
        history = torch.zeros_like(x)
        bar = progress_bar(cfg.num_steps, "svgd", inputs.progress, "step")
        step = 0
        with interruptible(out, bar, lambda: f"fit (step {step})"):
            for step in range(1, cfg.num_steps + 1):
                _, grad = frame.density_and_grad(target, x)
                if not bool(torch.isfinite(grad).all()):
                    out.error = (f"a gradient of log p is not finite at step {step}: lower method.lr "
                                 f"(now {cfg.lr:g})")
                    break
                phi = stein_direction(x, grad, cfg.bandwidth, cfg.repulsive)
                history = MOMENTUM * history + (1.0 - MOMENTUM) * phi * phi if step > 1 else phi * phi
                x = x + cfg.lr * phi / (FUDGE + history.sqrt())
                bar.update(1)
        checked = 0
        if bool(torch.isfinite(x).all()):  # Stein's identity in the frame's coordinates: the particles' own check
            _, grad = frame.density_and_grad(target, x)
            checked = cfg.n_particles
            if bool(torch.isfinite(grad).all()):
                out.metrics.update(stein_checks(x, grad))
        out.metrics.update({"n_steps": float(step),
                            "n_grad_evals": float(step * cfg.n_particles + checked) + frame.grad_evals})
        out.approximation = Particles(frame.to_target(x), None)
        return out
