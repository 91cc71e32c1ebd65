r"""The k-DPP balancing prior of DPP-VAE (Chen (2019), chapter 4).

Model
-----
The N latents of a minibatch, ``Z = (z_1, ..., z_N)`` with ``z_n`` in R^D, get a continuous k-DPP
prior with k = N (thesis Sec. 4.3.1):

    p(Z) = det(L_Z) / e_N(lambda_1, lambda_2, ...),

where ``L_Z`` is the N x N matrix of the kernel

    L(x, y) = q(x) k(x, y) q(y),
    q(x)    = sqrt(alpha) prod_d (pi rho_d)^(-1/2) exp(-x_d^2 / (2 rho_d)),
    k(x, y) = prod_d exp(-(x_d - y_d)^2 / (2 sigma_d)),

(thesis Sec. 4.3.2, the Gaussian quality/similarity of Affandi, Fox, Adams & Taskar 2014), the
``lambda_n`` are the eigenvalues of the integral operator (L f)(x) = int L(x, y) f(y) dy on
L^2(R^D, dx), and ``e_N`` is the N-th elementary symmetric polynomial (thesis Sec. 4.2.3). The
thesis uses alpha, rho, sigma = 1000, 1, 1 (note that rho_d and sigma_d are *variances*).

This ``p(Z)`` is the density of the unordered set {z_1..z_N} (Janossy density): its integral over
R^(N x D) is N!, because int det(L_Z) dz_1..dz_N = N! e_N(lambda). ``ordered=True`` subtracts
log N! and gives the density of the ordered tuple (the minibatch tensor), which integrates to one;
the constant changes no gradient. The default follows the thesis (``ordered=False``).

A k-DPP is invariant to scaling L by a constant c (det(L_Z) and e_N(lambda) both scale by c^N), so
alpha cancels exactly from p(Z); it is kept because the thesis state it, and because it
fixes the scale of the intermediate numbers.

Eigenvalues (the symbols the thesis leaves undefined)
-----------------------------------------------------
The thesis (Sec. 4.3.2) writes, for a multi-index n = (n_1, ..., n_D),

    lambda_n = alpha prod_d ((beta_d^2 + 1)/2 + 1/(2 gamma_d))^(-1/2) (gamma_d (beta_d^2 + 1) + 1)^(1 - n_d)

without defining beta_d, gamma_d, n_d. We take them from Affandi et al. (2014), whose Gaussian
example this is (they use the eigen-decomposition of the Gaussian kernel under a Gaussian measure,
Fasshauer & McCourt 2012; the same spectrum is in Zhu et al. 1998 and Rasmussen & Williams 2006,
Sec. 4.3.1):

    gamma_d = sigma_d / rho_d,     beta_d = (1 + 2 / gamma_d)^(1/4),     n_d = 1, 2, 3, ...

so each dimension has a *geometric* spectrum a_d r_d^(n_d - 1) with
a_d = ((beta_d^2+1)/2 + 1/(2 gamma_d))^(-1/2) and r_d = 1 / (gamma_d (beta_d^2 + 1) + 1), and the
D-dimensional eigenvalues are all products over dimensions, one factor per dimension.

We re-derived this rather than copied it. With mu_d(dx) = q_d(x)^2 dx, the operator of L has the
eigenvalues of the kernel k under the measure mu (psi_n = q phi_n). For the quality as written,
q_d^2 = (pi rho_d)^(-1/2) N(x; 0, rho_d/2): a Gaussian of variance rho_d/2 with total mass
(pi rho_d)^(-1/2), and the Gaussian kernel of length-scale variance sigma_d under N(0, rho_d/2)
has exactly the spectrum a_d r_d^(n-1) above (a_d / (1 - r_d) = 1: the probability-measure
spectrum of a kernel with k(x, x) = 1 sums to one). Hence, for the L of the quality function used here,

    lambda_n = alpha prod_d (pi rho_d)^(-1/2) a_d r_d^(n_d - 1).                  (*)

The factor prod_d (pi rho_d)^(-1/2) is absent from the thesis' formula: that formula is the
spectrum of the same L with q_d^2 normalised to a probability density, i.e. with (pi rho_d)^(-1/4)
in q instead of (pi rho_d)^(-1/2). We use (*), which matches the L actually evaluated in
:func:`matrix_L`; mixing the thesis' q with the thesis' eigenvalues would shift log p(Z) by
N (D/2) log(pi) (1145 nats at N = 100, D = 20) and p would no longer integrate to one. The tests
check (*) independently: the trace sum lambda = int L(x, x) dx = alpha prod_d (pi rho_d)^(-1/2),
the Hilbert-Schmidt sum lambda^2 = int int L(x, y)^2 dx dy, both in closed form, and Mercer's
expansion sum_n lambda_n psi_n(x) psi_n(y) = L(x, y) with the Hermite eigenfunctions of
:func:`gaussian_kernel_eigenfunctions_1d`.

Normaliser (the truncated-spectrum bound)
-----------------------------------------
e_N(lambda_{1:inf}) has no closed form in D > 1. Affandi et al. (2014) bound it with the M largest
eigenvalues and the trace (quoted in thesis Sec. 4.3.2):

    e_k(lambda_{1:M}) <= e_k(lambda_{1:inf}) <= sum_{j=0}^k t_M^j / j!  e_{k-j}(lambda_{1:M}),
    t_M = tr(L) - sum_{n<=M} lambda_n.

(Proof: e_k(all) = sum_j e_j(tail) e_{k-j}(head) and e_j(tail) <= t_M^j / j!, since t_M^j expands
into j! e_j(tail) plus non-negative terms.) Like the thesis we use the upper bound, so the
KL term stays an upper bound (log p(Z) is under-estimated by at most the bound's gap).

Truncation choice. ``lambda_{1:M}`` must be the M *largest* eigenvalues (the products of the
per-dimension sequences), not the first ``n_per_dim`` of each dimension: a per-dimension cut keeps
n^D eigenvalues (2^20 at D = 20 and n = 2) and still misses large ones. The top-M set is the
best M-term choice: swapping a kept eigenvalue mu for a larger tail eigenvalue lambda can only
lower the upper bound (with G(s) = sum_j s^j/j! e_{k-j}(A) for the other kept ones A and T' the
rest of the tail, the difference is G(T'+lambda) - G(T'+mu) + mu G'(T'+lambda) - lambda G'(T'+mu)
>= mu (G'(T'+lambda) - G'(T'+mu)) >= 0 by convexity). Moving the (M+1)-th eigenvalue from the
tail to the head never raises the bound (the binomial expansion of (t' + lambda)^j / j! contains
the two terms that replace it), so the bound is non-increasing in M and converges to e_k as
t_M -> 0. We find the top-M products exactly by merging dimensions one at a time and keeping only
pairs (i, n) with i * n <= M (any other pair is dominated by at least M others).

Computing e_k. The Kulesza & Taskar (2012) recursion e_k^(n) = e_k^(n-1) + lambda_n e_{k-1}^(n-1)
(e_0 = 1) is run in log space with ``logaddexp``, so eigenvalues over many orders of magnitude and
k = 100 or more neither overflow nor underflow. For long spectra the eigenvalues are cut into
blocks, the recursion runs in all blocks at once, and the block polynomials prod (1 + lambda x)
truncated at degree k are multiplied pairwise (e_k(A u B) = sum_j e_j(A) e_{k-j}(B)), also in log
space: the same numbers, O(M k + (M / block) k^2) work but only ``block`` sequential steps.

Log-determinant. log det(L_Z) = 2 sum_n log q(z_n) + log det(K_Z) with K_Z[n, m] = k(z_n, z_m),
whose diagonal is exactly 1; log q is evaluated in log space (q(z)^2 is ~1e-7 at z = 0 and
underflows float32 for |z|^2 > 80 at D = 20), and log det(K_Z) comes from a Cholesky factor of
K_Z + eps I, eps = ``jitter`` times the diagonal (= 1): 1e-10 in float64, 1e-6 in float32 by
default. If the factorisation still fails (nearly coincident latents in float32), eps is raised
tenfold, up to five times. The jitter puts a floor of about (N - 1) log(eps) on log det(K_Z)
for coincident points; it is negligible for distinct ones.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from bayesx.errors import BayesxError

Param = Union[float, int, Sequence[float], Tensor]

#: the thesis' alpha, rho, sigma (Sec. 4.4.1)
DEFAULT_ALPHA = 1000.0
DEFAULT_RHO = 1.0
DEFAULT_SIGMA = 1.0
#: default number M of largest eigenvalues kept in the normaliser bound (see kdpp_log_prob)
DEFAULT_TRUNCATION = 4096
#: default jitter, relative to the diagonal of K_Z (which is 1)
DEFAULT_JITTER = {torch.float64: 1e-10, torch.float32: 1e-6}
_BLOCK = 128  # sequential steps of the log-space recursion before switching to block products
_MAX_GRID = 1 << 24  # largest full per-dimension grid of eigenvalues we build


# ----------------------------------------------------------------------------- validation

def _floats(value: Param, name: str) -> list[float]:
    if isinstance(value, Tensor):
        vals = value.detach().to("cpu", torch.float64).flatten().tolist()
    elif isinstance(value, (int, float)):
        vals = [float(value)]
    else:
        try:
            vals = [float(v) for v in value]
        except (TypeError, ValueError):
            raise BayesxError(f"{name} must be a positive number or a list of them (got {value!r})") from None
    if not vals:
        raise BayesxError(f"{name} is empty; give a positive number or one per latent dimension")
    for v in vals:
        if not (math.isfinite(v) and v > 0):
            raise BayesxError(f"{name} must be positive and finite (got {v!r})")
    return vals


def _scalar(value: Param, name: str) -> float:
    vals = _floats(value, name)
    if len(vals) != 1:
        raise BayesxError(f"{name} must be one positive number (got {len(vals)} values)")
    return vals[0]


def _per_dim(value: Param, d: int, name: str) -> tuple[float, ...]:
    vals = _floats(value, name)
    if len(vals) == 1:
        return tuple(vals * d)
    if len(vals) != d:
        raise BayesxError(f"{name} has {len(vals)} entries but the latent size is {d}; "
                          "give one value or one per latent dimension")
    return tuple(vals)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BayesxError(f"{name} must be an integer >= {minimum} (got {value!r})")
    return value


def _check_z(z) -> None:
    if not isinstance(z, Tensor) or not z.is_floating_point():
        raise BayesxError("the k-DPP prior needs a floating-point tensor of latents of shape (N, D)")
    if z.dim() < 2:
        raise BayesxError(f"the k-DPP prior needs latents of shape (..., N, D); got shape {tuple(z.shape)}")
    if z.shape[-2] < 1:
        raise BayesxError("the k-DPP prior needs N >= 1 latents in the minibatch (got N = 0); "
                          "check data.batch_size")
    if z.shape[-1] < 1:
        raise BayesxError("the k-DPP prior needs a latent size D >= 1 (got D = 0)")


# ----------------------------------------------------------------------------- elementary symmetric polynomials

def _neg(dtype: torch.dtype) -> float:
    """A finite stand-in for log 0: sums of two stay finite, and clamping restores it."""
    return torch.finfo(dtype).min / 8


def _recursion(x: Tensor, k: int, neg: float) -> Tensor:
    """log e_0..e_k of the last axis of x (log-eigenvalues), Kulesza-Taskar recursion in log space."""
    E = torch.full(x.shape[:-1] + (k + 1,), neg, dtype=x.dtype, device=x.device)
    E[..., 0] = 0.0
    for n in range(x.shape[-1]):
        top = min(k, n + 1)  # e_j^(n) = 0 for j > n: nothing to update above degree n + 1
        if top == 0:
            break
        upd = torch.logaddexp(E[..., 1:top + 1], x[..., n:n + 1] + E[..., :top]).clamp_min(neg)
        E = torch.cat([E[..., :1], upd, E[..., top + 1:]], dim=-1)
    return E


def _log_poly_mul(A: Tensor, B: Tensor, neg: float) -> Tensor:
    """Coefficients (log) of the product of two polynomials truncated at degree k (log coefficients)."""
    k1 = A.shape[-1]
    ar = torch.arange(k1, device=A.device)
    idx = ar[:, None] - ar[None, :]  # [j, i] -> j - i
    S = A[..., None, :] + B[..., idx.clamp_min(0)]  # [..., j, i] = log a_i + log b_{j-i}
    S = S.masked_fill(idx < 0, neg)
    return torch.logsumexp(S, dim=-1).clamp_min(neg)


def log_elementary_symmetric_all(log_lambdas: Tensor, k: int) -> Tensor:
    r"""log e_0, ..., log e_k of the eigenvalues exp(log_lambdas[..., :]), shape (..., k + 1).

    e_j(lambda_1..lambda_M) = sum_{|S| = j} prod_{n in S} lambda_n, computed by the recursion of
    Kulesza & Taskar (2012), e_j^(n) = e_j^(n-1) + lambda_n e_{j-1}^(n-1) with e_0 = 1 and
    e_j^(0) = 0, in log space (``logaddexp``), for blocks of up to 128 eigenvalues at once; block
    results are combined with e_j(A u B) = sum_i e_i(A) e_{j-i}(B) (also in log space). A
    log-eigenvalue of -inf is a zero eigenvalue; e_j = 0 (j > number of non-zero eigenvalues)
    comes back as -inf. Differentiable with respect to ``log_lambdas``; leading axes are batch.
    """
    k = _check_int(k, "k (the subset size of the k-DPP)", 0)
    x = log_lambdas if log_lambdas.is_floating_point() else log_lambdas.to(torch.get_default_dtype())
    if x.dim() == 0:
        x = x.reshape(1)
    neg = _neg(x.dtype)
    x = torch.where(torch.isneginf(x), torch.full_like(x, neg), x)
    M = x.shape[-1]
    if M <= _BLOCK:
        E = _recursion(x, k, neg)
    else:
        nb = -(-M // _BLOCK)
        x = F.pad(x, (0, nb * _BLOCK - M), value=neg)
        E = _recursion(x.reshape(x.shape[:-1] + (nb, _BLOCK)), k, neg)  # (..., nb, k+1)
        while E.shape[-2] > 1:
            if E.shape[-2] % 2:
                one = torch.full_like(E[..., :1, :], neg)
                one[..., 0] = 0.0
                E = torch.cat([E, one], dim=-2)
            E = _log_poly_mul(E[..., 0::2, :], E[..., 1::2, :], neg)
        E = E[..., 0, :]
    return torch.where(E <= neg / 2, torch.full_like(E, -math.inf), E)


def log_elementary_symmetric(log_lambdas: Tensor, k: int) -> Tensor:
    r"""log e_k(lambda) for lambda = exp(log_lambdas) along the last axis (see the _all variant).

    Stable for eigenvalues spanning many orders of magnitude and for large k (e.g. 100): every
    intermediate is a logarithm. Returns -inf when k exceeds the number of non-zero eigenvalues.
    """
    return log_elementary_symmetric_all(log_lambdas, k)[..., k]


# ----------------------------------------------------------------------------- the Gaussian kernel's spectrum

def _one_dim_spectrum(rho: Sequence[float], sigma: Sequence[float]) -> tuple[Tensor, Tensor]:
    """Per dimension, log of the first eigenvalue (pi rho)^(-1/2) a_d and log of the ratio r_d."""
    rho_t = torch.tensor(rho, dtype=torch.float64)
    sigma_t = torch.tensor(sigma, dtype=torch.float64)
    gamma = sigma_t / rho_t
    beta2 = torch.sqrt(1.0 + 2.0 / gamma)  # beta^2 with beta = (1 + 2/gamma)^(1/4)
    log_a = -0.5 * torch.log(0.5 * (beta2 + 1.0) + 0.5 / gamma)
    log_r = -torch.log1p(gamma * (beta2 + 1.0))
    log_first = log_a - 0.5 * torch.log(math.pi * rho_t)
    return log_first, log_r


def log_trace(alpha: Param, rho: Param, d: int) -> float:
    """log tr(L) = log int L(x, x) dx = log alpha - (1/2) sum_d log(pi rho_d) (closed form)."""
    a = _scalar(alpha, "method.dpp_alpha")
    r = _per_dim(rho, d, "method.dpp_rho")
    return math.log(a) - 0.5 * sum(math.log(math.pi * v) for v in r)


def _pair_index(len_c: int, len_s: int, M: int) -> tuple[Tensor, Tensor]:
    """All (i, n) (0-based) with i < len_c, n < len_s and (i + 1)(n + 1) <= M."""
    n = torch.arange(1, len_s + 1)
    counts = torch.clamp(M // n, max=len_c)
    n = n[counts > 0]
    counts = counts[counts > 0]
    n_idx = torch.repeat_interleave(n - 1, counts)
    starts = torch.cumsum(counts, 0) - counts
    i_idx = torch.arange(int(counts.sum())) - torch.repeat_interleave(starts, counts)
    return i_idx, n_idx


def gaussian_kernel_log_eigenvalues(alpha: Param, rho: Param, sigma: Param, d: int,
                                    n_per_dim: int | None = None, *, total: int | None = None) -> Tensor:
    r"""log of the largest eigenvalues of the Gaussian L-kernel, sorted in decreasing order (float64).

    lambda_n = alpha prod_d (pi rho_d)^(-1/2) a_d r_d^(n_d - 1) (equation (*) of the module doc),
    a_d = ((beta_d^2 + 1)/2 + 1/(2 gamma_d))^(-1/2), r_d = 1/(gamma_d (beta_d^2 + 1) + 1),
    gamma_d = sigma_d / rho_d, beta_d = (1 + 2/gamma_d)^(1/4) (Affandi et al. 2014).

    ``total=M`` keeps the M largest products over all multi-indices (the recommended truncation;
    exact, found by merging dimensions with the i * n <= M pruning). ``n_per_dim=n`` alone keeps
    the full grid n_d <= n (n^D values); both together keep the M largest of that grid.
    """
    d = _check_int(d, "the latent size D", 1)
    a = _scalar(alpha, "method.dpp_alpha")
    rho_v = _per_dim(rho, d, "method.dpp_rho")
    sigma_v = _per_dim(sigma, d, "method.dpp_sigma")
    if n_per_dim is None and total is None:
        raise BayesxError("give the truncation of the spectrum: total=M largest eigenvalues or n_per_dim")
    if n_per_dim is not None:
        n_per_dim = _check_int(n_per_dim, "n_per_dim", 1)
    if total is not None:
        total = _check_int(total, "method.dpp_truncation", 1)
    if total is None and n_per_dim ** d > _MAX_GRID:
        raise BayesxError(f"a per-dimension truncation of {n_per_dim} keeps {n_per_dim}^{d} eigenvalues; "
                          "use a total truncation (method.dpp_truncation = M largest products) instead")
    length = min(x for x in (n_per_dim, total) if x is not None)
    log_first, log_r = _one_dim_spectrum(rho_v, sigma_v)
    steps = torch.arange(length, dtype=torch.float64)
    C = log_first[0] + steps * log_r[0]
    for j in range(1, d):
        s = log_first[j] + steps * log_r[j]
        if total is None:
            C = (C[:, None] + s[None, :]).reshape(-1)
        else:
            i_idx, n_idx = _pair_index(C.shape[0], s.shape[0], total)
            vals = C[i_idx] + s[n_idx]
            C = torch.topk(vals, min(total, vals.shape[0])).values
    C = torch.sort(C, descending=True).values
    if total is not None:
        C = C[:total]
    return C + math.log(a)


def gaussian_kernel_eigenvalues(alpha: Param, rho: Param, sigma: Param, d: int,
                                n_per_dim: int | None = None, *, total: int | None = None) -> Tensor:
    """The eigenvalues themselves (float64, decreasing); see :func:`gaussian_kernel_log_eigenvalues`.

    In many dimensions they can underflow; the normaliser works with the logarithms.
    """
    return gaussian_kernel_log_eigenvalues(alpha, rho, sigma, d, n_per_dim, total=total).exp()


def gaussian_kernel_eigenfunctions_1d(x: Tensor, rho: float, sigma: float, n: int) -> Tensor:
    r"""The first n eigenfunctions psi_1..psi_n of the 1-D L-kernel (alpha = 1), shape x.shape + (n,).

    Orthonormal in L^2(R, dx), with L_1(x, y) = sum_m lambda_m psi_m(x) psi_m(y) and
    lambda_m = (pi rho)^(-1/2) a r^(m-1). From the Gaussian-kernel eigenfunctions under the
    probability density w(x) = (pi rho)^(-1/2) exp(-x^2/rho) (Fasshauer & McCourt 2012, as used by
    Affandi et al. 2014): phi_m(x) = sqrt(beta) exp(-delta^2 x^2) H_{m-1}(c beta x) / sqrt(2^(m-1) (m-1)!)
    with c^2 = 1/rho, delta^2 = c^2 (beta^2 - 1)/2, H the physicists' Hermite polynomials; then
    psi_m = sqrt(w) phi_m. The normalised Hermite values come from their three-term recursion.
    """
    n = _check_int(n, "n", 1)
    rho = _scalar(rho, "method.dpp_rho")
    sigma = _scalar(sigma, "method.dpp_sigma")
    gamma = sigma / rho
    beta = (1.0 + 2.0 / gamma) ** 0.25
    c = 1.0 / math.sqrt(rho)
    delta2 = 0.5 * c * c * (beta * beta - 1.0)
    t = c * beta * x
    h = [torch.ones_like(x), math.sqrt(2.0) * t]  # H_m / sqrt(2^m m!)
    for m in range(1, n - 1):
        h.append(math.sqrt(2.0 / (m + 1)) * t * h[m] - math.sqrt(m / (m + 1)) * h[m - 1])
    H = torch.stack(h[:n], dim=-1)
    log_env = 0.5 * math.log(beta) - delta2 * x * x - 0.25 * math.log(math.pi * rho) - x * x / (2 * rho)
    return torch.exp(log_env)[..., None] * H


# ----------------------------------------------------------------------------- the normaliser bound

@lru_cache(maxsize=64)
def _bounds_cached(k: int, alpha: float, rho: tuple[float, ...], sigma: tuple[float, ...],
                   truncation: int) -> tuple[float, float]:
    d = len(rho)
    log_eigs = gaussian_kernel_log_eigenvalues(alpha, rho, sigma, d, total=truncation)
    logE = log_elementary_symmetric_all(log_eigs, k)  # float64, (k + 1,)
    log_tr = log_trace(alpha, rho, d)
    head = torch.logsumexp(log_eigs, 0).item()
    tail_frac = -math.expm1(min(head - log_tr, 0.0))  # t_M / tr(L), >= 0
    lower = logE[k].item()
    if tail_frac <= 0.0:
        return lower, lower
    log_t = log_tr + math.log(tail_frac)
    j = torch.arange(k + 1, dtype=torch.float64)
    terms = j * log_t - torch.lgamma(j + 1.0) + logE.flip(0)  # t^j / j! e_{k-j}(head)
    return lower, torch.logsumexp(terms, 0).item()


def log_normalizer_bounds(k: int, alpha: Param, rho: Param, sigma: Param, d: int,
                          truncation: int = DEFAULT_TRUNCATION) -> tuple[float, float]:
    r"""(lower, upper) bounds on log e_k(lambda_{1:inf}) from the M = ``truncation`` largest eigenvalues.

    lower = log e_k(lambda_{1:M}); upper = log sum_{j=0}^k t_M^j / j! e_{k-j}(lambda_{1:M}),
    t_M = tr(L) - sum_{n<=M} lambda_n (Affandi et al. 2014; thesis Sec. 4.3.2). The upper bound is
    non-increasing and the lower bound non-decreasing in M; both tend to log e_k. Computed in float64
    and cached (the hyperparameters are fixed during training).
    """
    k = _check_int(k, "k (the subset size of the k-DPP)", 0)
    d = _check_int(d, "the latent size D", 1)
    truncation = _check_int(truncation, "method.dpp_truncation", 1)
    return _bounds_cached(k, _scalar(alpha, "method.dpp_alpha"), _per_dim(rho, d, "method.dpp_rho"),
                          _per_dim(sigma, d, "method.dpp_sigma"), truncation)


def log_normalizer_bound(k: int, alpha: Param, rho: Param, sigma: Param, d: int,
                         truncation: int = DEFAULT_TRUNCATION) -> float:
    """The truncated-spectrum upper bound on log e_k(lambda_{1:inf}) used by the prior (a float)."""
    return log_normalizer_bounds(k, alpha, rho, sigma, d, truncation)[1]


# ----------------------------------------------------------------------------- the kernel matrix and log p(Z)

def _params_like(z: Tensor, value: tuple[float, ...]) -> Tensor:
    return torch.tensor(value, dtype=z.dtype, device=z.device)


def _log_q_and_logits(z: Tensor, alpha: float, rho: tuple[float, ...], sigma: tuple[float, ...]):
    """log q(z_n), shape (..., N), and log k(z_n, z_m) = -sum_d (z_nd - z_md)^2 / (2 sigma_d), (..., N, N)."""
    rho_t, sigma_t = _params_like(z, rho), _params_like(z, sigma)
    log_q = (0.5 * math.log(alpha) - 0.5 * sum(math.log(math.pi * r) for r in rho)
             - (z * z / (2.0 * rho_t)).sum(-1))
    u = z / torch.sqrt(sigma_t)
    diff = u[..., :, None, :] - u[..., None, :, :]  # exact zeros on the diagonal, O(N^2 D) memory
    return log_q, -0.5 * (diff * diff).sum(-1)


def matrix_L(z: Tensor, alpha: Param = DEFAULT_ALPHA, rho: Param = DEFAULT_RHO,
             sigma: Param = DEFAULT_SIGMA) -> Tensor:
    """L_Z[n, m] = q(z_n) k(z_n, z_m) q(z_m) for latents z of shape (..., N, D); shape (..., N, N).

    Entries can underflow for large D or far-out latents; :func:`kdpp_log_prob` never forms L_Z.
    """
    _check_z(z)
    d = z.shape[-1]
    log_q, log_k = _log_q_and_logits(z, _scalar(alpha, "method.dpp_alpha"),
                                     _per_dim(rho, d, "method.dpp_rho"), _per_dim(sigma, d, "method.dpp_sigma"))
    return torch.exp(log_q[..., :, None] + log_k + log_q[..., None, :])


def _log_det_L(z: Tensor, alpha: float, rho: tuple[float, ...], sigma: tuple[float, ...],
               jitter: float | None) -> Tensor:
    work = z if z.dtype in (torch.float32, torch.float64) else z.float()
    log_q, log_k = _log_q_and_logits(work, alpha, rho, sigma)
    K = torch.exp(log_k)  # diagonal exactly 1
    eps = DEFAULT_JITTER.get(work.dtype, 1e-6) if jitter is None else float(jitter)
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    for _ in range(6):
        chol, info = torch.linalg.cholesky_ex(K + eps * eye)
        if not bool((info != 0).any()):
            break
        eps *= 10.0
    else:
        if not bool(torch.isfinite(z).all()):
            raise BayesxError("the k-DPP prior got latents with NaN or inf; the encoder diverged "
                              "(lower optim.lr or check the data)")
        raise BayesxError(f"the k-DPP prior's kernel matrix is not positive definite even with jitter {eps:g}; "
                          "raise method.dpp_jitter")
    log_det_K = 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    return (2.0 * log_q.sum(-1) + log_det_K).to(z.dtype)


def kdpp_log_prob(z: Tensor, alpha: Param = DEFAULT_ALPHA, rho: Param = DEFAULT_RHO,
                  sigma: Param = DEFAULT_SIGMA, truncation: int = DEFAULT_TRUNCATION,
                  jitter: float | None = None, ordered: bool = False) -> Tensor:
    r"""log p(Z) = log det(L_Z) - log e_N(lambda) for latents z of shape (N, D) (or (..., N, D)).

    k = N. log det(L_Z) = 2 sum_n log q(z_n) + log det(K_Z + eps I) by Cholesky (eps = ``jitter``
    relative to the unit diagonal of K_Z; 1e-10 in float64, 1e-6 in float32 unless given).
    log e_N is replaced by its truncated-spectrum upper bound with the M = ``truncation`` largest
    eigenvalues (default 4096; see the module doc), so the result is a lower bound on log p(Z).
    ``ordered=True`` subtracts log N! (density of the ordered minibatch tensor; see module doc).
    Differentiable with respect to z; keeps z's dtype and device. Returns a scalar for (N, D).
    """
    _check_z(z)
    n, d = z.shape[-2], z.shape[-1]
    a = _scalar(alpha, "method.dpp_alpha")
    rho_v = _per_dim(rho, d, "method.dpp_rho")
    sigma_v = _per_dim(sigma, d, "method.dpp_sigma")
    truncation = _check_int(truncation, "method.dpp_truncation", 1)
    if jitter is not None and not (math.isfinite(jitter) and jitter >= 0):
        raise BayesxError(f"method.dpp_jitter must be >= 0 and finite (got {jitter!r})")
    log_norm = _bounds_cached(n, a, rho_v, sigma_v, truncation)[1]
    if ordered:
        log_norm += math.lgamma(n + 1)
    return _log_det_L(z, a, rho_v, sigma_v, jitter) - log_norm


class KDPPPrior:
    """The DPP-VAE prior on a minibatch of latents: ``KDPPPrior(...).log_prob(z)`` (z: (N, D)).

    alpha is one positive float; rho and sigma are floats or per-dimension sequences/tensors of
    length D (the latent size), all fixed hyperparameters (no gradient reaches them). The
    normaliser bound depends only on (N, D) and the hyperparameters and is cached, so a training
    step costs one N x N Cholesky factorisation. A VAE loss adds ``-prior.log_prob(z)`` in place of
    the standard-normal log density summed over the minibatch.
    """

    def __init__(self, alpha: Param = DEFAULT_ALPHA, rho: Param = DEFAULT_RHO, sigma: Param = DEFAULT_SIGMA,
                 truncation: int = DEFAULT_TRUNCATION, jitter: float | None = None, ordered: bool = False):
        self.alpha = _scalar(alpha, "method.dpp_alpha")
        self._rho = _floats(rho, "method.dpp_rho")
        self._sigma = _floats(sigma, "method.dpp_sigma")
        self.truncation = _check_int(truncation, "method.dpp_truncation", 1)
        if jitter is not None and not (isinstance(jitter, (int, float)) and math.isfinite(jitter) and jitter >= 0):
            raise BayesxError(f"method.dpp_jitter must be >= 0 and finite (got {jitter!r})")
        self.jitter = None if jitter is None else float(jitter)
        self.ordered = bool(ordered)

    def rho(self, d: int) -> tuple[float, ...]:
        return _per_dim(self._rho, d, "method.dpp_rho")

    def sigma(self, d: int) -> tuple[float, ...]:
        return _per_dim(self._sigma, d, "method.dpp_sigma")

    def log_normalizer(self, n: int, d: int) -> float:
        """The bound used for log e_N (plus log N! when ``ordered``)."""
        n = _check_int(n, "the minibatch size N", 1)
        value = _bounds_cached(n, self.alpha, self.rho(d), self.sigma(d), self.truncation)[1]
        return value + (math.lgamma(n + 1) if self.ordered else 0.0)

    def log_prob(self, z: Tensor) -> Tensor:
        _check_z(z)
        n, d = z.shape[-2], z.shape[-1]
        return _log_det_L(z, self.alpha, self.rho(d), self.sigma(d), self.jitter) - self.log_normalizer(n, d)

    def __repr__(self) -> str:
        return (f"KDPPPrior(alpha={self.alpha:g}, rho={self._rho}, sigma={self._sigma}, "
                f"truncation={self.truncation}, ordered={self.ordered})")
