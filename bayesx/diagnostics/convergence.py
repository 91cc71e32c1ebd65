"""Convergence and efficiency diagnostics from ArviZ (rank-normalized ESS and R-hat).

All functions take draws shaped (chains, draws, dim) and reduce over every coordinate.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

logging.getLogger("arviz").setLevel(logging.WARNING)
with warnings.catch_warnings():  # ArviZ announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

RHAT_LIMIT = 1.01  # rank-normalized split R-hat above this: the chains disagree (Vehtari et al. 2021)


BLOCK_BYTES = 32 * 1024**2
"""Per-coordinate diagnostics run over blocks of coordinates of about this many bytes of draws: ArviZ's rank
normalization and numpy's quantiles copy what they are given several times, which for a run's whole draws (60
chains x 1000 draws x 500 coordinates: 240 MB) tripled the run's peak memory."""


def coordinate_blocks(draws: np.ndarray) -> list[slice]:
    """Slices of the last axis of ``draws`` (..., dim) holding about BLOCK_BYTES of float64 each (at least one
    coordinate; one empty slice for dim 0)."""
    per_coordinate = 8 * max(int(np.prod(draws.shape[:-1])), 1)
    step = max(1, BLOCK_BYTES // per_coordinate)
    dim = draws.shape[-1]
    return [slice(j, j + step) for j in range(0, dim, step)] or [slice(0, 0)]


def _dataset(draws: np.ndarray):
    return az.convert_to_dataset({"theta": np.asarray(draws, dtype=np.float64)})


def _per_coordinate(diagnostic, draws: np.ndarray) -> np.ndarray:
    """ArviZ's ``diagnostic`` (dataset -> dataset) of every coordinate, (dim,), block by block."""
    draws = np.asarray(draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.concatenate([np.asarray(diagnostic(_dataset(draws[..., block]))["theta"].values,
                                          dtype=float).reshape(-1) for block in coordinate_blocks(draws)])


def ess_per_coordinate(draws: np.ndarray, method: str = "bulk") -> np.ndarray:
    """ArviZ ESS of every coordinate, (dim,)."""
    return _per_coordinate(lambda data: az.ess(data, method=method), draws)


def rhat_per_coordinate(draws: np.ndarray) -> np.ndarray:
    """Rank-normalized split R-hat of every coordinate (NaN with one chain)."""
    return _per_coordinate(az.rhat, draws)


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
    return az.from_dict(posterior={name: np.asarray(draws)}, sample_stats=stats or None,
                        dims={name: [f"{name}_dim"]}, coords=coords)


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
