"""Toy densities with known answers (``model=density model.name=...``), for checking and comparing
variational methods and evidence estimators.

Each is an unnormalized log density with its exact log normalizer log Z and, where they exist, its
exact mean and standard deviation (closed form, or quadrature on a fine grid for the 2-D energies):

    t1           Student t with 1 dof (Cauchy): log p = -log(1 + x^2), Z = pi; no moments, so the
                 median (0) and the interquartile range (2) are reported instead
    bimodal      0.7 N(0, 1) + 0.3 N(5, 1)          (the GAP chapter's mixtures; Z = 1)
    far_bimodal  0.9 N(0, 1) + 0.1 N(15, 1)
    ais_toy      exp(-(x + 5)^2 / 4): N(-5, 2) unnormalized, Z = sqrt(4 pi) = 3.545 (the AIS example
                 of the advanced-VI lecture notes, with prior N(0, 1) as the AIS base)
    u1 .. u4     the 2-D energies of Rezende and Mohamed (2015), p = exp(-U); U1 (a ring, the research
                 journal's eq. 235) decays in every direction and is defined on the plane; U2-U4 do
                 not decay in z1 and live on the box [-4, 4]^2 where they are drawn (log p = -inf
                 outside). Moments and log Z by quadrature on that box (U1's mass outside it is
                 below 1e-6)
    funnel       Neal's funnel in 10-D: v ~ N(0, 9), x_i | v ~ N(0, e^v), i = 1..9 (Z = 1)
    banana       the twisted Gaussian of Haario et al. (1999): x1 ~ N(0, 100),
                 x2 | x1 ~ N(100 b - b x1^2, 1), b = 0.1 (Z = 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from bayesx.errors import BayesxError
from bayesx.settings import Settings
from bayesx.targets.base import Capabilities, Evaluation, TargetBase, moment_errors

NAMES = ("t1", "bimodal", "far_bimodal", "ais_toy", "u1", "u2", "u3", "u4", "funnel", "banana")
BOX = 4.0  # u1-u4 live on [-BOX, BOX]^2
BANANA_B = 0.1
LOG_2PI = math.log(2.0 * math.pi)


def _mixture(x: Tensor, weights, means) -> Tensor:
    terms = [math.log(w) - 0.5 * (x - m) ** 2 - 0.5 * LOG_2PI for w, m in zip(weights, means)]
    return torch.logsumexp(torch.stack(terms), 0)


def _energy(name: str, z: Tensor) -> Tensor:
    """U(z) of Rezende and Mohamed (2015), Table 1."""
    z1, z2 = z[..., 0], z[..., 1]
    w1 = torch.sin(2.0 * math.pi * z1 / 4.0)
    if name == "u1":
        ring = 0.5 * ((torch.linalg.vector_norm(z, dim=-1) - 2.0) / 0.4) ** 2
        return ring - torch.logaddexp(-0.5 * ((z1 - 2.0) / 0.6) ** 2, -0.5 * ((z1 + 2.0) / 0.6) ** 2)
    if name == "u2":
        return 0.5 * ((z2 - w1) / 0.4) ** 2
    if name == "u3":
        w2 = 3.0 * torch.exp(-0.5 * ((z1 - 1.0) / 0.6) ** 2)
        return -torch.logaddexp(-0.5 * ((z2 - w1) / 0.35) ** 2, -0.5 * ((z2 - w1 + w2) / 0.35) ** 2)
    w3 = 3.0 * torch.sigmoid((z1 - 1.0) / 0.3)
    return -torch.logaddexp(-0.5 * ((z2 - w1) / 0.4) ** 2, -0.5 * ((z2 - w1 + w3) / 0.35) ** 2)


def log_density(name: str, q: Tensor) -> Tensor:
    """The unnormalized log density of toy ``name`` at q (..., dim)."""
    if name == "t1":
        return -torch.log1p(q[..., 0] ** 2)
    if name == "bimodal":
        return _mixture(q[..., 0], (0.7, 0.3), (0.0, 5.0))
    if name == "far_bimodal":
        return _mixture(q[..., 0], (0.9, 0.1), (0.0, 15.0))
    if name == "ais_toy":
        return -((q[..., 0] + 5.0) ** 2) / 4.0
    if name == "funnel":
        v, x = q[..., 0], q[..., 1:]
        log_v = -0.5 * (v / 3.0) ** 2 - math.log(3.0) - 0.5 * LOG_2PI
        log_x = -0.5 * (x * x).sum(-1) * torch.exp(-v) - 0.5 * x.shape[-1] * (v + LOG_2PI)
        return log_v + log_x
    if name == "banana":
        x1, x2 = q[..., 0], q[..., 1]
        return (-0.5 * x1**2 / 100.0 - 0.5 * (x2 + BANANA_B * x1**2 - 100.0 * BANANA_B) ** 2
                - LOG_2PI - math.log(10.0))
    if name == "u1":
        return -_energy(name, q)
    inside = (q.abs() <= BOX).all(-1)
    return torch.where(inside, -_energy(name, q), torch.full_like(q[..., 0], -math.inf))


@dataclass(frozen=True)
class Truth:
    """What is known exactly: log Z, and the mean and sd per coordinate (None where they do not exist)."""

    log_z: float
    mean: np.ndarray | None
    sd: np.ndarray | None


def quadrature_truth(log_prob, box: tuple[tuple[float, float], tuple[float, float]], n: int = 801,
                     device: str | torch.device = "cpu") -> Truth:
    """log Z, mean and sd of a 2-D unnormalized log density on box = ((x0, x1), (y0, y1)) by the
    trapezoid rule on an n x n grid. The grid is float64 on ``device`` (where the density's own tensors
    live); the sums are taken on the CPU."""
    axes = [torch.linspace(lo, hi, n, dtype=torch.float64) for lo, hi in box]
    z = torch.stack(torch.meshgrid(*axes, indexing="ij"), -1)
    log_p = log_prob(z.to(device)).to("cpu", torch.float64)
    w = torch.ones(n, dtype=torch.float64)
    w[0] = w[-1] = 0.5
    log_w = torch.log(w[:, None] * w[None, :]) + math.log(float(axes[0][1] - axes[0][0])) \
        + math.log(float(axes[1][1] - axes[1][0]))
    log_z = float(torch.logsumexp(log_p + log_w, (0, 1)))
    p = torch.exp(log_p + log_w - log_z)
    mean = (p[..., None] * z).sum((0, 1))
    var = (p[..., None] * (z - mean) ** 2).sum((0, 1))
    return Truth(log_z, mean.numpy(), var.sqrt().numpy())


def _quadrature_truth(name: str, n: int = 801) -> Truth:
    """A 2-D energy's truth on its box [-BOX, BOX]^2."""
    return quadrature_truth(lambda z: log_density(name, z), ((-BOX, BOX), (-BOX, BOX)), n)


