"""What an MCMC run's kernels say about the posterior itself, beyond mixing: signs that it is improper, and
points where the density is undefined.

- A step size that runs away. Hoffman and Gelman's (2014, Alg. 4) search doubles the step size while one
  leapfrog step is accepted; on a proper posterior the energy error of a step grows with its size, so the
  search stops within a few doublings of the posterior's scale (in the metric's units: near 1 once the metric
  is adapted). A search that ends RUNAWAY_FACTOR times above its guess has found steps of any size accepted:
  the density is flat at every scale the chains reach (an improper posterior, or one whose scale is beyond
  float precision), and the run ends FAILED in one line.
- A log density of +inf at a proposed point: a proper posterior's density is finite everywhere (its
  integral would be infinite), so the run ends FAILED in one line naming the point.
- A NaN log density or gradient at proposed points: the density is undefined there, the kernel rejects the
  step and the transition counts as divergent, but raising ``target_accept`` cannot help. Divergences of the
  sampling stage whose transition met a NaN are counted apart (``n_divergent_nan``), and the run's warning
  names the cause and a point, instead of the advice for divergences from a large energy error.

The kernels report these points per transition as ``info.faults`` (bayesx.kernels.common.DensityFaults, the
PyTorch kernels and the native NUTS tree alike); kernels without it are not watched.
"""

from __future__ import annotations

import torch

from bayesx.errors import DensityError

RUNAWAY_FACTOR = 1e15
COLLAPSE_FACTOR = 1e-15  # a search that ends this far below its guess found no step the kernel accepts
"""How far above its guess a step-size search may end before the density counts as flat at every scale: a
search of up to 60 doublings (2^60 ~ 1.2e18) that had to go this far accepted steps 15 orders of magnitude
longer than where it began."""


def point(values: torch.Tensor) -> str:
    """A position, short enough for one line."""
    shown = [f"{v:.3g}" for v in values.tolist()[:6]]
    return "[" + ", ".join(shown) + (", ...]" if values.numel() > 6 else "]")


def check_step_size_search(step_size: float, guess: float) -> float:
    """``step_size``, found by a search that began at ``guess``, unless it ran away (see the module)."""
    if step_size >= RUNAWAY_FACTOR * guess:
        raise DensityError(f"improper posterior likely: the step-size search accepted leapfrog steps of every size up "
                           f"to {step_size:.3g} (from {guess:.3g}), so the log density is flat at every scale the "
                           f"chains reach; give every parameter a proper prior, or check the density (a missing "
                           f"term, or a likelihood that does not depend on some parameters)")
    if not step_size > COLLAPSE_FACTOR * guess:
        raise DensityError(f"the step-size search shrank the step to {step_size:.3g} (from {guess:.3g}) and the kernel "
                           f"still accepts too few moves: no step is small enough, so the density is not smooth or "
                           f"not finite where the chains are, or the kernel's proposal does not shrink with its step "
                           f"size; check the density (or the kernel), or set method.step_size with "
                           f"method.adapt_step_size=false")
    return step_size


class FaultWatch:
    """Reads each transition's ``info.faults``: fails the run at a +inf log density; during sampling, counts the
    NaN points and the divergent transitions that met one, and keeps an example point."""

    def __init__(self):
        self.nan_points = 0
        self.nan_divergent = 0
        self.example: torch.Tensor | None = None
        self.watched = False

    def observe(self, info, sampling: bool, kept: bool = True) -> None:
        faults = getattr(info, "faults", None)
        if faults is None:
            return
        self.watched = True
        n_nan, n_posinf = torch.stack([faults.nan.sum(), faults.posinf.sum()]).tolist()
        if n_posinf:
            chain = int(torch.nonzero(faults.posinf).flatten()[0])
            raise DensityError(f"improper posterior likely: the log density is +inf at theta={point(faults.position[chain])}"
                               f" ({n_posinf} proposed point{'s' if n_posinf > 1 else ''} this transition); a proper "
                               f"posterior's density is finite everywhere: check the density there (a log of a "
                               f"vanishing denominator, or a likelihood that grows without bound)")
        if not (sampling and n_nan):
            return
        self.nan_points += n_nan
        if kept:
            self.nan_divergent += int((info.divergent & (faults.nan > 0)).sum())
        if self.example is None:
            self.example = faults.position[int(torch.nonzero(faults.nan).flatten()[0])].detach().to("cpu")

    def metrics(self) -> dict[str, float]:
        return {"n_divergent_nan": float(self.nan_divergent)} if self.watched else {}

    def warnings(self) -> list[str]:
        if not self.nan_divergent:
            return []
        return [f"{self.nan_divergent} divergent transition{'s' if self.nan_divergent > 1 else ''} met a NaN log "
                f"density: the log density is NaN at {self.nan_points} proposed point{'s' if self.nan_points > 1 else ''}"
                f" (e.g. theta={point(self.example)}), so the density is undefined there; constrain the parameter "
                f"(e.g. sample it on the log scale) or return -inf outside the support"]
