"""Per-example lower bounds on log p(x): the VAE's ELBO and Hamiltonian variational inference (HVI).

Each bound draws one sample per row of x and returns its log weight log w, with E[w] = p(x), so

    E[log w] <= log p(x)                    (the ELBO; its average is what training maximizes)
    log (1/k) sum_j w_j -> log p(x)         (importance sampling with k samples; bayesx.methods.vae.evaluate)

VAE (Kingma and Welling 2014), z ~ q(z | x):

    log w = log p(x, z) - log q(z | x)
    training uses E_q log p(x | z) - KL(q(z | x) || N(0, I)) (the KL in closed form)

HVI (Salimans, Kingma and Welling 2015; Zhang (2018) alg. 3), z_0 ~ q(z_0 | x), then for t = 1..T:
v'_t ~ q_t(v' | x), (z_t, v_t) = L leapfrog steps of H(z, v) = -log p(x, z) + |v|^2 / 2 from
(z_{t-1}, v'_t) with a learned per-dimension step size eps_t in [0.001, 0.5]; no accept/reject,
gradients flow through the integrator. Leapfrog is volume preserving, so

    log w = log p(x, z_T) - log q(z_0 | x) + sum_t [log r_t(v_t | x, z_t) - log q_t(v'_t | x)]

(equal to the telescoped form of the sum). q_t and r_t are diagonal Gaussians from small networks.

Flow VAEs (Rezende and Mohamed 2015 sec. 6; Kingma et al. 2016): z_0 ~ q(z_0 | x) from the encoder, then
K amortized flow layers z_k = f_k(z_{k-1}; x) whose parameters come from a context network on x:

    log w = log p(x, z_K) - log q(z_0 | x) + sum_k log |det df_k / dz_{k-1}|

planar: the network outputs each image's (u_k, w_k, b_k); iaf: it outputs a context vector h(x) that
every IAF layer's MADE takes beside z (bayesx.nn.flows).

DPP-VAE (Chen (2019) ch. 4) replaces the N(0, I) prior of the minibatch's latents by a k-DPP with k = N
(bayesx.methods.vae.dpp): the minibatch objective is sum_n [log p(x_n | z_n) - log q(z_n | x_n)] + log p(Z),
shared out as log p(Z) / N per example. Single images have no DPP prior; their importance weights
use N(0, I) (the decoder is sampled from N(0, I) too), so a DPP-VAE's test_nll is that of its
decoder under the standard normal prior.

RMHVI (Zhang (2018) alg. 4-5) replaces the leapfrog by the generalized leapfrog with the diagonal Monte
Carlo Fisher metric G(z) (bayesx.methods.vae.riemann) and draws the momentum v'_t ~ N(0, G(z_{t-1})); the
reverse model r_t stays learned. The same bound holds (the map is symplectic).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bayesx.errors import BayesxError
from bayesx.nn import hamiltonian
from bayesx.nn.flows.autoregressive import IAF
from bayesx.nn.flows.planar import planar
from bayesx.methods.vae.model import VAEModel, gaussian_log_density
from bayesx.methods.vae.nets import Auxiliary
from bayesx.methods.vae.riemann import fisher_metric, generalized_leapfrog

STEP_MIN, STEP_MAX = 0.001, 0.5


def check_options(**options) -> None:
    """One-line errors for the integer counts (>= 1) and the initial step size of the HVI-type bounds;
    the methods call it when built, so bad settings stop before a run is recorded."""
    for key, value in options.items():
        if key == "init_step":
            if not (isinstance(value, (int, float)) and STEP_MIN <= value <= STEP_MAX):
                raise BayesxError(f"method.init_step must lie in [{STEP_MIN}, {STEP_MAX}], got {value!r}")
        elif not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise BayesxError(f"method.{key} must be an integer >= 1, got {value!r}")


def sample_gaussian(mean: Tensor, log_var: Tensor) -> Tensor:
    return mean + torch.exp(0.5 * log_var) * torch.randn_like(mean)


class VAEBound(nn.Module):
    """The ELBO; no parameters of its own."""

    name = "vae"

    def log_weight(self, model: VAEModel, x: Tensor) -> Tensor:
        mean, log_var = model.encode(x)
        z = sample_gaussian(mean, log_var)
        return model.log_joint(x, z) - gaussian_log_density(z, mean, log_var)

    def objective(self, model: VAEModel, x: Tensor) -> Tensor:
        """E_q log p(x | z) - KL(q || N(0, I)), one sample for the first term."""
        mean, log_var = model.encode(x)
        z = sample_gaussian(mean, log_var)
        kl = 0.5 * (torch.exp(log_var) + mean**2 - 1.0 - log_var).sum(-1)
        return model.log_likelihood(x, z) - kl


def leapfrog(model: VAEModel, x: Tensor, z: Tensor, v: Tensor, step: Tensor, num_steps: int,
             create_graph: bool) -> tuple[Tensor, Tensor]:
    """num_steps leapfrog steps of H(z, v) = -log p(x, z) + |v|^2 / 2 (bayesx.nn.hamiltonian)."""
    return hamiltonian.leapfrog(lambda latent: model.log_joint(x, latent), z, v, step, num_steps, create_graph)


class HVIBound(nn.Module):
    """HVI with ``transitions`` transitions of ``leapfrog_steps`` leapfrog steps each."""

    name = "hvi"

    def __init__(self, model: VAEModel, transitions: int = 1, leapfrog_steps: int = 1, init_step: float = 0.05,
                 aux_hidden: int = 300):
        super().__init__()
        check_options(transitions=transitions, leapfrog_steps=leapfrog_steps, init_step=init_step)
        self.transitions, self.leapfrog_steps = transitions, leapfrog_steps
        d, shape = model.latent_dim, model.image_shape
        self.raw_step = nn.Parameter(torch.full((transitions, d), math.log(init_step)))
        self.momentum = nn.ModuleList(Auxiliary(shape, d, aux_hidden) for _ in range(transitions))  # q_t(v'|x)
        self.reverse = nn.ModuleList(Auxiliary(shape, d, aux_hidden, with_latent=True) for _ in range(transitions))
        self.to(device=model.device, dtype=model.dtype)

    def step_sizes(self) -> Tensor:
        """eps_t = clamp(exp(raw), 0.001, 0.5), (transitions, d)."""
        return torch.exp(self.raw_step).clamp(STEP_MIN, STEP_MAX)

    def log_weight(self, model: VAEModel, x: Tensor) -> Tensor:
        mean, log_var = model.encode(x)
        z = sample_gaussian(mean, log_var)
        log_w = -gaussian_log_density(z, mean, log_var)
        steps = self.step_sizes()
        for t in range(self.transitions):
            z, v, log_q_momentum = self.move(model, x, z, t, steps[t])
            r_mean, r_log_var = self.reverse[t](x, z)
            log_w = log_w - log_q_momentum + gaussian_log_density(v, r_mean, r_log_var)
        return log_w + model.log_joint(x, z)

    def move(self, model: VAEModel, x: Tensor, z: Tensor, t: int, step: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Transition t: draw v' ~ q_t(v'|x), integrate; returns (z_t, v_t, log q_t(v'|x))."""
        v_mean, v_log_var = self.momentum[t](x)
        v0 = sample_gaussian(v_mean, v_log_var)
        z, v = leapfrog(model, x, z, v0, step, self.leapfrog_steps, create_graph=self.training)
        return z, v, gaussian_log_density(v0, v_mean, v_log_var)

    def objective(self, model: VAEModel, x: Tensor) -> Tensor:
        return self.log_weight(model, x)


