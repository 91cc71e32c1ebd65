"""Hamiltonian variational inference on a target (``method=hamiltonian_vi``; Salimans, Kingma and
Welling 2015, "MCMC as flows" in the advanced-VI lecture).

q(z_0) = N(mu, diag(sigma^2)) is followed by T transitions, each drawing a momentum
v ~ q_t(v) = N(0, diag(m_t^2)) and running L leapfrog steps with learned per-dimension step sizes
eps_t (bayesx.nn.hamiltonian), no accept step. The leapfrog has unit Jacobian, so with a reverse
model r_t(v | z) = N(a_t * z + b_t, diag(s_t^2)) for the momentum at the end of each transition,

    ELBO = E[ log p(z_T) + sum_t log r_t(v_t' | z_t) - log q(z_0) - sum_t log q_t(v_t) ]  <= log Z,

the lecture's auxiliary-variable bound. Every parameter (mu, sigma, eps_t, m_t, a_t, b_t, s_t) is
learned by Adam on ``batch_size`` draws per iteration; the gradient runs through the leapfrog
(second derivatives of log p by autograd, so the target's density must be differentiable torch:
``target.autograd_log_prob()``). T = 0 is mean-field VI.

The fitted approximation's marginal of z_T has no closed form; its draws are z_T, and the weight
of each draw is the bound's integrand (an unbiased estimate of p(z_T) / q(z_T) in expectation over
the auxiliary momenta), which is what ``sample_and_log_prob`` reports as log q: the evidence is
then log mean exp(integrand), a valid importance-sampling estimate with the joint auxiliary proposal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bayesx.nn.distributions import GaussianQ
from bayesx.methods.base import RunInputs
from bayesx.methods.vi.family import Approximation, ApproximationSettings, Fit
from bayesx.methods.vi.windows import ElboWindows
from bayesx.nn.hamiltonian import leapfrog
from bayesx.methods.common.progress import interruptible, progress_bar
from bayesx.settings import AtLeast, InvalidSetting, Positive


@dataclass(frozen=True)
class HamiltonianVISettings(ApproximationSettings):
    n_transitions: Annotated[int, AtLeast(0)] = 4  # T
    n_leapfrog: Annotated[int, AtLeast(1)] = 1  # L per transition
    init_step: Annotated[float, Positive()] = 0.05
    init_sd: Annotated[float, Positive()] = 0.5  # q(z_0)'s starting sds; its mean starts at the initial points' mean
    batch_size: Annotated[int, AtLeast(1)] = 64
    iterations: Annotated[int, AtLeast(1)] = 2000
    lr: Annotated[float, Positive()] = 5e-3
    check_every: Annotated[int, AtLeast(1)] = 100


class HamiltonianChain(nn.Module):
    """q(z_0), the T transitions' step sizes and momentum scales, and the reverse models."""

    def __init__(self, mean: Tensor, cfg: HamiltonianVISettings):
        super().__init__()
        dim, t = mean.shape[0], cfg.n_transitions
        options = dict(dtype=mean.dtype, device=mean.device)
        self.cfg = cfg
        self.mean = nn.Parameter(mean.clone())
        self.log_sd = nn.Parameter(torch.full((dim,), math.log(cfg.init_sd), **options))
        self.raw_step = nn.Parameter(torch.full((t, dim), math.log(math.expm1(cfg.init_step)), **options))
        self.log_momentum_sd = nn.Parameter(torch.zeros(t, dim, **options))
        self.reverse_slope = nn.Parameter(torch.zeros(t, dim, **options))
        self.reverse_shift = nn.Parameter(torch.zeros(t, dim, **options))
        self.reverse_log_sd = nn.Parameter(torch.zeros(t, dim, **options))

    def sample_and_log_weight(self, target, n: int, gen: torch.Generator,
                              create_graph: bool) -> tuple[Tensor, Tensor, Tensor]:
        """(z_T, log p(z_T), the bound's integrand log p(z_T) + sum log r - log q(z_0) - sum log q_t)."""
        z, log_q = GaussianQ(self.mean, torch.exp(self.log_sd)).sample_and_log_prob(n, gen)
        log_w = -log_q
        steps = F.softplus(self.raw_step)
        log_prob = target.autograd_log_prob() if self.cfg.n_transitions else target.log_prob
        for t in range(self.cfg.n_transitions):
            v0, log_q_momentum = GaussianQ(torch.zeros_like(self.mean), torch.exp(self.log_momentum_sd[t])) \
                .sample_and_log_prob(n, gen)
            log_w = log_w - log_q_momentum
            z, v = leapfrog(log_prob, z, v0, steps[t], self.cfg.n_leapfrog, create_graph)
            reverse = GaussianQ(self.reverse_slope[t] * z + self.reverse_shift[t], torch.exp(self.reverse_log_sd[t]))
            log_w = log_w + reverse.log_prob(v)
        log_p = target.log_prob(z)
        return z, log_p, log_w + log_p


class FittedChain:
    """The trained chain as an approximation: draws z_T with the bound's integrand as their weight."""

    def __init__(self, chain: HamiltonianChain, target):
        self.chain, self.target = chain, target

    def sample_and_log_prob(self, n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        z, log_p, log_w = self.chain.sample_and_log_weight(self.target, n, gen, create_graph=False)
        return z.detach(), (log_p - log_w).detach()


class HamiltonianVI(Approximation):
    """Hamiltonian VI on a target; see the module docstring and ``conf/method/hamiltonian_vi.yaml``."""

    Settings = HamiltonianVISettings
    name = "hamiltonian_vi"

    def check(self, target, n_chains: int) -> None:
        if self.settings.n_transitions > 0 and target.autograd_log_prob() is None:
            raise InvalidSetting("n_transitions", f"> 0 needs second derivatives of the log density by autograd, and "
                                 f"{type(target).__name__}'s is not differentiable torch: use method=vi or flowvi")

    def approximate(self, target, inputs: RunInputs) -> Fit:
        initial, gen, progress = inputs.initial, inputs.gen, inputs.progress
        out = Fit()
        cfg = self.settings
        chain = HamiltonianChain(initial.mean(0).detach(), cfg)
        optim = torch.optim.Adam(chain.parameters(), lr=cfg.lr)
        windows, iteration = ElboWindows(cfg.check_every), 0
        bar = progress_bar(cfg.iterations, f"hamiltonian_vi (T={cfg.n_transitions})", progress, "it")
        with interruptible(out, bar, lambda: f"fit (iteration {iteration})"):
            for iteration in range(1, cfg.iterations + 1):
                _, _, log_w = chain.sample_and_log_weight(target, cfg.batch_size, gen, create_graph=True)
                elbo = log_w.mean()
                if not torch.isfinite(elbo):
                    out.error = (f"the Hamiltonian VI bound is not finite at iteration {iteration}: lower "
                                 f"method.lr (now {cfg.lr:g}) or method.init_step (now {cfg.init_step:g})")
                    break
                optim.zero_grad()
                (-elbo).backward()
                optim.step()
                bar.update(1)
                if windows.add(iteration, float(elbo.detach())):
                    bar.set_postfix(elbo=f"{windows.last:.4g}")
        gradients = cfg.batch_size * (1 + cfg.n_transitions * (cfg.n_leapfrog + 1))
        windows.record(out)
        out.metrics.update({"n_steps": float(iteration), "n_grad_evals": float(iteration * gradients)})
        out.tags.update({"q_family": f"hamiltonian:T={cfg.n_transitions},L={cfg.n_leapfrog}"})
        chain.requires_grad_(False)
        out.approximation = FittedChain(chain, target)
        return out
