"""Gaussian variational inference (``method=vi``), the first method of the approximation family and
the worked example of ARCHITECTURE.md.

q(z) = N(mu, S) with S = diag(sigma^2) (``family: meanfield``) or S = L L^T (``family: fullrank``,
L lower triangular with a positive diagonal) maximizes, by default,

    ELBO(q) = E_q[log p(z)] + H(q),   H(q) = sum_j log L_jj + dim/2 (1 + log 2 pi),

the variational free energy of Beal's and Bishop's treatments ("KL(q || p)"), by Adam on the
reparameterized Monte Carlo estimate (Kingma and Welling 2014; Titsias and Lazaro-Gredilla 2014)
with the draws z_i = mu + L eps_i, eps_i ~ N(0, I), i = 1..num_mc. The other divergences weigh the
same draws (``ascent``). Every objective's gradient has one closed form,

    d/dmu = sum_i w_i a_i,    d/dL = tril(sum_i w_i a_i eps_i^T) + s diag(1 / L_jj),

with a_i = grad log p(z_i), s = +1 for the ELBO and the Renyi bounds (w_i = 1/num_mc for the
ELBO), and a_i = L^-T eps_i, s = -1 for KL(p || q); only the target's ``log_prob_and_grad`` is
needed, never autograd, so the method runs on any target (the PDE posterior's adjoint gradient,
the native logistic kernel) and a step costs little more than the num_mc gradients.
For a Gaussian target with precision P the mean-field optimum has the exact mean and the variances
1 / P_jj: it under-estimates marginal variances where the posterior is correlated (MacKay 2003,
ch. 33; Bishop 2006, sec. 10.1.2), which the tests use as a known answer.

Start, coordinates, step sizes and convergence (issue 34). Adam moves every parameter by about ``lr`` per
step whatever the posterior's scale, so on a badly scaled, correlated posterior (posteriordb's diamonds:
sds from 0.001 to 0.3, correlations whose precision is 3e4 times the conditional one) Adam on the raw
(mean, log sd or Cholesky) parameters ends many posterior sds from the optimum: its noise floor is lr in
absolute units and the ridge takes thousands of steps to cross. So, by default:

- ``init: mode``: the fit starts at the L-BFGS mode (``_start``), or at the initial points' mean where the
  mode search runs away or ends in a funnel's neck (a q there has the lower ELBO); the gradients it spends
  are counted (``mode_search_grad_evals``) and the tag ``vi_start`` says which start was taken and why;
- ``whiten: true``: (mean, raw) describe q in the whitened coordinates w = L0^-1 (z - m0) of a frame
  N(m0, L0 L0^T), the average q of the last window of ``check_every`` steps (Polyak and Juditsky 1992),
  renewed at every window with Adam's moments reset. A step of lr is then lr posterior sds along q's own
  axes whatever the target's units: a preconditioning by q's covariance, close to the natural gradient
  of a Gaussian family near its optimum. Mean-field q's own axes are the coordinate axes, which do not
  decorrelate the mean, so its mean is also moved through B u with B = |P|^-1/2 for the window's
  least-squares secant estimate of the average Hessian (bayesx.methods.vi.curvature).
- the plateau rule, unchanged: every ``check_every`` steps the window's mean objective is compared with the
  previous window's; a rise below ``tol`` nats halves the step size, up to ``lr_halvings`` times, and the
  next plateau ends the fit. ``converged`` (metric 1/0 and tag) says whether that rule ended the fit
  rather than ``num_steps``, with the last window's rise as ``objective_window_rise``; a fit that did not
  converge warns in one line.

``whiten: false, init: points`` is the optimizer before issue 34 (Adam on the raw parameters from the
initial points' mean); results/vi_posteriordb.md compares the two on the posteriordb suite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesx.nn.distributions import GaussianQ
from bayesx.kernels.density import Density
from bayesx.methods.common.optimize import climb, in_a_neck
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.curvature import SecantCurvature

SECANT_UP_TO = 2000
"""Mean-field's secant preconditioner keeps dim x dim matrices and an eigendecomposition per window: O(dim^2)
memory and O(dim^3) work, so above this dimension the mean is not preconditioned (mean-field stays O(dim))."""
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit
from bayesx.methods.vi.windows import ElboWindows
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, Between, InvalidSetting, Positive


@dataclass(frozen=True)
class GaussianVISettings(ApproximationSettings):
    family: Literal["meanfield", "fullrank", "jj"] = "meanfield"
    num_steps: Annotated[int, AtLeast(1)] = 5000
    num_mc: Annotated[int, AtLeast(1)] = 8
    lr: Annotated[float, Positive()] = 0.1
    lr_halvings: Annotated[int, AtLeast(0)] = 5
    init_sd: Annotated[float, Positive()] = 0.1
    tol: Annotated[float, AtLeast(0.0)] = 0.01
    check_every: Annotated[int, AtLeast(1)] = 100
    whiten: bool = True
    init: Literal["mode", "points"] = "mode"
    mode_iter: Annotated[int, AtLeast(1)] = 250
    divergence: Literal["kl_qp", "kl_pq", "hellinger", "alpha"] = "kl_qp"
    alpha: Annotated[float, Between(0.0, 1.0)] = 0.5  # the Renyi order of divergence=alpha




class Ascent(NamedTuple):
    """One Monte Carlo step: the objective's gradient in (mean, raw), the objective and the ELBO estimates."""

    mean: Tensor
    raw: Tensor
    objective: Tensor
    elbo: Tensor
    points: Tensor  # the draws (num_mc, dim) in the coordinates of (mean, raw)
    gradients: Tensor  # grad log p at them, in the same coordinates


