"""Convergence and efficiency diagnostics from ArviZ (rank-normalized ESS and R-hat).

All functions take draws shaped (chains, draws, dim) and reduce over every coordinate.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings

import numpy as np

from bayesx.diagnostics import lazy
from bayesx.diagnostics.lazy import arviz

RHAT_LIMIT = 1.01  # rank-normalized split R-hat above this: the chains disagree (Vehtari et al. 2021)


BLOCK_BYTES = 8 * 1024**2
"""Per-coordinate diagnostics run over blocks of coordinates of about this many bytes of draws: ArviZ's rank
normalization and numpy's quantiles copy what they are given several times, which for a run's whole draws (60
chains x 1000 draws x 500 coordinates: 240 MB) tripled the run's peak memory; at 32 MB a 1,007-d run's checks of its
draws (4 x 630 x 1,007) still rose 0.2 GB above its sampling, at 8 MB 0.05 GB (results/bench_fixed_costs.md)."""


def coordinate_blocks(draws: np.ndarray) -> list[slice]:
    """Slices of the last axis of ``draws`` (..., dim) holding about BLOCK_BYTES of float64 each (at least one
    coordinate; one empty slice for dim 0)."""
    per_coordinate = 8 * max(int(np.prod(draws.shape[:-1])), 1)
    step = max(1, BLOCK_BYTES // per_coordinate)
    dim = draws.shape[-1]
    return [slice(j, j + step) for j in range(0, dim, step)] or [slice(0, 0)]


def _dataset(draws: np.ndarray):
    return arviz().convert_to_dataset({"theta": np.asarray(draws, dtype=np.float64)})


_computed: dict[tuple, np.ndarray] | None = None  # inside computed_once(): each diagnostic of each block, by content


@contextlib.contextmanager
def computed_once():
    """Within the block, a per-coordinate diagnostic of draws it has already been computed on (the same values,
    compared by a digest of their bytes) is taken from the first computation: a run's record asks for the bulk ESS
    three times (the family's ESS metrics, the posterior summary, the plots' lowest-ESS coordinates), which on a
    1,007-d model took 5-6 s each time. Outside it, every call computes."""
    global _computed
    outer = _computed
    _computed = {} if outer is None else outer
    try:
        yield
    finally:
        _computed = outer


def _content_key(name: str, block: np.ndarray) -> tuple:
    values = np.ascontiguousarray(block, dtype=np.float64)  # float32 draws and their float64 copy agree
    return name, values.shape, hashlib.blake2b(memoryview(values).cast("B"), digest_size=16).digest()


def _per_coordinate(name: str, diagnostic, draws: np.ndarray) -> np.ndarray:
    """``diagnostic`` (a block (chains, draws, k) -> (k,)) of every coordinate, (dim,), block by block; ``name``
    tells the diagnostics apart in :func:`computed_once`'s memory."""
    draws = np.asarray(draws)
    parts = []
    for block in coordinate_blocks(draws):
        key = _content_key(name, draws[..., block]) if _computed is not None else None
        if key is not None and key in _computed:
            parts.append(_computed[key])
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            values = np.asarray(diagnostic(np.asarray(draws[..., block], dtype=np.float64)), dtype=float).reshape(-1)
        if key is not None:
            _computed[key] = values
        parts.append(values)
    return np.concatenate(parts)


def _arviz(block: np.ndarray, **options) -> np.ndarray:
    """ArviZ's own diagnostic (``az.ess(..., method=...)``, or ``az.rhat`` with ``rhat=True``) of each coordinate
    of ``block`` (chains, draws, k): a Python loop over the coordinates, 5-6 ms each on this machine."""
    az = arviz()
    data = _dataset(block)
    out = az.rhat(data) if options.pop("rhat", False) else az.ess(data, **options)
    return np.asarray(out["theta"].values, dtype=float).reshape(-1)


