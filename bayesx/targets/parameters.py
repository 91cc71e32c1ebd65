"""Named, constrained parameters: what a user declares, and the maps between them and the sampled real vector.

A model declares each parameter by name with its support and shape, as a mapping (``model.params`` in the config):

    {mu: real, tau: positive, eta: "real[8]", w: "simplex[3]", sigma: "interval(0, 10)", L: "corr_cholesky[4]"}

Support names are PyTorch's (``torch.distributions.constraints``: the densities are written with
``torch.distributions``, whose ``support`` attributes a user reads them from), with Stan's names accepted for the
same sets and for the two PyTorch lacks (ordered vectors):

===================================  ===========================================  ==================================
support (aliases)                    constrained value y from unconstrained x      log |det dy/dx|
===================================  ===========================================  ==================================
real                                 y = x                                         0
positive (lower(0))                  y = exp(x)                                    sum x
greater_than(a), lower(a)            y = a + exp(x)                                sum x
less_than(b), upper(b)               y = b - exp(x)                                sum x
interval(a, b), unit_interval        y = a + (b - a) sigmoid(x)                    sum log(b - a) - |x| - 2 log1p(e^-|x|)
ordered                              y_1 = x_1, y_k = y_{k-1} + exp(x_k)           sum_{k>1} x_k
positive_ordered                     y_k = y_{k-1} + exp(x_k), y_0 = 0             sum x
simplex[K]                           y = softmax(x_1..x_{K-1}, 0)  (K-1 numbers)   sum_k log y_k
corr_cholesky[K] (cholesky_factor_   canonical partial correlations z = tanh(x),   sum log(1 - z^2) + 1/2 sum_{i>j}
corr)                                row i: y_ij = z_ij sqrt(1 - sum_{l<j} y_il^2)   log(1 - sum_{l<j} y_il^2)
positive_definite[K] (cov_matrix)    y = L L^T, L lower, L_ii = exp(x_ii)          K log 2 + sum_i (K - i + 2) x_ii
===================================  ===========================================  ==================================

(i 1-based in the last row.) The simplex is the additive log-ratio map (the last weight's logit pinned at 0), whose
Jacobian determinant is the product of all K weights; the Cholesky factor of a correlation matrix is Stan's
transform (Lewandowski, Kurowicka and Joe's canonical partial correlations, Stan Reference Manual, "Cholesky factors
of correlation matrices"); the covariance matrix is Stan's too (its Cholesky factor with a log diagonal). The maps
are written here rather than taken from ``torch.distributions.biject_to``: PyTorch has no ordered vectors and no
transform onto covariance matrices, and its stick-breaking and correlation-Cholesky transforms trace to operators
(``aten.max.dim``, an in-place ``index_put_``) that the plain C writer (native/codegen.py) does not compile, so
those densities would fall to AOTInductor; these use exp, log1p, log_softmax, cumsum, tanh and sqrt, which it does.
Every map works on a batch in front (``x`` of shape (..., m)) and on one point.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from collections.abc import Mapping

import torch
from torch import Tensor

from bayesx.errors import BayesxError

ALIASES = {
    "real": "real", "positive": "positive", "greater_than": "greater_than", "lower": "greater_than",
    "less_than": "less_than", "upper": "less_than", "interval": "interval", "unit_interval": "interval",
    "unit": "interval", "ordered": "ordered", "positive_ordered": "positive_ordered", "simplex": "simplex",
    "corr_cholesky": "corr_cholesky", "cholesky_factor_corr": "corr_cholesky",
    "positive_definite": "positive_definite", "cov_matrix": "positive_definite",
}
"""Every accepted support name -> the kind of map (module docstring)."""
MATRICES = ("corr_cholesky", "positive_definite")
VECTORS = ("ordered", "positive_ordered", "simplex")
_SPEC = re.compile(r"^\s*(?P<name>[a-z_]+)\s*(?:\((?P<args>[^)]*)\))?\s*(?:\[(?P<shape>[\d\s,]*)\])?\s*$")


@dataclass(frozen=True)
class Parameter:
    """One declared parameter: its name, the kind of its map, the map's bounds, its constrained shape and the
    count of unconstrained numbers it takes."""

    name: str
    kind: str
    shape: tuple[int, ...]
    size: int  # unconstrained numbers
    low: float = 0.0
    high: float = 1.0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def parse(declared: Mapping) -> tuple[Parameter, ...]:
    """The parameters a ``model.params`` mapping declares (name -> "support", "support[shape]" or
    "support(bounds)[shape]"); a bad declaration raises BayesxError naming it and the fix."""
    if not isinstance(declared, Mapping) or not declared:
        raise BayesxError("model.params must map each parameter's name to its support, e.g. "
                          "'model.params={mu: real, tau: positive, eta: \"real[8]\"}'")
    return tuple(_parameter(str(name), spec) for name, spec in declared.items())


def _parameter(name: str, spec) -> Parameter:
    where = f"model.params.{name}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", name):
        raise BayesxError(f"{where}: '{name}' is not a Python name; name parameters as identifiers (tau, eta_1)")
    match = _SPEC.match(str(spec)) if isinstance(spec, str) else None
    if match is None or match["name"] not in ALIASES:
        raise BayesxError(f"{where}={spec!r} is not a support; give one of {', '.join(sorted(ALIASES))}, with a shape "
                          f"in brackets where it is not a scalar (\"real[8]\", \"simplex[3]\", \"interval(0, 10)\")")
    word, kind = match["name"], ALIASES[match["name"]]
    args = _numbers(where, spec, match["args"])
    shape = _numbers(where, spec, match["shape"]) if match["shape"] is not None else ()
    if any(n < 1 or n != int(n) for n in shape):
        raise BayesxError(f"{where}={spec!r}: a shape is positive integers, e.g. [8] or [2, 3]")
    shape = tuple(int(n) for n in shape)
    low, high = 0.0, 1.0
    if kind == "interval" and word == "interval":
        if len(args) != 2 or not args[0] < args[1]:
            raise BayesxError(f"{where}={spec!r}: interval takes its bounds, low < high: \"interval(0, 10)\"")
        low, high = args
    elif kind in ("greater_than", "less_than"):
        if len(args) != 1:
            raise BayesxError(f"{where}={spec!r}: {word} takes one bound: \"{word}(0)\"")
        low = high = args[0]
    elif args:
        raise BayesxError(f"{where}={spec!r}: {word} takes no bounds")
    if kind in VECTORS + MATRICES:
        if len(shape) != 1 or shape[0] < (2 if kind != "ordered" and kind != "positive_ordered" else 1):
            raise BayesxError(f"{where}={spec!r}: {word} takes one size, at least 2: \"{word}[3]\"")
        k = shape[0]
        if kind == "simplex":
            return Parameter(name, kind, (k,), k - 1)
        if kind == "corr_cholesky":
            return Parameter(name, kind, (k, k), k * (k - 1) // 2)
        if kind == "positive_definite":
            return Parameter(name, kind, (k, k), k * (k + 1) // 2)
        return Parameter(name, kind, (k,), k)
    return Parameter(name, kind, shape, math.prod(shape), low, high)


def _numbers(where: str, spec, text: str | None) -> tuple[float, ...]:
    if text is None or not text.strip():
        return ()
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise BayesxError(f"{where}={spec!r}: '{text}' is not a list of numbers") from None


def dimension(parameters: tuple[Parameter, ...]) -> int:
    return sum(p.size for p in parameters)


def reported_names(parameters: tuple[Parameter, ...]) -> list[str]:
    """One name per constrained number, in C order: tau, eta[0], ..., L[0,1]."""
    names = []
    for p in parameters:
        if not p.shape:
            names.append(p.name)
            continue
        for index in torch.cartesian_prod(*[torch.arange(n) for n in p.shape]).reshape(-1, len(p.shape)).tolist():
            names.append(f"{p.name}[{','.join(str(i) for i in index)}]")
    return names


def constrain(parameters: tuple[Parameter, ...], x: Tensor) -> tuple[dict[str, Tensor], Tensor]:
    """The constrained parameters at unconstrained points ``x`` (..., dim), by name with shapes (..., *shape), and
    the log absolute Jacobian determinant of the map (...)."""
    values, log_jacobian, start = {}, x.new_zeros(x.shape[:-1]), 0
    for p in parameters:
        part = x[..., start:start + p.size]
        start += p.size
        value, log_det = _MAPS[p.kind](p, part)
        values[p.name] = value
        log_jacobian = log_jacobian + log_det
    return values, log_jacobian


def flatten(parameters: tuple[Parameter, ...], values: Mapping[str, Tensor]) -> Tensor:
    """The constrained values as one vector per point (..., sum of numel), in reported_names' order."""
    parts = []
    for p in parameters:
        value = values[p.name]
        batch = value.shape[:value.dim() - len(p.shape)]
        parts.append(value.reshape(*batch, p.numel))
    return torch.cat(parts, -1)