class GaussianVI(Approximation):
    """Gaussian VI; see the module docstring and ``conf/method/vi.yaml``.

    family       meanfield | fullrank
    num_steps    Adam steps at most
    num_mc       Monte Carlo draws per step
    lr           Adam's first learning rate
    lr_halvings  how often a plateau halves it before the next plateau ends the fit
    init_sd      the starting standard deviations (the mean starts at the mean of the initial points)
    tol          a plateau: the windowed mean objective rose by less than this (nats); 0: run num_steps
                 at the first learning rate
    check_every  the window of the plateau rule, of the stepped ``elbo`` metric and of the frame's renewal
    whiten       move q in the whitened coordinates of the last window's average q (module docstring)
    init         mode: start at the L-BFGS mode (``_start``) | points: at the mean of the initial points
    mode_iter    L-BFGS iterations per round of the mode search
    num_draws    iid draws from the fitted q for the evidence, k-hat and the target's evaluation
    """

    Settings = GaussianVISettings
    name = "vi"

    def _start(self, density: Density, initial: Tensor) -> tuple[Tensor, int, str]:
        """The first mean, the gradients spent finding it and where it came from: the mean of the initial points,
        or (``init: mode``) the L-BFGS mode searched from there (bayesx.methods.common.optimize.find_mode) in rounds of
        ``mode_iter`` iterations until a round raises log p by less than RUNAWAY nats. A search can end in a
        funnel's neck, where log p is high but a q of any width is not: the mode is kept only where the first
        q there, N(mode, init_sd^2 I), has the higher ELBO (bayesx.methods.common.optimize.in_a_neck) than at the initial points'
        mean; otherwise, or where the search is still rising after MODE_ROUNDS rounds, the fit starts there."""
        start = initial.mean(0, keepdim=True)
        if self.settings.init != "mode":
            return start, 0, "initial points"
        with torch.no_grad():
            log_p = float(density.logp(start)[0])
        if not math.isfinite(log_p):
            return start, 0, "initial points (log p is not finite there: no mode search)"
        climbed = climb(density, start, self.settings.mode_iter)
        point, calls = climbed.point, climbed.calls
        if climbed.ran_away:
            return start, calls, (f"initial points (the mode search ran away: still rising by {climbed.rise:.3g} "
                                  f"nats after {calls} gradients)")
        if point is start and not math.isfinite(climbed.rise):
            return start, calls, (f"initial points (the mode search reached a non-finite density after "
                                  f"{calls} gradients)")
        if point is start:
            return start, calls, "initial points (the mode search found no higher density)"
        neck, at_mode, at_start = in_a_neck(density, point, start, self.settings.init_sd)
        if neck:
            return start, calls, (f"initial points (a q at the mode found after {calls} gradients has the lower "
                                  f"ELBO, {at_mode:.4g} against {at_start:.4g}: a funnel's neck)")
        return point, calls, "mode"

    def _parameters(self, initial: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, raw): raw is log sigma (meanfield), or sqrt(dim) L below the diagonal with log L_jj
        on it (fullrank). Adam moves every raw entry by about lr per step whatever its gradient's
        scale, so the sqrt(dim) makes an off-diagonal entry move lr / sqrt(dim): the noise of a
        row's dim - 1 entries then changes that row's norm (a marginal sd) about as much as a step
        of its diagonal does. With the same step for all entries (lr 0.1, 8 draws, 500 dimensions)
        the noise of the off-diagonals outgrows the signal and the ELBO falls after a few hundred steps."""
        mean = initial.mean(0).detach().clone()
        log_sd = torch.full_like(mean, math.log(self.settings.init_sd))
        return mean, (log_sd if self.settings.family == "meanfield" else torch.diag(log_sd))

    @staticmethod
    def _identity(mean: Tensor, raw: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, raw) of N(0, I): zeros (log 1 = 0 on the diagonal)."""
        return torch.zeros_like(mean), torch.zeros_like(raw)

    @staticmethod
    def _compose(frame: GaussianQ, q: GaussianQ) -> GaussianQ:
        """q given in the frame's whitened coordinates w (z = m0 + L0 w) as a q over z: N(m0 + L0 m, L0 L)."""
        scale = frame.scale @ q.scale if frame.dense else frame.scale * q.scale
        return GaussianQ(frame.transform(q.mean), scale)

    @staticmethod
    def _off_diagonal_scale(raw: Tensor) -> float:
        return 1.0 / math.sqrt(raw.shape[0])

    def _q(self, mean: Tensor, raw: Tensor) -> GaussianQ:
        if raw.dim() == 1:
            return GaussianQ(mean, torch.exp(raw))
        off = torch.tril(raw, -1) * self._off_diagonal_scale(raw)
        return GaussianQ(mean, off + torch.diag(torch.exp(raw.diagonal())))

    def ascent(self, density: Density, mean: Tensor, raw: Tensor, eps: Tensor, frame: GaussianQ | None = None) -> Ascent:
        """The configured objective at the draws z = mean + L eps and its gradient in (mean, raw).

        kl_qp      the ELBO, mean_i l_i with l_i = log p(z_i) - log q(z_i); w_i = 1 / num_mc
        alpha      the Renyi bound L_a = 1/(1-a) log mean_i exp((1-a) l_i) (Li and Turner 2016),
                   w = softmax((1-a) l); a -> 1 is the ELBO, a -> 0 log Z
        hellinger  the squared Hellinger distance 1 - int sqrt(p q) / sqrt(Z) falls as E_q sqrt(p/q)
                   rises, so its minimizer is L_{1/2}'s: the alpha objective at a = 1/2
        kl_pq      KL(p || q) (the thesis' "reverse KL", mass covering): minus E_p log q, by
                   self-normalized importance sampling from q, objective sum_i w_i log q(z_i) with
                   w = softmax(l) and the draws held fixed (the score-function gradient)
        """
        q = self._q(mean, raw)
        z = q.transform(eps)
        if frame is None:
            log_p, grad = density.logp_and_grad(z)
        else:  # (mean, raw) describe q in the frame's whitened coordinates w, z = frame mean + frame scale w
            log_p, grad = density.logp_and_grad(frame.transform(z))
            log_p = log_p + frame.log_det_scale()
            grad = grad @ frame.scale if frame.dense else grad * frame.scale
        log_q = q.log_prob_of_noise(eps)
        log_w = log_p - log_q
        elbo = log_w.mean()
        divergence = self.settings.divergence
        if divergence == "kl_qp":
            weights, objective = torch.full_like(log_w, 1.0 / log_w.shape[0]), elbo
        elif divergence == "kl_pq":
            weights = torch.softmax(log_w, 0)
            objective = (weights * log_q).sum()
        else:
            a = 0.5 if divergence == "hellinger" else self.settings.alpha
            weights = torch.softmax((1.0 - a) * log_w, 0)
            objective = (torch.logsumexp((1.0 - a) * log_w, 0) - math.log(log_w.shape[0])) / (1.0 - a)
        if divergence == "kl_pq":
            sign = -1.0
            direction = (torch.linalg.solve_triangular(q.scale.T, eps.T, upper=True).T if q.dense
                         else eps / q.scale)  # a_i = L^-T eps_i: the score of q in z at fixed draws
        else:
            sign, direction = 1.0, grad
        weighted = weights[:, None] * direction
        grad_mean = weighted.sum(0)
        if q.dense:
            outer = weighted.T @ eps  # sum_i w_i a_i eps_i^T
            grad_raw = (torch.tril(outer, -1) * self._off_diagonal_scale(raw)
                        + torch.diag(outer.diagonal() * q.scale.diagonal() + sign))
        else:
            grad_raw = (weighted * eps).sum(0) * q.scale + sign
        return Ascent(grad_mean, grad_raw, objective, elbo, z, grad)

    def check(self, target, n_chains: int) -> None:
        if self.settings.family == "jj" and target.logistic_design() is None:
            raise InvalidSetting("family", f"=jj is the Jaakkola-Jordan bound of Bayesian logistic regression; "
                                 f"{type(target).__name__} is not one: use model=logreg or family=fullrank")

    def gradient_batch(self, inputs: RunInputs) -> int:
        return self.settings.num_mc

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        """k-hat's warning (the family's), and one line where the fit stopped before its convergence rule was met."""
        found = super().warnings(metrics)
        if metrics.get("converged") == 0.0:
            rise = metrics.get("objective_window_rise", float("nan"))
            found.append(f"vi did not converge: the windowed objective still rose by {rise:.3g} nats "
                         f"(rule: a rise below method.tol "
                         f"after {self.settings.lr_halvings} step halvings) when method.num_steps = "
                         f"{self.settings.num_steps} ran out; raise method.num_steps")
        return found

    def approximate(self, target, inputs: RunInputs) -> Fit:
        initial, gen, progress = inputs.initial, inputs.gen, inputs.progress
        cfg = self.settings
        if cfg.family == "jj":
            self.check(target, 1)
            return fit_jaakkola_jordan(target, cfg)
        out = Fit()
        start, mode_calls, started_at = self._start(inputs.density, initial)
        mean, raw = self._parameters(start)
        frame = None
        if cfg.whiten:  # the first frame: the starting q; (mean, raw) then start at N(0, I) in its coordinates
            frame = self._q(mean, raw)
            mean, raw = self._identity(mean, raw)
        mean.grad, raw.grad = torch.zeros_like(mean), torch.zeros_like(raw)
        curvature = (SecantCurvature(mean.shape[0], mean.dtype, mean.device)
                     if frame is not None and cfg.family == "meanfield" and mean.shape[0] <= SECANT_UP_TO else None)
        preconditioner = None  # B: q's mean in the frame is B times Adam's parameter (curvature.py)
        lr, halvings = cfg.lr, 0
        optim = torch.optim.Adam([mean, raw], lr=lr, fused=mean.device.type in ("cpu", "cuda"))
        eps = torch.empty((cfg.num_mc, mean.shape[0]), dtype=mean.dtype, device=mean.device)
        elbo_windows, objective_windows = ElboWindows(cfg.check_every), ElboWindows(cfg.check_every)
        lr_trace, previous, rise, converged = [], None, float("nan"), False
        averaged = (mean.clone(), raw.clone())  # the last complete window's average
        sums, steps = [torch.zeros_like(mean), torch.zeros_like(raw)], 0
        bar = progress_bar(cfg.num_steps, f"vi ({cfg.family})", progress, "step")
        with interruptible(out, bar, lambda: f"fit (step {steps})"):
            for steps in range(1, cfg.num_steps + 1):
                eps.normal_(generator=gen)
                located = mean if preconditioner is None else preconditioner @ mean
                step = self.ascent(inputs.density, located, raw, eps, frame)
                if not torch.isfinite(step.objective):
                    out.error = (f"the {cfg.divergence} objective is not finite at step {steps}: lower "
                                 f"method.lr (now {cfg.lr:g}) or method.init_sd (now {cfg.init_sd:g})")
                    break
                torch.neg(step.mean if preconditioner is None else preconditioner @ step.mean, out=mean.grad)
                torch.neg(step.raw, out=raw.grad)  # Adam descends
                optim.step()
                if curvature is not None:
                    curvature.add(step.points, step.gradients)
                sums[0] += mean if preconditioner is None else preconditioner @ mean
                sums[1] += raw
                bar.update(1)
                objective_windows.add(steps, float(step.objective))
                if elbo_windows.add(steps, float(step.elbo)):  # a window of check_every steps closed
                    averaged = (sums[0] / cfg.check_every, sums[1] / cfg.check_every)
                    sums = [torch.zeros_like(mean), torch.zeros_like(raw)]
                    if frame is not None:  # the window's average q becomes the next frame
                        previous_frame, frame = frame, self._compose(frame, self._q(*averaged))
                        if curvature is not None:
                            preconditioner = curvature.mean_preconditioner(frame.scale / previous_frame.scale)
                            curvature = SecantCurvature(mean.shape[0], mean.dtype, mean.device)
                        averaged = self._identity(mean, raw)
                        with torch.no_grad():
                            mean.copy_(averaged[0])
                            raw.copy_(averaged[1])
                        optim.state.clear()
                    current = objective_windows.last
                    lr_trace.append((steps, lr))
                    bar.set_postfix(objective=f"{current:.4g}", lr=f"{lr:.2g}")
                    if previous is not None:
                        rise = current - previous
                        if cfg.tol > 0 and rise < cfg.tol:
                            if halvings == cfg.lr_halvings:
                                converged = True
                                break
                            halvings, lr = halvings + 1, lr / 2.0
                            for group in optim.param_groups:
                                group["lr"] = lr
                    previous = current
        elbo_windows.record(out)  # the stepped elbo and the seconds into the fit at each window
        out.traces["lr"] = lr_trace
        if cfg.divergence != "kl_qp":
            out.traces["objective"] = objective_windows.trace  # what the fit maximizes (see ``ascent``)
        out.metrics.update({"n_steps": float(steps), "n_grad_evals": float(steps * cfg.num_mc + mode_calls),
                            "objective_window_rise": rise, "mode_search_grad_evals": float(mode_calls)})
        if cfg.tol > 0:  # tol = 0 is a fixed budget: the rule is off and convergence is not judged
            out.metrics["converged"] = float(converged)
        out.tags.update({"q_family": cfg.family, "divergence": cfg.divergence, "vi_start": started_at,
                         "converged": str(converged).lower() if cfg.tol > 0 else "not judged (tol = 0)"})
        q = self._q(*averaged) if steps >= cfg.check_every else self._q(mean, raw)
        if frame is not None:
            q = self._compose(frame, q)
        out.fitted.update({"q_mean": q.mean.cpu(), "q_scale": q.scale.cpu()})
        out.approximation = q
        return out


