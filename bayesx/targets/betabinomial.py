"""The beta-binomial model for overdispersed counts (``model=betabinomial``): Gelman et al.'s
hierarchical model of the rat-tumour data (Tarone 1982; Bayesian Data Analysis, sec. 5.3), the
two-dimensional "overdispersed counts" example of Salimans, Kingma and Welling (2015) that the
advanced-VI lecture shows for Hamiltonian VI.

y_j ~ Binomial(N_j, theta_j), theta_j ~ Beta(alpha, beta), j = 1..71, with theta integrated out and
the prior p(alpha, beta) ∝ (alpha + beta)^(-5/2), in the coordinates z = (log(alpha / beta),
log(alpha + beta)) (Jacobian alpha beta):

    log p(z | y) = sum_j [log B(alpha + y_j, beta + N_j - y_j) - log B(alpha, beta)]
                   + log alpha + log beta - 5/2 log(alpha + beta) + const.

The counts are small integers, so each Beta-function ratio is a finite product,
log B(a + y, b + f) - log B(a, b) = sum_{k<y} log(a + k) + sum_{k<f} log(b + k) - sum_{k<y+f} log(a + b + k),
evaluated as sum_k [c_y(k) log(alpha + k) + c_f(k) log(beta + k) - c_N(k) log(alpha + beta + k)] with
c_y(k) the number of groups with y_j > k (and so on): exact where lgamma differences would lose every
digit (alpha + beta = e^45 in the tail). Smooth and written in torch, so gradients and second derivatives come from autograd. The
posterior leans along log(alpha + beta) with a tail that decays like exp(-z2 / 2); its log normalizer
and moments are computed by quadrature on [-4, 0] x [-2, 45] (the tail beyond carries e^-22 of the
mass), and runs report their errors against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from bayesx.settings import Settings
from bayesx.targets.toy import KnownAnswers, quadrature_truth

BOX = ((-4.0, 0.0), (-2.0, 45.0))


def rat_tumors() -> tuple[np.ndarray, np.ndarray]:
    """(y, N) of the 71 groups, from the vendored table."""
    text = resources.files("bayesx.data").joinpath("embedded/rat_tumors.txt").read_text()
    rows = np.array([[int(v) for v in line.split()] for line in text.splitlines() if line and not line.startswith("#")])
    return rows[:, 0], rows[:, 1]


@dataclass(frozen=True)
class BetaBinomialSettings(Settings):
    pass


class BetaBinomial(KnownAnswers):
    """The rat-tumour beta-binomial posterior in (log(alpha / beta), log(alpha + beta))."""

    Settings = BetaBinomialSettings
    init_scale = 0.5

    def __init__(self, settings: BetaBinomialSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        self.configure(settings, options)
        self.device, self.dtype, self.dim = torch.device(device), dtype, 2
        y, n = rat_tumors()
        k = np.arange(n.max())
        counts = [(v[:, None] > k[None, :]).sum(0) for v in (y, n - y, n)]  # c_y(k), c_f(k), c_N(k)
        self.k = torch.as_tensor(k, dtype=dtype, device=self.device)
        self.c_y, self.c_f, self.c_n = (torch.as_tensor(c, dtype=dtype, device=self.device) for c in counts)
        self.truth = quadrature_truth(self.log_prob, BOX, n=1201, device=self.device)

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        """Around (-1.8, 2.5), near the posterior mode (BDA Figure 5.3)."""
        centre = torch.tensor([-1.8, 2.5], dtype=self.dtype, device=self.device)
        noise = torch.rand((n_chains, 2), generator=gen, dtype=self.dtype, device=self.device) * 2 - 1
        return centre + self.init_scale * noise

    def log_prob(self, q: Tensor) -> Tensor:
        u, v = q[..., 0:1], q[..., 1:2]
        log_alpha = v + torch.nn.functional.logsigmoid(u)  # alpha = e^v sigmoid(u)
        log_beta = v + torch.nn.functional.logsigmoid(-u)
        alpha, beta = torch.exp(log_alpha), torch.exp(log_beta)
        k = self.k
        likelihood = (self.c_y * torch.log(alpha + k) + self.c_f * torch.log(beta + k)
                      - self.c_n * torch.log(alpha + beta + k)).sum(-1)
        return likelihood + (log_alpha + log_beta - 2.5 * v)[..., 0]

    def describe(self) -> dict[str, str]:
        return {"dim": "2", "data_description": "rat tumours, 71 groups (Tarone 1982; BDA Table 5.1)",
                "data_source": "vendored: bayesx/data/embedded/rat_tumors.txt"}