def ess_per_coordinate(draws: np.ndarray, method: str = "bulk") -> np.ndarray:
    """ArviZ's ESS of every coordinate, (dim,): bulk, tail and mean as ArviZ computes them, for all coordinates at
    once (:func:`batched_ess`); ArviZ itself for its other methods."""
    if method in BATCHED_ESS:
        return _per_coordinate(f"ess_{method}", lambda block: batched_ess(block, method), draws)
    return _per_coordinate(f"ess_{method}", lambda block: _arviz(block, method=method), draws)


def rhat_per_coordinate(draws: np.ndarray) -> np.ndarray:
    """Rank-normalized split R-hat of every coordinate (NaN with one chain), as ArviZ's ``rhat`` computes it, for
    all coordinates at once (:func:`batched_rhat`)."""
    return _per_coordinate("rhat", batched_rhat, draws)


# --- ArviZ's ESS and R-hat over many coordinates at once ------------------------------------------------------------
# ArviZ (0.23) computes each coordinate's ESS and R-hat in a Python loop (a rank transform, an FFT and Geyer's
# sequences per coordinate: 5-6 ms each), 17 s of a 1,007-d model's record. The functions below are the same
# computations (arviz.stats.diagnostics: _ess_bulk, _ess_tail, _ess_mean, _rhat_rank, _z_scale, _ess, _rhat) with the
# coordinates as a leading axis: the same rank transform (scipy's rankdata, average ties, Blom's offset 3/8, the
# normal quantile), ArviZ's own autocovariance (``az.autocov``), Geyer's initial positive and monotone sequences run
# for all coordinates in lock-step, and the type-7 quantiles of the tail ESS by scipy's mquantiles as ArviZ takes
# them. A coordinate that is not finite, or constant where ArviZ's ``_ess`` gives the draw count, is handed to
# ArviZ itself. tests/test_batched_diagnostics.py holds them to ArviZ's values to 1e-9 (relative).

BATCHED_ESS = ("bulk", "tail", "mean")
TAIL_PROBS = (0.05, 0.95)  # ArviZ's tail ESS: the smaller of the 5% and 95% quantiles' ESS


def _split_chains(x: np.ndarray) -> np.ndarray:
    """(chains, draws, k) -> (2 chains, draws // 2, k): each chain's first and last halves (ArviZ's split)."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank-normalized values of each coordinate of ``x`` (chains, draws, k): the normal quantiles of its ranks over
    all chains and draws (average ties), offset as Blom (1958), (r - 3/8) / (n + 1/4)."""
    stats = lazy.load("scipy.stats")
    rows = np.ascontiguousarray(x.reshape(-1, x.shape[-1]).T)  # (k, n): rankdata sorts contiguous rows 2x faster
    rank = stats.rankdata(rows, method="average", axis=-1)
    # scipy's norm.ppf is ndtri inside (0, 1), where every offset rank lies, after checks that cost 2 s on 4e6 values
    z = lazy.load("scipy.special").ndtri((rank - 0.375) / (rows.shape[1] + 0.25))
    return z.T.reshape(x.shape)


def _split_z_scale(x: np.ndarray) -> np.ndarray:
    """``_z_scale(_split_chains(x))``, which the bulk ESS and R-hat both take: computed once inside
    :func:`computed_once`."""
    key = _content_key("split_z", x) if _computed is not None else None
    if key is not None and key in _computed:
        return _computed[key]
    z = _z_scale(_split_chains(x))
    if key is not None:
        _computed[key] = z
    return z


