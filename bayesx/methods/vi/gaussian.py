"""Gaussian variational inference by the reparameterized ELBO (``method=vi``), the first method of the
approximation family and the worked example of ARCHITECTURE.md.

q(z) = N(mu, S) with S = diag(sigma^2) (``family: meanfield``) or S = L L^T (``family: fullrank``,
L lower triangular with a positive diagonal) maximizes

    ELBO(q) = E_q[log p(z)] + H(q),   H(q) = sum_j log L_jj + dim/2 (1 + log 2 pi),

the variational free energy of Beal's and Bishop's treatments ("KL(q || p)"), by Adam on the
reparameterized Monte Carlo estimate (Kingma and Welling 2014; Titsias and Lazaro-Gredilla 2014):
z_s = mu + L eps_s, eps_s ~ N(0, I), s = 1..num_mc,

    d/dtheta E_q[log p] ~= 1/num_mc sum_s grad log p(z_s)^T dz_s/dtheta.

Only the target's ``log_prob_and_grad`` is needed, never autograd through the target, so the
method runs on any target (the PDE posterior's adjoint gradient, the native logistic kernel).
For a Gaussian target with precision P the mean-field optimum has the exact mean and the variances
1 / P_jj: it under-estimates marginal variances where the posterior is correlated (MacKay 2003,
ch. 33; Bishop 2006, sec. 10.1.2), which the tests use as a known answer.

Convergence: every ``check_every`` steps the mean ELBO of that window is compared with the previous
window's; the fit stops when it rose by less than ``tol`` nats (or at ``num_steps``). The fitted q
has the parameters averaged over the last window (Polyak and Juditsky 1992): with a constant Adam
step the last iterate jitters around the optimum by several percent of an sd, the average does not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesx.methods.base import Approximation, ApproximationSettings
from bayesx.progress import interruptible, progress_bar
from bayesx.result import Result
from bayesx.settings import AtLeast, Between, InvalidSetting, Positive

LOG_2PI = math.log(2.0 * math.pi)


class GaussianQ:
    """N(mean, L L^T) with L = diag(scale) for a vector ``scale`` or L = ``scale`` (lower triangular)."""

    def __init__(self, mean: Tensor, scale: Tensor):
        self.mean, self.scale = mean, scale
        self.dense = scale.dim() == 2

    def transform(self, eps: Tensor) -> Tensor:
        """z = mean + L eps for rows eps (n, dim)."""
        return self.mean + (eps @ self.scale.T if self.dense else eps * self.scale)

    def sample(self, n: int, gen: torch.Generator) -> Tensor:
        eps = torch.randn((n, self.mean.shape[0]), generator=gen, dtype=self.mean.dtype, device=self.mean.device)
        return self.transform(eps)

    def log_det_scale(self) -> Tensor:
        diag = self.scale.diagonal() if self.dense else self.scale
        return torch.log(diag).sum()

    def log_prob(self, z: Tensor) -> Tensor:
        d = z - self.mean
        if self.dense:
            white = torch.linalg.solve_triangular(self.scale, d.reshape(-1, d.shape[-1]).T, upper=False).T
            white = white.reshape(d.shape)
        else:
            white = d / self.scale
        return -0.5 * (white * white).sum(-1) - self.log_det_scale() - 0.5 * self.mean.shape[0] * LOG_2PI

    def entropy(self) -> Tensor:
        return self.log_det_scale() + 0.5 * self.mean.shape[0] * (1.0 + LOG_2PI)

    def covariance(self) -> Tensor:
        return self.scale @ self.scale.T if self.dense else torch.diag(self.scale**2)


@dataclass(frozen=True)
class GaussianVISettings(ApproximationSettings):
    family: Literal["meanfield", "fullrank", "jj"] = "meanfield"
    num_steps: Annotated[int, AtLeast(1)] = 5000
    num_mc: Annotated[int, AtLeast(1)] = 8
    lr: Annotated[float, Positive()] = 0.02
    init_sd: Annotated[float, Positive()] = 0.1
    tol: Annotated[float, AtLeast(0.0)] = 0.01
    check_every: Annotated[int, AtLeast(1)] = 100
    divergence: Literal["kl_qp", "kl_pq", "hellinger", "alpha"] = "kl_qp"
    alpha: Annotated[float, Between(0.0, 1.0)] = 0.5  # the Renyi order of divergence=alpha


class GaussianVI(Approximation):
    """Gaussian VI; see the module docstring and ``conf/method/vi.yaml``.

    family       meanfield | fullrank
    num_steps    Adam steps at most
    num_mc       Monte Carlo draws per step
    lr           Adam's learning rate
    init_sd      the starting standard deviations (the mean starts at the mean of the initial points)
    tol          stop when the windowed mean ELBO rises by less than this (nats); 0: run num_steps
    check_every  the window of the convergence rule and of the stepped ``elbo`` metric
    num_draws    iid draws from the fitted q for the evidence, k-hat and the target's evaluation
    """

    Settings = GaussianVISettings
    name = "vi"

    def _parameters(self, initial: Tensor) -> tuple[Tensor, Tensor]:
        mean = initial.mean(0).detach().clone().requires_grad_(True)
        log_sd = torch.full_like(mean, math.log(self.settings.init_sd))
        if self.settings.family == "meanfield":
            return mean, log_sd.requires_grad_(True)
        # L = tril(off, -1) + diag(exp(log_sd)); one parameter matrix holds both
        raw = torch.diag(log_sd)
        return mean, raw.requires_grad_(True)

    def _q(self, mean: Tensor, raw: Tensor) -> GaussianQ:
        if raw.dim() == 1:
            return GaussianQ(mean, torch.exp(raw))
        return GaussianQ(mean, torch.tril(raw, -1) + torch.diag(torch.exp(raw.diagonal())))

    def surrogate_elbo(self, target, q: GaussianQ, eps: Tensor) -> tuple[Tensor, Tensor]:
        """(surrogate, estimate): the surrogate's gradient in q's parameters is the reparameterized
        ELBO gradient, and its value is not the ELBO; ``estimate`` is the ELBO estimate itself."""
        z = q.transform(eps)
        log_p, grad = target.log_prob_and_grad(z.detach())
        estimate = log_p.mean() + q.entropy()
        surrogate = (z * grad).sum(-1).mean() + q.entropy()
        return surrogate, estimate.detach()

    def surrogate(self, target, q: GaussianQ, eps: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(surrogate, objective, elbo) for the configured divergence: the surrogate's gradient in
        q's parameters is the objective's (a Monte Carlo estimate with the draws z = q.transform(eps)).

        kl_qp      the ELBO, reparameterized (``surrogate_elbo``)
        alpha      the Renyi bound L_a = 1/(1-a) log mean_i exp((1-a) l_i), l_i = log p(z_i) - log q(z_i)
                   (Li and Turner 2016): its gradient is sum_i w_i grad l_i with the self-normalized
                   weights w_i ∝ exp((1-a) l_i); a -> 1 is the ELBO, a -> 0 log Z
        hellinger  the squared Hellinger distance 1 - int sqrt(p q) / sqrt(Z) falls as E_q sqrt(p/q)
                   rises, so its minimizer is L_{1/2}'s: the alpha objective at a = 1/2
        kl_pq      KL(p || q) (the thesis' "reverse KL", mass covering): minus E_p log q, estimated by
                   self-normalized importance sampling from q, gradient sum_i w_i grad_theta log q(z_i)
                   with w_i ∝ p(z_i)/q(z_i) and z_i held fixed; objective = sum_i w_i log q(z_i)
        """
        divergence = self.settings.divergence
        if divergence == "kl_qp":
            surrogate, elbo = self.surrogate_elbo(target, q, eps)
            return surrogate, elbo, elbo
        z = q.transform(eps)
        log_p, grad = target.log_prob_and_grad(z.detach())
        log_q = q.log_prob(z.detach() if divergence == "kl_pq" else z)  # kl_pq: the score at fixed draws
        log_w = log_p - log_q.detach()
        elbo = log_w.mean()
        if divergence == "kl_pq":
            objective = (torch.softmax(log_w, 0) * log_q).sum()
            return objective, objective.detach(), elbo.detach()
        a = 0.5 if divergence == "hellinger" else self.settings.alpha
        w = torch.softmax((1.0 - a) * log_w, 0)
        surrogate = (w.detach() * ((z * grad).sum(-1) - log_q)).sum()
        objective = (torch.logsumexp((1.0 - a) * log_w, 0) - math.log(log_w.shape[0])) / (1.0 - a)
        return surrogate, objective.detach(), elbo.detach()

    def check(self, target, n_chains: int) -> None:
        if self.settings.family == "jj" and not target.capabilities.logistic_design:
            raise InvalidSetting("family", f"=jj is the Jaakkola-Jordan bound of Bayesian logistic regression; "
                                 f"{type(target).__name__} is not one: use model=logreg or family=fullrank")

    def fit(self, target, initial: Tensor, gen: torch.Generator, result: Result,
            progress: bool | None = None) -> GaussianQ:
        if self.settings.family == "jj":
            self.check(target, 1)
            return fit_jaakkola_jordan(target, self.settings, result)
        mean, raw = self._parameters(initial)
        optim = torch.optim.Adam([mean, raw], lr=self.settings.lr)
        trace, elbo_trace, window, elbos, previous = [], [], [], [], None
        clock, started = [], time.perf_counter()
        averaged = (mean.detach().clone(), raw.detach().clone())  # the last complete window's average
        sums, steps = [torch.zeros_like(mean), torch.zeros_like(raw)], 0
        bar = progress_bar(self.settings.num_steps, f"vi ({self.settings.family})", progress, "step")
        with interruptible(result, bar, lambda: f"fit (step {steps})"):
            for steps in range(1, self.settings.num_steps + 1):
                eps = torch.randn((self.settings.num_mc, mean.shape[0]), generator=gen, dtype=mean.dtype,
                                  device=mean.device)
                surrogate, estimate, elbo = self.surrogate(target, self._q(mean, raw), eps)
                if not torch.isfinite(estimate):
                    result.error = (f"the {self.settings.divergence} objective is not finite at step {steps}: lower "
                                    f"method.lr (now {self.settings.lr:g}) or method.init_sd (now "
                                    f"{self.settings.init_sd:g})")
                    break
                optim.zero_grad()
                (-surrogate).backward()
                optim.step()
                window.append(float(estimate))
                elbos.append(float(elbo))
                sums[0] += mean.detach()
                sums[1] += raw.detach()
                bar.update(1)
                if steps % self.settings.check_every == 0:
                    averaged = (sums[0] / len(window), sums[1] / len(window))
                    sums = [torch.zeros_like(mean), torch.zeros_like(raw)]
                    current = sum(window) / len(window)
                    trace.append((steps, current))
                    elbo_trace.append((steps, sum(elbos) / len(elbos)))
                    clock.append((steps, time.perf_counter() - started))
                    bar.set_postfix(objective=f"{current:.4g}")
                    if previous is not None and self.settings.tol > 0 and current - previous < self.settings.tol:
                        break
                    previous, window, elbos = current, [], []
        result.traces["elbo"] = elbo_trace
        result.traces["fit_elapsed_s"] = clock  # seconds into the fit at each window: time to a given ELBO
        if self.settings.divergence != "kl_qp":
            result.traces["objective"] = trace  # what the fit maximizes (see ``surrogate``)
        result.metrics.update({"n_steps": float(steps), "n_grad_evals": float(steps * self.settings.num_mc)})
        result.tags.update({"q_family": self.settings.family, "divergence": self.settings.divergence})
        q = self._q(*averaged) if steps >= self.settings.check_every else self._q(mean.detach(), raw.detach())
        result.fitted.update({"q_mean": q.mean.cpu(), "q_scale": q.scale.cpu()})
        return q