def jj_lambda(xi: Tensor) -> Tensor:
    """lambda(xi) = tanh(xi / 2) / (4 xi), with its limit 1/8 at xi = 0."""
    small = xi.abs() < 1e-6
    safe = torch.where(small, torch.ones_like(xi), xi)
    return torch.where(small, torch.full_like(xi, 0.125), torch.tanh(safe / 2.0) / (4.0 * safe))


def fit_jaakkola_jordan(target, cfg: GaussianVISettings) -> Fit:
    """The thesis' VFE for logistic regression: the Jaakkola-Jordan local bound
    sigma(a) >= sigma(xi) exp((a - xi)/2 - lambda(xi) (a^2 - xi^2)) makes the likelihood Gaussian in q,
    so q = N(m, S) and the local parameters xi have closed-form updates (Jaakkola and Jordan 2000;
    Bishop 2006, sec. 10.6):

        S^-1 = S0^-1 + 2 X^T diag(lambda(xi)) X,   m = S X^T (y - 1/2),   xi_n^2 = x_n^T (S + m m^T) x_n,

    with the prior N(0, S0 = s^2 I). The bound on log p(y) (Bishop eq. 10.164) is traced as ``elbo``,
    comparable with the ELBO of the other families (the target's density is p(y, beta), normalizer
    p(y)); the fit stops when it rises by less than ``tol`` or after ``num_steps`` updates. No
    gradients of the target are used."""
    design = target.logistic_design()
    x, y, prior_var = design.x, design.y, design.prior_var
    dim = x.shape[1]
    eye = torch.eye(dim, dtype=x.dtype, device=x.device)
    xi = torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    rhs = x.T @ (y - 0.5)
    trace, previous, step = [], None, 0
    for step in range(1, cfg.num_steps + 1):
        lam = jj_lambda(xi)
        precision = eye / prior_var + 2.0 * (x.T * lam) @ x
        chol_p = torch.linalg.cholesky(precision)
        mean = torch.cholesky_solve(rhs[:, None], chol_p)[:, 0]
        cov = torch.cholesky_inverse(chol_p)
        xi = torch.sqrt(((x @ cov) * x).sum(-1) + (x @ mean) ** 2)
        lam = jj_lambda(xi)
        log_det_ratio = -2.0 * float(torch.log(chol_p.diagonal()).sum()) - dim * math.log(prior_var)
        bound = (0.5 * log_det_ratio + 0.5 * float(mean @ precision @ mean)
                 + float((F.logsigmoid(xi) - xi / 2.0 + lam * xi * xi).sum()))
        elbo = bound
        trace.append((step, elbo))
        if previous is not None and cfg.tol > 0 and elbo - previous < cfg.tol:
            break
        previous = elbo
    chol = torch.linalg.cholesky(cov)
    return Fit(GaussianQ(mean, chol), metrics={"n_steps": float(step), "n_grad_evals": 0.0, "jj_bound": trace[-1][1]},
               traces={"elbo": trace}, tags={"q_family": "jj", "divergence": "kl_qp (local bound)"},
               fitted={"q_mean": mean.cpu(), "q_scale": chol.cpu()})