def unconstrain(parameters: tuple[Parameter, ...], given: Mapping, dtype: torch.dtype) -> Tensor:
    """The unconstrained point (dim,) of constrained values given by name (numbers or nested lists); a missing,
    misshapen or out-of-support value raises BayesxError naming it."""
    missing = [p.name for p in parameters if p.name not in given]
    extra = [name for name in given if name not in {p.name for p in parameters}]
    if missing or extra:
        raise BayesxError(f"model.init must give every declared parameter by name "
                          f"({'missing ' + ', '.join(missing) if missing else ''}"
                          f"{'; ' if missing and extra else ''}{'not declared: ' + ', '.join(extra) if extra else ''})")
    parts = []
    for p in parameters:
        try:
            value = torch.as_tensor(given[p.name], dtype=dtype)
        except (TypeError, ValueError):
            raise BayesxError(f"model.init.{p.name}={given[p.name]!r} is not numbers") from None
        if tuple(value.shape) != p.shape:
            raise BayesxError(f"model.init.{p.name} has shape {tuple(value.shape)}; {p.name} is declared with shape "
                              f"{p.shape}")
        x = _INVERSES[p.kind](p, value)
        if not bool(torch.isfinite(x).all()):
            raise BayesxError(f"model.init.{p.name}={value.tolist()} is outside its support ({p.kind}); give a value "
                              f"inside it")
        parts.append(x.reshape(-1))
    return torch.cat(parts)