def _ess(x: np.ndarray) -> np.ndarray:
    """ArviZ's ``_ess`` (Geyer's initial monotone sequence over the chains' pooled autocorrelations, Vehtari et al.
    2021, eq. 10 and their section 3.2) of each coordinate of ``x`` (chains, draws, k), (k,)."""
    n_chain, n_draw, k = x.shape
    acov = arviz().autocov(np.ascontiguousarray(np.moveaxis(x, -1, 0)), axis=-1)  # (k, chains, draws)
    mean_acov = acov.mean(axis=1)  # (k, draws): the chains' average at each lag
    mean_var = acov[:, :, 0].mean(axis=1) * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus = var_plus + np.var(np.moveaxis(x.mean(axis=1), -1, 0), axis=1, ddof=1)
    rho = np.zeros((k, n_draw))
    rho[:, 0] = 1.0
    even, odd = np.ones(k), 1.0 - (mean_var - mean_acov[:, 1]) / var_plus
    rho[:, 1] = odd
    t, last = 1, np.ones(k, dtype=int)  # last: where each coordinate's positive sequence stopped
    active = np.full(k, t < n_draw - 3) & (even + odd > 0.0)
    while active.any():  # Geyer's initial positive sequence, each coordinate until its pair sum turns negative
        new_even = 1.0 - (mean_var - mean_acov[:, t + 1]) / var_plus
        new_odd = 1.0 - (mean_var - mean_acov[:, t + 2]) / var_plus
        even, odd = np.where(active, new_even, even), np.where(active, new_odd, odd)
        kept = active & (new_even + new_odd >= 0)
        rho[kept, t + 1], rho[kept, t + 2] = new_even[kept], new_odd[kept]
        t += 2
        last = np.where(active, t, last)
        active = active & (t < n_draw - 3) & (even + odd > 0.0)
    max_t = last - 2
    rows = np.arange(k)
    improve = even > 0
    rho[rows[improve], max_t[improve] + 1] = even[improve]
    for t in range(1, int(max_t.max(initial=0)) - 1, 2):  # Geyer's initial monotone sequence
        on = t <= max_t - 2
        pair, before = rho[:, t + 1] + rho[:, t + 2], rho[:, t - 1] + rho[:, t]
        lower = on & (pair > before)
        rho[lower, t + 1] = before[lower] / 2.0
        rho[lower, t + 2] = rho[lower, t + 1]
    lags = np.arange(n_draw)
    inside = np.where(lags[None, :] < max_t[:, None] + 1, rho, 0.0).sum(axis=1)
    edge = np.where(max_t + 1 < n_draw, rho[rows, np.minimum(max_t + 1, n_draw - 1)], 0.0)
    size = n_chain * n_draw
    tau = np.maximum(-1.0 + 2.0 * inside + edge, 1 / np.log10(size))
    ess = size / tau
    ess[np.isnan(rho).any(axis=1)] = np.nan
    return ess


def _regular(x: np.ndarray) -> np.ndarray:
    """The coordinates of ``x`` (chains, draws, k) the batched ``_ess`` takes: not constant (ArviZ gives those the
    draw count, and a constant coordinate's autocovariance divides 0 by 0)."""
    return (x.max(axis=(0, 1)) - x.min(axis=(0, 1))) >= np.finfo(float).resolution


def _batched_ess_of(x: np.ndarray) -> np.ndarray:
    """ArviZ's ``_ess`` of each coordinate of ``x`` (chains, draws, k), constant ones as ArviZ counts them."""
    out = np.full(x.shape[-1], float(x.shape[0] * x.shape[1]))
    regular = _regular(x)
    if regular.any():
        out[regular] = _ess(x[..., regular])
    return out


def batched_ess(block: np.ndarray, method: str) -> np.ndarray:
    """ArviZ's ESS (``az.ess(..., method=method)``, bulk, tail or mean) of each coordinate of ``block`` (chains,
    draws, k), computed for all of them at once; ArviZ itself where a coordinate is not finite."""
    block = np.asarray(block, dtype=np.float64)
    n_chain, n_draw, k = block.shape
    if n_draw < 4 or n_chain < 1:  # ArviZ's own answer (NaN) for too few draws
        return _arviz(block, method=method)
    out = np.full(k, np.nan)
    finite = np.isfinite(block).all(axis=(0, 1))
    if (~finite).any():
        out[~finite] = _arviz(block[..., ~finite], method=method)
    x = block[..., finite]
    if x.shape[-1] == 0:
        return out
    if method == "bulk":
        out[finite] = _batched_ess_of(_split_z_scale(x))
    elif method == "mean":
        out[finite] = _batched_ess_of(_split_chains(x))
    else:
        mquantiles = lazy.load("scipy.stats").mstats.mquantiles
        flat = x.reshape(-1, x.shape[-1])
        per_prob = []
        for prob in TAIL_PROBS:
            quantile = np.asarray(mquantiles(flat, [prob], alphap=1, betap=1, axis=0)).reshape(-1)
            per_prob.append(_batched_ess_of(_split_chains((x <= quantile).astype(float))))
        out[finite] = np.minimum(*per_prob)
    return out