def truth_of(name: str) -> Truth:
    if name == "t1":
        return Truth(math.log(math.pi), None, None)
    if name == "bimodal":
        return Truth(0.0, np.array([1.5]), np.array([2.5]))  # var = 1 + 0.7 * 0.3 * 5^2
    if name == "far_bimodal":
        return Truth(0.0, np.array([1.5]), np.array([math.sqrt(1.0 + 0.9 * 0.1 * 15.0**2)]))
    if name == "ais_toy":
        return Truth(0.5 * math.log(4.0 * math.pi), np.array([-5.0]), np.array([math.sqrt(2.0)]))
    if name == "funnel":  # sd of x_i: sqrt(E e^v) = exp(9 / 4)
        return Truth(0.0, np.zeros(10), np.array([3.0] + [math.exp(9.0 / 4.0)] * 9))
    if name == "banana":  # x2 = y - b x1^2 + 100 b: var = 1 + b^2 var(x1^2) = 1 + b^2 2 (100)^2
        return Truth(0.0, np.zeros(2), np.array([10.0, math.sqrt(1.0 + 2.0 * (BANANA_B * 100.0) ** 2)]))
    return _quadrature_truth(name)


DIMS = {"funnel": 10, "u1": 2, "u2": 2, "u3": 2, "u4": 2, "banana": 2}
PLANE = ("u1", "u2", "u3", "u4")  # the 2-D energies whose mass lies in [-4, 4]^2 (grids, density plots)


def plane_density(name: str, experiment: str) -> "Density":
    """The toy density ``name`` for an experiment that draws on the plane [-4, 4]^2; a one-line error
    for a density of another dimension or one whose mass is not in that square."""
    if name not in PLANE:
        dim = DIMS.get(name, 1) if name in NAMES else None
        what = f"{name!r} has dimension {dim}" if dim is not None else f"{name!r} is not a toy density"
        raise BayesxError(f"{experiment} draws densities on the plane [-4, 4]^2, but {what}; "
                          f"choose one of {', '.join(PLANE)}")
    return Density(name=name)


@dataclass(frozen=True)
class DensitySettings(Settings):
    name: Literal["t1", "bimodal", "far_bimodal", "ais_toy", "u1", "u2", "u3", "u4", "funnel", "banana"] = "bimodal"


class KnownAnswers(TargetBase):
    """A target that makes its own observations and knows its ``truth`` (log Z, mean, sd): it reports
    the log normalizer and the errors of draws against the exact moments."""

    capabilities = Capabilities(uses_data=False, exact_moments=True, exact_log_normalizer=True)
    param_name = "z"
    truth: Truth

    def log_normalizer(self) -> float:
        return self.truth.log_z

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        return moment_errors(draws, self.truth.mean, self.truth.sd)


class Density(KnownAnswers):
    """One of the toy densities of the module docstring; evaluation against its exact answers."""

    Settings = DensitySettings
    init_scale = 2.0

    def __init__(self, settings: DensitySettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        cfg = self.configure(settings, options)
        self.name, self.dim = cfg.name, DIMS.get(cfg.name, 1)
        self.device, self.dtype = torch.device(device), dtype
        self.truth = truth_of(self.name)

    def log_prob(self, q: Tensor) -> Tensor:
        return log_density(self.name, q)

    def support_box(self) -> float | None:
        return BOX if self.name in ("u2", "u3", "u4") else None

    def evaluate(self, draws: Tensor, sample_stats=None) -> Evaluation:
        """Errors of the draws' mean and sd in units of the true sd (median and IQR for t1)."""
        if self.truth.mean is None:  # Cauchy: median 0, quartiles -1 and 1
            flat = draws.reshape(-1, self.dim).double().cpu().numpy()
            q25, q50, q75 = np.quantile(flat[:, 0], [0.25, 0.5, 0.75])
            return Evaluation({"median_err": abs(float(q50)) / 2.0, "iqr_err": abs(float(q75 - q25) - 2.0) / 2.0})
        return super().evaluate(draws, sample_stats)

    def describe(self) -> dict[str, str]:
        return {"dim": str(self.dim), "density": self.name}