# -- the maps: (parameter, x (..., size)) -> (y (..., *shape), log |det| (...)) ---------------------------------
def _log_sigmoid(x: Tensor) -> Tensor:
    return x.clamp(max=0) - torch.log1p(torch.exp(-x.abs()))


def _shaped(p: Parameter, x: Tensor) -> Tensor:
    return x.reshape(x.shape[:-1] + p.shape)


def _real(p, x):
    return _shaped(p, x), x.new_zeros(x.shape[:-1])


def _positive(p, x):
    return _shaped(p, torch.exp(x)), x.sum(-1)


def _greater_than(p, x):
    return _shaped(p, p.low + torch.exp(x)), x.sum(-1)


def _less_than(p, x):
    return _shaped(p, p.high - torch.exp(x)), x.sum(-1)


def _interval(p, x):
    width = p.high - p.low
    y = p.low + width * torch.sigmoid(x)
    log_det = (math.log(width) + _log_sigmoid(x) + _log_sigmoid(-x)).sum(-1)
    return _shaped(p, y), log_det


def _ordered(p, x):
    steps = torch.cat([x[..., :1], torch.exp(x[..., 1:])], -1)
    return torch.cumsum(steps, -1), x[..., 1:].sum(-1)


def _positive_ordered(p, x):
    return torch.cumsum(torch.exp(x), -1), x.sum(-1)


def _simplex(p, x):
    logits = torch.cat([x, x.new_zeros(*x.shape[:-1], 1)], -1)
    log_y = torch.log_softmax(logits, -1)
    return torch.exp(log_y), log_y.sum(-1)