class RMHVIBound(HVIBound):
    """Riemannian HVI: ``fisher_samples`` decoder samples for the metric, ``fixed_point_iters``
    iterations for the implicit momentum half-step (one for the position, as in Zhang (2018))."""

    name = "rmhvi"

    def __init__(self, model: VAEModel, fisher_samples: int = 5, fixed_point_iters: int = 5, **kwargs):
        super().__init__(model, **kwargs)
        del self.momentum  # the momentum is drawn from N(0, G(z)), not learned
        check_options(fisher_samples=fisher_samples, fixed_point_iters=fixed_point_iters)
        self.fisher_samples, self.fixed_point_iters = fisher_samples, fixed_point_iters

    def move(self, model: VAEModel, x: Tensor, z: Tensor, t: int, step: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """v' ~ N(0, G(z)) and the generalized leapfrog under the Fisher metric of this transition."""
        uniforms = torch.rand((self.fisher_samples, *x.shape), device=x.device, dtype=x.dtype)
        metric = fisher_metric(model, uniforms)
        g0 = metric(z)
        v0 = torch.sqrt(g0) * torch.randn_like(z)
        z, v = generalized_leapfrog(lambda w: model.log_joint(x, w), metric, z, v0, step, self.leapfrog_steps,
                                    self.fixed_point_iters, 1, create_graph=self.training)
        return z, v, gaussian_log_density(v0, torch.zeros_like(z), torch.log(g0))


class FlowBound(nn.Module):
    """The encoder's Gaussian pushed through ``n_layers`` amortized flow layers of ``flow`` (planar or
    iaf); the context network is one softplus layer of ``context_hidden`` units on the flattened image,
    like HVI's auxiliary networks; ``hidden`` is the width of each IAF layer's MADE."""

    name = "flowvae"

    def __init__(self, model: VAEModel, flow: str = "planar", n_layers: int = 10, hidden: int = 100,
                 context_hidden: int = 300):
        super().__init__()
        check_options(n_layers=n_layers, hidden=hidden, context_hidden=context_hidden)
        if flow not in ("planar", "iaf"):
            raise BayesxError(f"method.flow must be planar or iaf for a VAE, got {flow!r}")
        d, pixels = model.latent_dim, math.prod(model.image_shape)
        self.flow, self.n_layers, self.latent_dim = flow, n_layers, d
        self.context = nn.Sequential(nn.Linear(pixels, context_hidden), nn.Softplus())
        if flow == "planar":  # (u_k, w_k, b_k) per image; the head starts from one shared small layer per k
            self.head = nn.Linear(context_hidden, n_layers * (2 * d + 1))
            with torch.no_grad():
                self.head.weight.mul_(0.01)
                self.head.bias.copy_(0.01 * torch.randn(n_layers * (2 * d + 1)))
        else:
            gen = torch.Generator().manual_seed(int(torch.randint(2**62, ())))  # from the run's seeded default RNG
            self.layers = nn.ModuleList(IAF(d, gen, hidden, reverse=bool(k % 2), context_dim=context_hidden)
                                        for k in range(n_layers))
        self.to(device=model.device, dtype=model.dtype)

    def transform(self, x: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """(z_K, sum_k log|det J_k|) for base draws z (B, d) of the images x."""
        c = self.context(x.flatten(1))
        log_det = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        if self.flow == "planar":
            d = self.latent_dim
            params = self.head(c).view(-1, self.n_layers, 2 * d + 1)
            for k in range(self.n_layers):
                u, w, b = params[:, k, :d], params[:, k, d:2 * d], params[:, k, 2 * d]
                z, step = planar(z, u, w, b)
                log_det = log_det + step
        else:
            for layer in self.layers:
                z, step = layer(z, c)
                log_det = log_det + step
        return z, log_det

    def log_weight(self, model: VAEModel, x: Tensor) -> Tensor:
        mean, log_var = model.encode(x)
        z0 = sample_gaussian(mean, log_var)
        z, log_det = self.transform(x, z0)
        return model.log_joint(x, z) - gaussian_log_density(z0, mean, log_var) + log_det

    def objective(self, model: VAEModel, x: Tensor) -> Tensor:
        return self.log_weight(model, x)


class DPPVAEBound(VAEBound):
    """The VAE with a k-DPP prior on each minibatch's latents (``objective``); weights as the VAE's."""

    name = "dppvae"

    def __init__(self, prior):
        super().__init__()
        self.prior = prior

    def objective(self, model: VAEModel, x: Tensor) -> Tensor:
        mean, log_var = model.encode(x)
        z = sample_gaussian(mean, log_var)
        per_example = model.log_likelihood(x, z) - gaussian_log_density(z, mean, log_var)
        return per_example + self.prior.log_prob(z) / x.shape[0]
