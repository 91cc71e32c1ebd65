"""Geometric approximation of the posterior, GAP (``method=gap``; Chen (2019), ch. 2, Algorithms 2.2
and 2.3).

Densities are mapped to their square roots, which lie on the unit sphere of L^2; the spherical
Fisher distance between p and a Gaussian q_theta = N(mu, L L^T) is arccos <sqrt q_theta, sqrt p>.
GAP climbs <sqrt q_theta, sqrt p> along the tangent space of the Gaussian family at theta:

    v_i  = d sqrt(q_theta) / d theta_i = sqrt(q_theta) s_i,   s = grad_theta (1/2 log q_theta)
    G_ij = <v_i, v_j> = E_{q_theta}[s_i s_j]             (the Gram matrix: a quarter of the Fisher information)
    a_i  = <v_i, sqrt p> = E_{q_theta}[sqrt(p / q_theta) s_i]
    c_0  = <sqrt q_theta, sqrt p> = E_{q_theta} sqrt(p / q_theta)

Gram-Schmidt of the v_i in their order gives the orthonormal basis w = v G_L^{-T} with G = G_L G_L^T
(Cholesky), so c = <w, sqrt p> = G_L^{-1} a. The thesis writes each c_j with determinants and minors
of leading principal submatrices (its D_j, M_ji, E_j, N_ji); the triangular solve is the same
number (tests/test_gap.py checks both), at O(n^3) instead of a determinant per minor. The update,
as printed, moves each parameter by its coordinate in the orthonormal basis:

    theta_i <- theta_i + eps_i c_i / sqrt(1 - c_0^2),   eps = eps_mu for the mean, eps_l for vech(L).

theta = (mu, vech(L)) with L lower triangular (``family: fullrank``, the thesis'), or (mu, the
diagonal of L) (``family: meanfield``, our restriction, for larger dimensions); ``family: auto``
(the default) is full rank where the basis fits ``max_basis`` and mean-field beyond, with the
choice in the run's ``q_family`` tag. The Gram blocks are
in closed form (Isserlis' theorem; the thesis' appendix 2.5.2): G_mumu = Sigma^-1 / 4, G_mu,L = 0,
and with M = L^-T, for lower-triangular entries (a, b) and (a', b'),

    G_(ab),(a'b') = 1/4 [ (M M^T)_aa' delta_bb' + M_ab' M_a'b ].

a and c_0 are Monte Carlo means over ``n_mc`` draws. The thesis draws z ~ q_theta and averages
sqrt(p / q_theta) (times the scores for a), whose variance E_p[s^2] is infinite for a heavy-tailed p: on t(1)
with 1,000 draws its fits scattered from 3.71 to 4.39 around the optimum 3.771. GAP draws instead from the
root density rho = N(mu, 2 Sigma) (sqrt(q_theta) normalized) and averages sqrt(q_theta p) / rho, the same
expectations with variance E_rho[p s^2] up to a constant, finite whenever rho's tails are lighter than
p's (``draws_from: root``; ``q`` is the thesis'). p must be normalized for c_0 to be a cosine: GAP uses the
target's exact log Z where it declares one (``capabilities.exact_log_normalizer``), else the
importance-sampling estimate of the same draws. The distance arccos c_0 is the stepped metric ``distance``.

The step's factor 1 / sqrt(1 - c_0^2) grows without bound as a Monte Carlo c_0 nears 1, and taken from the
same draws as the direction it correlates with it, so the iterates settle off the optimum; GAP takes it from
an exponential average of the past iterations' cosines (``cosine_smoothing``, 0.9; 0: the thesis'), and a
cosine of 1 or more allows no step (the iteration is skipped and counted, ``n_skipped_steps``). The reported
q is the elementwise median of the parameters over the last ``average`` share of the iterations (0: the last
iterate), during which the steps shrink as 1 / (1 + k / step_decay) (Robbins and Monro; null: the thesis'
constant steps); the trace shows every step. With these defaults the t(1) fit is 3.74-3.85 over seeds 0-9
(within 2.1% of 3.771; the thesis' settings, all three off, 3.71-4.39), measured 2026-11-26.

Conditioning (issue 34). The steps eps_mu and eps_l are in the units of q's parameters, and the Gram blocks
grow as Sigma^-1: on a badly scaled, correlated posterior (posteriordb's sblri_blr, diamonds, kilpisjarvi) GAP
from N(init_mean, init_sd^2 I) ended hundreds of posterior sds off, or its Gram block lost positive
definiteness. ``frame: gaussian`` (the default) first fits full-rank Gaussian VI (bayesx.methods.vi.frame, as
flowvi) and runs GAP on the target's density in the whitened coordinates w = L^-1 (z - m) of its q, starting at
N(0, init_sd^2 I) there (init_sd 1: the VI fit itself), with eps_l 1 by default (5 without the frame).
Near the optimum the factor 1 / sqrt(1 - c_0^2) divides the Monte Carlo noise of c by the distance, so the
thesis' eps_l 5 made the iterate wander at distance ~1 on a 10-d Gaussian started at its optimum. The Hellinger distance is invariant under the affine
map, so this is a reparametrization with the same optimum, reached from a start near it with a well-conditioned
basis; the fitted q is mapped back, N(m + L mu, (L S)(L S)^T), and the VI fit's gradients are GAP's
``n_grad_evals``. ``family: meanfield`` is then diagonal in w, not in z. A target without a gradient gets no
frame (tag ``frame``). ``frame: none`` is GAP before issue 34 (``init_mean`` applies there only). A step that
breaks the iterate (a Gram block not positive definite, a non-finite mean or scale) ends the run FAILED with
one line naming GAP, the iteration and the fix; a draw where log p is NaN counts as one of zero density.

Noise in many coordinates (issue 34). Near the optimum c is Monte Carlo noise, about sqrt(k / n_mc) in norm over
its k coordinates, and the factor 1 / sqrt(1 - c_0^2) divides it by the distance: in one or two coordinates (t(1),
the mixtures) this is a jitter the median absorbs, but on posteriordb's diamonds (26-d: 351 scale coordinates) it
carried the scales 2-4 reference sds off or broke the Gram block within 33 iterations. Each block of c (the mean's,
L's) is therefore replaced by its positive-part James-Stein estimate (James and Stein 1961), c (1 - (k - 2)/k
tr Cov(c) / |c|^2)_+, with tr Cov(c) the Monte Carlo variance of c from the same draws (``shrink: james_stein``,
the default; ``none``: the thesis' step): far from the optimum the signal dominates and the step is the thesis',
at the optimum it shrinks to zero. Blocks of k <= 2 are never shrunk, so t(1) and the mixtures are unchanged.
Measured 2026-11-26 on diamonds with 1000 draws per iteration, seeds 0-2: 0.09-0.11 reference sds in mean and sd,
k-hat 0.14-0.28; without the shrinkage 1.7 / 4.0 (k-hat 10) and a failure at iteration 33. Those fits still stopped
short of a long run's (5000 draws, 1500 iterations: importance ESS fraction 0.96 against 0.75-0.78), so the draws per
iteration default to max(1000, 100 dim) (``n_mc: null``; 2600 on diamonds: 0.91 on seed 0; t(1) and the mixtures keep
1000).

Cost per iteration: n_mc target evaluations (no gradients of p), and for the full-rank family
the n_mc x n_l scores and a Cholesky of the n_l x n_l Gram block, n_l = D (D + 1) / 2. Measured on
this project's 2-core CPU with 1000 draws: about 0.1 s per iteration up to D = 44 (n_l = 990) and
0.5 s at D = 64 (n_l = 2080; 1000 iterations take 9 min); memory grows as n_l^2 (D = 300: 45,150^2
doubles, 16 GB). The James-Stein step solves the Gram block for every draw's terms (n_mc right-hand sides instead of
one) and the default draws grow as 100 D: measured 2026-11-26 on a correlated Gaussian, 2 threads, 11 / 13 / 34 ms
per iteration at D = 26 (thesis' step at 1000 draws / shrunk at 1000 / the defaults, 2600 draws) and 60 / 63 / 207 ms
at D = 44 (4400 draws): 1000 iterations at D = 44 take about 3.5 min with the defaults. GAP refuses, before a run starts, a full-rank basis larger than ``max_basis``
(1000 by default, D = 44); raise it knowingly, or use ``family: meanfield`` (2D parameters, a
diagonal Gram block, linear cost) or another method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import Tensor

from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit
from bayesx.methods.vi.frame import FrameChoice, IdentityFrame, fit_frame
from bayesx.nn.distributions import GaussianQ
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, Between, InvalidSetting, Positive

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class GAPSettings(ApproximationSettings):
    family: Literal["auto", "fullrank", "meanfield"] = "auto"  # auto: fullrank up to max_basis, else meanfield
    num_steps: Annotated[int, AtLeast(1)] = 1000
    n_mc: Annotated[int | None, AtLeast(2)] = None  # draws per iteration for a and c_0; null: max(1000, 100 dim)
    eps_mu: Annotated[float, Positive()] = 0.1  # the thesis' eps_alpha (t(1): 0.1)
    eps_l: Annotated[float | None, Positive()] = None  # the thesis' eps_beta; null: 1 in the frame, 5 without (t(1))
    init_mean: tuple[float, ...] | None = None  # null: the mean of the initial points
    init_sd: Annotated[float, Positive()] = 1.0  # L starts at init_sd I
    max_basis: Annotated[int, AtLeast(1)] = 1000  # the largest full-rank n_l = D (D + 1) / 2 allowed (D = 44)
    average: Annotated[float, Between(0.0, 1.0, closed=True)] = 0.5  # the share of final iterates whose median is q
    draws_from: Literal["root", "q"] = "root"  # root: N(mu, 2 Sigma), finite-variance estimates; q: the thesis'
    # weight of the past in the step's c_0 (0: this iteration's, the thesis')
    cosine_smoothing: Annotated[float, Between(0.0, 1.0, closed_low=True)] = 0.9
    step_decay: Annotated[int | None, AtLeast(1)] = 20  # averaged steps shrink as 1 / (1 + k / decay); null: thesis
    frame: FrameChoice = "gaussian"  # gaussian: climb in the whitened coordinates of a full-rank Gaussian VI fit
    shrink: Literal["james_stein", "none"] = "james_stein"  # the step's coordinates c, shrunk by their noise; none: thesis


def lower_indices(dim: int, family: str) -> tuple[Tensor, Tensor]:
    """Row and column indices of the free entries of L: vech order (column by column) or the diagonal."""
    if family == "meanfield":
        idx = torch.arange(dim)
        return idx, idx
    rows, cols = [], []
    for b in range(dim):  # column-wise, as vech stacks them
        for a in range(b, dim):
            rows.append(a)
            cols.append(b)
    return torch.tensor(rows), torch.tensor(cols)


def inverse_transpose(chol: Tensor) -> Tensor:
    """M = L^-T, which both the Gram blocks and the scores need (one triangular solve per iteration)."""
    eye = torch.eye(chol.shape[0], dtype=chol.dtype, device=chol.device)
    return torch.linalg.solve_triangular(chol, eye, upper=False).T


def gram_blocks(m: Tensor, rows: Tensor, cols: Tensor) -> tuple[Tensor, Tensor]:
    """(G_mumu, G_LL) in closed form from M = L^-T."""
    mmt = m @ m.T  # Sigma^-1
    g_l = 0.25 * (mmt[rows][:, rows] * (cols[:, None] == cols[None, :]) + m[rows][:, cols].T * m[rows][:, cols])
    return 0.25 * mmt, g_l


def scores(z: Tensor, mean: Tensor, chol: Tensor, m: Tensor, rows: Tensor, cols: Tensor) -> tuple[Tensor, Tensor]:
    """Per-draw s = grad (1/2 log q) in mu (n, D) and in the free entries of L (n, n_l); M = L^-T."""
    u = torch.linalg.solve_triangular(chol, (z - mean).T, upper=False).T  # L^-1 (z - mu)
    mu_ = u @ m.T  # rows: (M u)^T = (Sigma^-1 (z - mu))^T
    # d(1/2 log q)/dL = 1/2 L^-T (u u^T - I): entry (a, b) = 1/2 [ (M u)_a u_b - M_ab ]
    return 0.5 * mu_, 0.5 * (mu_[:, rows] * u[:, cols] - m[rows, cols])


def orthonormal_coordinates(gram: Tensor, terms: Tensor) -> tuple[Tensor, float]:
    """<w_j, sqrt p> for the Gram-Schmidt basis w of vectors with Gram matrix ``gram``, from the per-draw terms
    (n, k) whose mean is a = <v_i, sqrt p>: c = G_L^-1 a with G = G_L G_L^T (the thesis' minors formula), and the
    Monte Carlo variance of c summed over its k coordinates, tr Cov(c) = sum_j var_i (G_L^-1 t_i)_j / n."""
    per_draw = torch.linalg.solve_triangular(torch.linalg.cholesky(gram), terms.T, upper=False)  # (k, n)
    return per_draw.mean(1), float(per_draw.var(1).sum()) / terms.shape[0]


def james_stein(c: Tensor, noise: float) -> Tensor:
    """The positive-part James-Stein estimate (James and Stein 1961) of the k coordinates c whose Monte Carlo
    variances sum to ``noise``: c (1 - (k - 2)/k noise / |c|^2)_+. Far from the optimum |c|^2 >> noise and c is kept;
    where c is mostly noise (at the optimum, in many coordinates) the step shrinks to zero. k <= 2 is kept as is."""
    k = c.numel()
    if k <= 2:
        return c
    size = float(c @ c)
    return c * max(0.0, 1.0 - (k - 2) / k * noise / size) if size > 0 else c


def positive_diagonal(chol: Tensor) -> Tensor:
    """The same Sigma = L L^T with every column of L signed so that its diagonal entry is positive
    (the updates may carry a diagonal entry through zero; medians need one sign convention)."""
    signs = torch.sign(chol.diagonal())
    return chol * torch.where(signs == 0, torch.ones_like(signs), signs)[None, :]


class GAP(Approximation):
    """Geometric approximation of the posterior; see the module docstring and ``conf/method/gap.yaml``."""

    Settings = GAPSettings
    name = "gap"
    summary_keys = ("distance_final", *Approximation.summary_keys)
    compare_keys = ("distance_final", *Approximation.compare_keys)

    def needs_gradients(self) -> bool:  # the Hellinger fit evaluates log p only (the frame only where p has a gradient)
        return False

    def family_for(self, target) -> str:
        """The family a run uses: ``auto`` is the thesis' full rank where its basis fits ``max_basis``."""
        if self.settings.family != "auto":
            return self.settings.family
        return "fullrank" if target.dim * (target.dim + 1) // 2 <= self.settings.max_basis else "meanfield"

    def check(self, target, n_chains: int) -> None:
        if self.settings.frame == "gaussian" and self.settings.init_mean is not None:
            raise InvalidSetting("init_mean", "is the start of method.frame=none; with the Gaussian VI frame (the "
                                 "default) GAP starts at the VI fit: drop init_mean or set method.frame=none")
        n_l = target.dim * (target.dim + 1) // 2
        if self.settings.family == "fullrank" and n_l > self.settings.max_basis:
            raise InvalidSetting("family", f"=fullrank needs a tangent basis of {n_l} covariance directions at "
                                 f"dim={target.dim} (a {n_l} x {n_l} Gram matrix per iteration), above max_basis="
                                 f"{self.settings.max_basis}; use method.family=meanfield or method=vi")

    def approximate(self, target, inputs: RunInputs) -> Fit:
        initial, gen, progress = inputs.initial, inputs.gen, inputs.progress
        out = Fit()
        cfg = self.settings
        family = self.family_for(target)
        dim, dtype, device = target.dim, target.dtype, target.device
        frame, out.tags["frame"] = fit_frame(cfg.frame, target, inputs, "GAP")
        if frame.gaussian is not None:  # the frame's q is N(0, I) in its coordinates w
            mean = torch.zeros(dim, dtype=dtype, device=device)
        else:
            mean = (torch.tensor(cfg.init_mean, dtype=dtype, device=device) if cfg.init_mean is not None
                    else initial.mean(0).to(dtype))
        if mean.shape != (dim,):
            raise InvalidSetting("init_mean", f"has {mean.numel()} values for a target of dimension {dim}")
        chol = cfg.init_sd * torch.eye(dim, dtype=dtype, device=device)
        rows, cols = lower_indices(dim, family)
        log_z = target.log_normalizer() if target.capabilities.exact_log_normalizer else None
        trace, step, skipped, smoothed_c0 = [], 0, 0, None
        first_averaged = cfg.num_steps - int(cfg.average * cfg.num_steps)
        kept_means, kept_chols = [], []
        bar = progress_bar(cfg.num_steps, f"gap ({family})", progress, "step")
        with interruptible(out, bar, lambda: f"fit (step {step})"):
            for step in range(1, cfg.num_steps + 1):
                q = GaussianQ(mean, positive_diagonal(chol))  # the same q; log q needs a positive diagonal
                ratio, z = self._root_ratios(target, frame, q, log_z, gen)
                c0 = float(ratio.mean())
                bar.update(1)
                # the step's scale 1 / sqrt(1 - c_0^2) from past iterations' cosines (smoothed): with this
                # iteration's own c_0 the scale correlates with the step's direction and the iterates settle off
                # the optimum; 0 is the thesis' (this iteration's c_0)
                scale_c0 = c0 if smoothed_c0 is None or cfg.cosine_smoothing == 0 else smoothed_c0
                smoothed_c0 = c0 if smoothed_c0 is None else cfg.cosine_smoothing * smoothed_c0 + (
                    1.0 - cfg.cosine_smoothing) * c0
                if not scale_c0 < 1.0:  # a cosine above 1: Monte Carlo noise near the optimum; no step can be made
                    skipped += 1
                    continue
                try:
                    c_mu, c_l = self._coordinates(family, ratio, z, mean, chol, rows, cols, cfg.shrink == "james_stein")
                except torch.linalg.LinAlgError:
                    out.error = self._diverged(step, "the Gram matrix of its tangent basis is not positive definite "
                                                     "(q's scale L became singular)")
                    return out
                scale = 1.0 / math.sqrt(1.0 - scale_c0 * scale_c0)
                if cfg.step_decay is not None and step > first_averaged:  # Robbins-Monro while averaging
                    scale /= 1.0 + (step - first_averaged) / cfg.step_decay
                mean = mean + cfg.eps_mu * c_mu * scale
                chol = chol.clone()
                chol[rows, cols] += self.step_l() * c_l * scale
                if not bool(torch.isfinite(mean).all() and torch.isfinite(chol).all()):
                    out.error = self._diverged(step, "its step made q's mean or scale non-finite")
                    return out
                trace.append((step, math.acos(min(c0, 1.0))))
                if step > first_averaged:
                    kept_means.append(mean)
                    kept_chols.append(positive_diagonal(chol))
                if step % 50 == 0:
                    bar.set_postfix(distance=f"{trace[-1][1]:.4g}")
        out.traces["distance"] = trace
        out.metrics.update({"n_steps": float(step), "n_skipped_steps": float(skipped),
                            "distance_final": trace[-1][1] if trace else float("nan")})
        if kept_means:  # the median of the last iterates: the Monte Carlo steps jitter, and now and then leap
            mean = torch.stack(kept_means).median(0).values
            chol = torch.stack(kept_chols).median(0).values
        out.tags.update({"q_family": family, "gap_normalizer": "exact" if log_z is not None else "importance"})
        if frame.gaussian is not None:
            out.metrics["n_grad_evals"] = frame.grad_evals  # the frame's VI fit; GAP's own steps use none
        q = frame.to_target_q(GaussianQ(mean, positive_diagonal(chol)))
        out.fitted.update({"q_mean": q.mean.cpu(), "q_scale": q.scale.cpu()})
        out.approximation = q
        return out

    def _diverged(self, step: int, what: str) -> str:
        """The run's one-line failure where GAP's iterate broke down at ``step``, with the fix."""
        cfg = self.settings
        fix = ("use the Gaussian VI frame (method.frame=gaussian), or lower method.eps_l and method.eps_mu "
               if cfg.frame == "none" else "lower method.eps_l and method.eps_mu ")
        return f"GAP diverged at iteration {step}: {what}; {fix}(now {self.step_l():g} and {cfg.eps_mu:g})"

    def draws_per_iteration(self, dim: int) -> int:
        """n_mc: the setting, or by default max(1000, 100 dim): the noise of c grows with its number of coordinates
        (module docstring), and at 1000 draws diamonds (26-d) stopped short of the optimum a long run reaches."""
        return self.settings.n_mc if self.settings.n_mc is not None else max(1000, 100 * dim)

    def step_l(self) -> float:
        """eps_l: the setting, or by default 1 with the frame (its q is near the optimum; the thesis' 5 makes the
        iterate wander at distance ~1 in 10 dimensions) and the thesis' 5 without."""
        if self.settings.eps_l is not None:
            return self.settings.eps_l
        return 1.0 if self.settings.frame == "gaussian" else 5.0

    @staticmethod
    def _coordinates(family: str, ratio: Tensor, z: Tensor, mean: Tensor, chol: Tensor, rows: Tensor,
                     cols: Tensor, shrink: bool) -> tuple[Tensor, Tensor]:
        """(c_mu, c_l): the coordinates of sqrt p in the orthonormalized tangent basis at q = N(mean, chol chol^T),
        from the ratios at the draws z, each block James-Stein shrunk where ``shrink``; raises
        torch.linalg.LinAlgError where a Gram block is not positive definite."""
        m = inverse_transpose(chol)
        s_mu, s_l = scores(z, mean, chol, m, rows, cols)
        g_mu, g_l = gram_blocks(m, rows, cols)
        if family == "meanfield":
            g_l = torch.diag(g_l.diagonal())
        blocks = (orthonormal_coordinates(g_mu, ratio[:, None] * s_mu), orthonormal_coordinates(g_l, ratio[:, None] * s_l))
        return tuple(james_stein(c, noise) if shrink else c for c, noise in blocks)

    def _root_ratios(self, target, frame: IdentityFrame, q: GaussianQ, log_z: float | None,
                     gen: torch.Generator) -> tuple[Tensor, Tensor]:
        """The ratios r(z) at n_mc draws z (returned in that order), whose means are c_0 = <sqrt q, sqrt p>
        and, times the scores, a_i = <v_i, sqrt p>: from the root density rho = N(mu, 2 Sigma) (sqrt q
        normalized), r = sqrt(q p) / rho, with variance E_rho[p s^2] up to a constant; or from q as the thesis,
        r = sqrt(p / q), whose variance E_p s^2 is infinite for heavy tails (t(1): the fits scattered 3.7-4.4
        around the optimum 3.77). log Z: exact where the target knows it, else importance sampling with the
        same draws. p is the target's density in the frame's coordinates (normalized as the target's); a draw where
        log p is NaN counts as one of zero density."""
        n = self.draws_per_iteration(q.mean.shape[0])
        sampler = q if self.settings.draws_from == "q" else GaussianQ(q.mean, math.sqrt(2.0) * q.scale)
        z = sampler.sample(n, gen)
        log_p = torch.nan_to_num(frame.log_prob(target, z), nan=-math.inf)
        log_q, log_sampler = q.log_prob(z), sampler.log_prob(z)
        norm = log_z if log_z is not None else float(torch.logsumexp(log_p - log_sampler, 0)) - math.log(n)
        ratio = torch.exp(0.5 * (log_p - norm + log_q) - log_sampler)
        return torch.nan_to_num(ratio, nan=0.0), z