def _rhat(x: np.ndarray) -> np.ndarray:
    """ArviZ's ``_rhat`` (the potential scale reduction of Gelman and Rubin) of each coordinate of ``x`` (chains,
    draws, k)."""
    n = x.shape[1]
    between = n * np.var(x.mean(axis=1), axis=0, ddof=1)
    within = np.var(x, axis=1, ddof=1).mean(axis=0)
    return np.sqrt((between / within + n - 1) / n)


def batched_rhat(block: np.ndarray) -> np.ndarray:
    """ArviZ's rank-normalized split R-hat (``az.rhat``, Vehtari et al. 2021: the larger of the bulk's and the
    folded draws' R-hat) of each coordinate of ``block`` (chains, draws, k), for all of them at once; ArviZ itself
    where a coordinate is not finite, and NaN with fewer than two chains or four draws."""
    block = np.asarray(block, dtype=np.float64)
    n_chain, n_draw, k = block.shape
    if n_draw < 4 or n_chain < 2:
        return np.full(k, np.nan)
    out = np.full(k, np.nan)
    finite = np.isfinite(block).all(axis=(0, 1))
    if (~finite).any():
        out[~finite] = _arviz(block[..., ~finite], rhat=True)
    if not finite.any():
        return out
    bulk = _rhat(_split_z_scale(block[..., finite]))
    x = _split_chains(block[..., finite])
    folded = np.abs(x - np.median(x.reshape(-1, x.shape[-1]), axis=0))
    tail = _rhat(_z_scale(folded))
    out[finite] = np.where(tail > bulk, tail, bulk)  # ArviZ's max(bulk, tail), NaN where bulk is
    return out


def summarize(draws: np.ndarray) -> dict[str, float]:
    """ess_bulk_min/median, ess_tail_min and (with >= 2 chains) rhat_max over all coordinates."""
    draws = np.asarray(draws)
    if draws.shape[1] < 4:  # ArviZ needs a few draws per chain
        return {}
    bulk = ess_per_coordinate(draws, "bulk")
    tail = ess_per_coordinate(draws, "tail")
    out = {
        "ess_bulk_min": _over_coordinates(np.min, bulk),
        "ess_bulk_median": _over_coordinates(np.median, bulk),
        "ess_tail_min": _over_coordinates(np.min, tail),
    }
    if draws.shape[0] >= 2:
        out["rhat_max"] = _over_coordinates(np.max, rhat_per_coordinate(draws))
    return out


def _over_coordinates(reduce, values: np.ndarray) -> float:
    """``reduce`` over the coordinates where the diagnostic is defined (not NaN: e.g. a coordinate that never
    moved); NaN where it is defined nowhere (which the runner does not log), without numpy's warning."""
    defined = np.asarray(values)[~np.isnan(values)]
    return float(reduce(defined)) if defined.size else float("nan")


def lowest_ess_coordinates(draws: np.ndarray, k: int) -> list[int]:
    """The k coordinates with the smallest bulk ESS (the ones worth looking at)."""
    if np.asarray(draws).shape[1] < 4:
        return list(range(min(k, draws.shape[-1])))
    bulk = ess_per_coordinate(draws, "bulk")
    return [int(i) for i in np.argsort(np.nan_to_num(bulk, nan=np.inf))[:k]]