def jj_lambda(xi: Tensor) -> Tensor:
    """lambda(xi) = tanh(xi / 2) / (4 xi), with its limit 1/8 at xi = 0."""
    small = xi.abs() < 1e-6
    safe = torch.where(small, torch.ones_like(xi), xi)
    return torch.where(small, torch.full_like(xi, 0.125), torch.tanh(safe / 2.0) / (4.0 * safe))


def fit_jaakkola_jordan(target, cfg: GaussianVISettings, result: Result) -> GaussianQ:
    """The thesis' VFE for logistic regression: the Jaakkola-Jordan local bound
    sigma(a) >= sigma(xi) exp((a - xi)/2 - lambda(xi) (a^2 - xi^2)) makes the likelihood Gaussian in q,
    so q = N(m, S) and the local parameters xi have closed-form updates (Jaakkola and Jordan 2000;
    Bishop 2006, sec. 10.6):

        S^-1 = S0^-1 + 2 X^T diag(lambda(xi)) X,   m = S X^T (y - 1/2),   xi_n^2 = x_n^T (S + m m^T) x_n,

    with the prior N(0, S0 = s^2 I). The bound on log p(y) (Bishop eq. 10.164) is traced as ``elbo``,
    comparable with the ELBO of the other families (the target's density is p(y, beta), normalizer
    p(y)); the fit stops when it rises by less than ``tol`` or after ``num_steps`` updates. No
    gradients of the target are used."""
    x, y, prior_var = target.logistic_design()
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
    result.traces["elbo"] = trace
    result.metrics.update({"n_steps": float(step), "n_grad_evals": 0.0, "jj_bound": trace[-1][1]})
    result.tags.update({"q_family": "jj", "divergence": "kl_qp (local bound)"})
    chol = torch.linalg.cholesky(cov)
    result.fitted.update({"q_mean": mean.cpu(), "q_scale": chol.cpu()})
    return GaussianQ(mean, chol)