def _lower_triangle(k: int, x: Tensor, diagonal: list[Tensor] | None, strict: Tensor) -> Tensor:
    """A (..., k, k) lower-triangular matrix from its rows' entries (built row by row: k is small)."""
    rows, start = [], 0
    zero = x.new_zeros(x.shape[:-1])
    for i in range(k):
        row = [strict[..., start + j] for j in range(i)]
        start += i
        row.append(diagonal[i] if diagonal is not None else x.new_ones(x.shape[:-1]))
        row += [zero] * (k - i - 1)
        rows.append(torch.stack(row, -1))
    return torch.stack(rows, -2)


def _corr_cholesky(p, x):
    k = p.shape[0]
    z = torch.tanh(x)
    log_det = torch.log1p(-z * z).sum(-1)
    rows, start = [], 0
    zero, one = x.new_zeros(x.shape[:-1]), x.new_ones(x.shape[:-1])
    for i in range(k):
        entries, used = [], zero  # used: sum of the row's squares so far
        for j in range(i):
            remaining = 1 - used
            log_det = log_det + 0.5 * torch.log(remaining)
            value = z[..., start + j] * torch.sqrt(remaining)
            entries.append(value)
            used = used + value * value
        start += i
        entries.append(torch.sqrt(1 - used) if i else one)
        entries += [zero] * (k - i - 1)
        rows.append(torch.stack(entries, -1))
    return torch.stack(rows, -2), log_det


def _positive_definite(p, x):
    k = p.shape[0]
    log_diagonal = x[..., :k]
    factor = _lower_triangle(k, x, [torch.exp(log_diagonal[..., i]) for i in range(k)], x[..., k:])
    weights = torch.arange(k + 1, 1, -1, dtype=x.dtype, device=x.device)  # K - i + 2 for i = 1..K
    log_det = k * math.log(2.0) + (weights * log_diagonal).sum(-1)
    return factor @ factor.transpose(-1, -2), log_det


_MAPS = {"real": _real, "positive": _positive, "greater_than": _greater_than, "less_than": _less_than,
         "interval": _interval, "ordered": _ordered, "positive_ordered": _positive_ordered, "simplex": _simplex,
         "corr_cholesky": _corr_cholesky, "positive_definite": _positive_definite}


# -- their inverses, for a starting point given in constrained values -------------------------------------------
def _inverse_corr_cholesky(p, y):
    k = p.shape[0]
    x = []
    for i in range(1, k):
        used = y.new_zeros(())
        for j in range(i):
            x.append(torch.atanh(y[i, j] / torch.sqrt(1 - used)))
            used = used + y[i, j] ** 2
    valid = torch.allclose(y, torch.tril(y)) and torch.allclose((y * y).sum(-1), torch.ones(k, dtype=y.dtype))
    out = torch.stack(x) if x else y.new_zeros(0)
    return out if valid else torch.full_like(out, math.nan)


def _inverse_positive_definite(p, y):
    k = p.shape[0]
    factor, info = torch.linalg.cholesky_ex(y)
    if int(info) != 0 or not torch.allclose(y, y.T):
        return y.new_full((p.size,), math.nan)
    rows, cols = torch.tril_indices(k, k, -1)
    return torch.cat([torch.log(torch.diagonal(factor)), factor[rows, cols]])


def _inverse_ordered(p, y):
    steps = torch.diff(y)
    return torch.cat([y[:1], torch.log(steps)])


def _inverse_positive_ordered(p, y):
    return torch.log(torch.diff(y, prepend=y.new_zeros(1)))


def _inverse_simplex(p, y):
    ok = bool((y > 0).all()) and abs(float(y.sum()) - 1) < 1e-6
    return torch.log(y[:-1] / y[-1]) if ok else y.new_full((p.size,), math.nan)


def _inverse_interval(p, y):
    u = (y - p.low) / (p.high - p.low)
    return torch.log(u) - torch.log1p(-u)


_INVERSES = {"real": lambda p, y: y, "positive": lambda p, y: torch.log(y),
             "greater_than": lambda p, y: torch.log(y - p.low), "less_than": lambda p, y: torch.log(p.high - y),
             "interval": _inverse_interval, "ordered": _inverse_ordered, "positive_ordered": _inverse_positive_ordered,
             "simplex": _inverse_simplex, "corr_cholesky": _inverse_corr_cholesky,
             "positive_definite": _inverse_positive_definite}