def to_inference_data(draws: np.ndarray, sample_stats: dict[str, np.ndarray], name: str = "theta",
                      coordinate_names: list[str] | None = None):
    """An ArviZ InferenceData with the draws as one vector variable (its coordinates named where given)
    and the sampler statistics."""
    stats = {k: np.asarray(v) for k, v in sample_stats.items() if np.asarray(v).ndim == 2}
    if "divergent" in stats:
        stats["diverging"] = stats.pop("divergent").astype(bool)
    coords = {f"{name}_dim": list(coordinate_names)} if coordinate_names else None
    return arviz().from_dict(posterior={name: np.asarray(draws)}, sample_stats=stats or None,
                        dims={name: [f"{name}_dim"]}, coords=coords)


def named_inference_data(values: np.ndarray, shapes: dict[str, tuple[int, ...]],
                         sample_stats: dict[str, np.ndarray]):
    """An ArviZ InferenceData with one posterior variable per named parameter, of its shape (values: (chains, draws,
    p), the parameters' numbers flattened in C order one after another, in ``shapes``' order), so that
    ``az.summary`` and ``az.plot_posterior`` read them by name; and the sampler statistics."""
    stats = {k: np.asarray(v) for k, v in sample_stats.items() if np.asarray(v).ndim == 2}
    if "divergent" in stats:
        stats["diverging"] = stats.pop("divergent").astype(bool)
    chains, draws = values.shape[:2]
    posterior, start = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape, dtype=np.int64))
        posterior[name] = np.asarray(values[..., start:start + size]).reshape(chains, draws, *shape)
        start += size
    if start != values.shape[-1]:
        raise ValueError(f"the parameters' shapes hold {start} numbers; the draws have {values.shape[-1]}")
    return arviz().from_dict(posterior=posterior, sample_stats=stats or None)


def named_blocks(names: list[str]) -> dict[str, tuple[int, ...]] | None:
    """The parameters a flat list of reported names spells (``mu``, ``theta[1]``, ..., ``theta[8]``: mu of shape (),
    theta of shape (8,)), where every name is a scalar or an element of a vector whose elements come together and in
    order (from 0 or from 1); None where the names spell no such blocks."""
    shapes: dict[str, tuple[int, ...]] = {}
    previous, first = None, None
    for name in names:
        base, bracket, rest = name.partition("[")
        if not bracket:
            if name in shapes:
                return None
            shapes[name], previous = (), None
            continue
        index = rest.rstrip("]")
        if not index.isdigit() or not base.isidentifier():
            return None
        if base != previous:
            if base in shapes:
                return None
            first, previous, shapes[base] = int(index), base, (0,)
            if first not in (0, 1):
                return None
        if int(index) != first + shapes[base][0]:
            return None
        shapes[base] = (shapes[base][0] + 1,)
    return shapes if all(name.isidentifier() for name in shapes) else None


def quantity_ess_name(name: str, values: np.ndarray) -> str:
    """``ess_<name>`` for a scalar quantity (chains, draws), ``ess_<name>_min`` for (chains, draws, k)."""
    return f"ess_{name}" if np.ndim(values) == 2 else f"ess_{name}_min"


def quantity_ess(quantities: dict[str, np.ndarray]) -> dict[str, float]:
    """Bulk ESS of per-draw quantities of interest (the smallest over k for vector quantities), named
    by :func:`quantity_ess_name`; none with fewer than 4 draws."""
    out = {}
    for name, values in quantities.items():
        values = np.asarray(values, dtype=np.float64)
        if values.ndim < 2 or values.shape[1] < 4:
            continue
        ess = np.nanmin(ess_per_coordinate(values[:, :, None] if values.ndim == 2 else values, "bulk"))
        out[quantity_ess_name(name, values)] = float(ess)
    return out


def shown_against(value: float, limit: float) -> str:
    """``value`` with the fewest decimals (at least two) that tell it apart from ``limit``, so a warning shows why
    it fired: R-hat 1.014 against 1.01 reads "1.014", not "1.01"."""
    for decimals in range(2, 10):
        text = f"{value:.{decimals}f}"
        if text != f"{limit:.{decimals}f}":
            return text
    return repr(value)
