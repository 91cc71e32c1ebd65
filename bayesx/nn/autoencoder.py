"""Auto-encoders for latent-space MCMC (AE-HMC, AE-pCN), and their training on pre-samples.

Inputs are standardized draws x in R^D; codes are z in R^d. Every architecture splits as

    encoder  z = f(E1 x)        E1: (h_e, D), f small (R^h_e -> R^d)
    decoder  x^ = W g(z)        W: (D, h),    g small (R^d -> R^h)

so the two large matrices touch the D-dimensional space only once; the latent sampler folds them
into precomputed products (Deep MCMC eq. 7) and a latent gradient costs O(n h) rather than O(n D).

    linear  f, g identities: z = E1 x, x^ = W z          (Deep MCMC: three fully connected linear layers)
    tanh    f(v) = E2 tanh(v), g(z) = tanh(W1 z)         (Chen (2019) ch. 3: D -> h -> d -> h -> D, tanh
            hidden layers, linear code and output)
    pca     linear with E1 = V^T, W = V, V the top-d principal directions (an exact projection)

Layers carry no biases, so encoder and decoder are odd maps. The same maps encode momenta, and the
latent leapfrog is reversible only if K_h(p_h) = K(psi(p_h)) is even in p_h, which odd maps give;
centring is done by the standardization (the pre-sample mean), not by biases.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Annotated

import torch
from torch import Tensor, nn

from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, Between, Positive, Settings

ARCHITECTURES = ("linear", "tanh", "pca")


class AutoEncoder(nn.Module):
    """A bias-free auto-encoder of one of the :data:`ARCHITECTURES` (see the module docstring)."""

    def __init__(self, dim: int, latent_dim: int, arch: str = "linear", hidden: int | None = None,
                 dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"):
        super().__init__()
        if arch not in ARCHITECTURES:
            raise BayesxError(f"method.ae must be one of {', '.join(ARCHITECTURES)}, got '{arch}'")
        if not 1 <= latent_dim <= dim:
            raise BayesxError(f"method.latent_dim must lie in 1..{dim} (the target's dimension), got {latent_dim}")
        self.dim, self.latent_dim, self.arch = dim, latent_dim, arch
        kw = {"bias": False, "dtype": dtype, "device": device}
        if arch == "tanh":
            self.hidden = hidden or min(dim, 2 * latent_dim)
            self.enc_in, self.enc_out = nn.Linear(dim, self.hidden, **kw), nn.Linear(self.hidden, latent_dim, **kw)
            self.dec_in, self.dec_out = nn.Linear(latent_dim, self.hidden, **kw), nn.Linear(self.hidden, dim, **kw)
        else:
            self.hidden = latent_dim
            self.enc_in, self.dec_out = nn.Linear(dim, latent_dim, **kw), nn.Linear(latent_dim, dim, **kw)
            self.enc_out = self.dec_in = None

    @property
    def nonlinear(self) -> bool:
        return self.arch == "tanh"

    @property
    def E1(self) -> Tensor:
        return self.enc_in.weight

    @property
    def W(self) -> Tensor:
        return self.dec_out.weight

    # --- the small maps f and g and their Jacobians ---------------------------------------------
    def f(self, v: Tensor) -> Tensor:
        return self.enc_out(torch.tanh(v)) if self.nonlinear else v

    def f_jacobian(self, v: Tensor) -> Tensor:
        """df/dv, (..., d, h_e); only for the tanh architecture."""
        return self.enc_out.weight * (1.0 - torch.tanh(v) ** 2).unsqueeze(-2)

    def g(self, z: Tensor) -> Tensor:
        return torch.tanh(self.dec_in(z)) if self.nonlinear else z

    def g_and_jacobian(self, z: Tensor) -> tuple[Tensor, Tensor | None]:
        """g(z) and dg/dz (..., h, d); the Jacobian is None (the identity) for linear maps."""
        if not self.nonlinear:
            return z, None
        t = torch.tanh(self.dec_in(z))
        return t, (1.0 - t * t).unsqueeze(-1) * self.dec_in.weight

    # --- the maps themselves ----------------------------------------------------------------------
    def encode(self, x: Tensor) -> Tensor:
        return self.f(self.enc_in(x))

    def decode(self, z: Tensor) -> Tensor:
        return self.dec_out(self.g(z))

    def forward(self, x: Tensor) -> Tensor:
        return self.decode(self.encode(x))


def relative_error(ae: AutoEncoder, x: Tensor) -> float:
    """Fraction of the squared norm not reconstructed: sum |x - x^|^2 / sum |x|^2 (x standardized)."""
    with torch.no_grad():
        return float(((ae(x) - x) ** 2).sum() / (x * x).sum().clamp(min=1e-300))


def pca_directions(x: Tensor) -> tuple[Tensor, Tensor]:
    """Principal directions V (D, r) and squared singular values of the (already centred) rows of x."""
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    return vh.T, s * s


def pca_error_curve(x_train: Tensor, x_val: Tensor) -> Tensor:
    """Validation relative error of the best rank-d linear reconstruction, for d = 1..D."""
    v, _ = pca_directions(x_train)
    captured = torch.cumsum((x_val @ v) ** 2, dim=1).sum(0)
    total = (x_val * x_val).sum()
    curve = 1.0 - captured / total
    dim = x_train.shape[1]
    if curve.numel() < dim:  # fewer draws than dimensions: the rest of the spectrum captures nothing new
        curve = torch.cat([curve, curve[-1:].expand(dim - curve.numel())])
    return curve.clamp(min=0.0)


@dataclass(frozen=True)
class TrainSettings(Settings):
    """Auto-encoder training (``method.train``): Adam on the mean squared reconstruction error,
    a held-out validation split and early stopping on its loss."""

    max_epochs: Annotated[int, AtLeast(1)] = 500
    batch_size: Annotated[int, AtLeast(1)] = 128
    lr: Annotated[float, Positive()] = 1e-3
    val_fraction: Annotated[float, Between(0.0, 1.0)] = 0.2
    patience: Annotated[int, AtLeast(1)] = 25  # epochs without validation improvement before stopping
    max_recon_err: Annotated[float, Positive()] = 0.98  # above this validation error the auto-encoder is useless


@dataclass
class TrainReport:
    latent_dim: int
    epochs: int
    recon_err: float  # relative validation error (see relative_error)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def split(x: Tensor, val_fraction: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    n_val = max(1, int(round(val_fraction * x.shape[0])))
    order = torch.randperm(x.shape[0], generator=gen, device=gen.device).to(x.device)
    return x[order[n_val:]], x[order[:n_val]]


def fit_pca(x_train: Tensor, latent_dim: int) -> AutoEncoder:
    ae = AutoEncoder(x_train.shape[1], latent_dim, "pca", dtype=x_train.dtype, device=x_train.device)
    v, _ = pca_directions(x_train)
    v = v[:, :latent_dim]
    if v.shape[1] < latent_dim:
        raise BayesxError(f"PCA needs at least latent_dim={latent_dim} pre-samples, got {x_train.shape[0]}")
    with torch.no_grad():
        ae.enc_in.weight.copy_(v.T)
        ae.dec_out.weight.copy_(v)
    return ae.requires_grad_(False)


def initialize(ae: AutoEncoder, gen: torch.Generator) -> None:
    """Seeded initialization: an orthonormal code for linear maps, N(0, 1/fan_in) weights otherwise."""
    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=ae.W.dtype, device=gen.device).to(ae.W.device)

    with torch.no_grad():
        if ae.nonlinear:
            for layer in (ae.enc_in, ae.enc_out, ae.dec_in, ae.dec_out):
                layer.weight.copy_(randn(*layer.weight.shape) / math.sqrt(layer.weight.shape[1]))
        else:
            q, _ = torch.linalg.qr(randn(ae.dim, ae.latent_dim))
            ae.enc_in.weight.copy_(q.T)
            ae.dec_out.weight.copy_(q)


def train_autoencoder(x_train: Tensor, x_val: Tensor, latent_dim: int, arch: str, settings: TrainSettings,
                      gen: torch.Generator, hidden: int | None = None) -> tuple[AutoEncoder, TrainReport]:
    """Fit an auto-encoder to standardized draws; returns the best-on-validation weights."""
    start = time.perf_counter()
    if arch == "pca":
        ae = fit_pca(x_train, latent_dim)
        return ae, TrainReport(latent_dim, 0, relative_error(ae, x_val), seconds=time.perf_counter() - start)
    ae = AutoEncoder(x_train.shape[1], latent_dim, arch, hidden, dtype=x_train.dtype, device=x_train.device)
    initialize(ae, gen)
    optim = torch.optim.Adam(ae.parameters(), lr=settings.lr)
    report = TrainReport(latent_dim, 0, math.inf)
    best_state, best_val, stale = None, math.inf, 0
    n = x_train.shape[0]
    for epoch in range(settings.max_epochs):
        order = torch.randperm(n, generator=gen, device=gen.device).to(x_train.device)
        total = 0.0
        for i in range(0, n, settings.batch_size):
            batch = x_train[order[i:i + settings.batch_size]]
            loss = ((ae(batch) - batch) ** 2).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            total += float(loss.detach()) * batch.shape[0]
        with torch.no_grad():
            val = float(((ae(x_val) - x_val) ** 2).mean())
        if not (math.isfinite(total) and math.isfinite(val)):
            raise BayesxError(f"auto-encoder training diverged (NaN or inf loss at epoch {epoch + 1}); "
                              f"lower method.train.lr (now {settings.lr})")
        report.train_loss.append(total / n)
        report.val_loss.append(val)
        report.epochs = epoch + 1
        if val < best_val * (1.0 - 1e-4):
            best_val, stale = val, 0
            best_state = {k: t.detach().clone() for k, t in ae.state_dict().items()}
        else:
            stale += 1
            if stale >= settings.patience:
                break
    ae.load_state_dict(best_state)
    ae.requires_grad_(False)
    report.recon_err = relative_error(ae, x_val)
    report.seconds = time.perf_counter() - start
    return ae, report
