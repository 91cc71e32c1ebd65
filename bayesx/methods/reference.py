"""The reference posterior that approximate draws are compared with: a NUTS run of this product,
recorded as its own MLflow run and reused from the store.

Methods whose draws follow the posterior only approximately (variational families, Laplace,
Pathfinder, AE-HMC's latent chain) can look good by their own measures while missing the posterior,
so the runner compares their draws with a reference (``reference.enabled``; by default on for them,
on models whose exact moments are unknown and where a NUTS run is affordable):

    posterior_mean_err = mean_j |mean_j - mean_ref_j| / sd_ref_j
    posterior_sd_err   = mean_j |sd_j - sd_ref_j| / sd_ref_j

(mean absolute errors over coordinates, in units of the reference posterior standard deviation).
The reference's own Monte Carlo error puts a floor of about 0.8 / sqrt(ESS_ref) under the first.

The reference is NUTS (diagonal metric, Laplace start) with the ``reference`` settings. It is a run
of its own in the store, tagged ``role=reference`` and ``reference_key``: a digest of what defines the
posterior (the model's options with its files replaced by digests of their contents, the data's
options, the dtype) and of the reference settings. A later run of the same posterior finds it there
and downloads its moments instead of sampling again; the run that uses it is tagged
``reference_run_id``. Its wall time is its own (``wall_time_s`` of the reference run), never hidden in
the wall time of the run that asked for it.

Where the target declares its parameters (``parameter_shapes``: a ``model.params`` model, a Pyro model,
posteriordb's), the reference also keeps the moments of those parameters, constrained
(``declared_mean``, ``declared_sd``), so that an approximation's plots are read on the parameters the user
named; a reference saved before it kept them is plotted on the sampled coordinates.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from bayesx.diagnostics import convergence
from bayesx.errors import RecordedFailure, RunInterrupted
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.nuts import NUTS  # the reference is a product run like any other
from bayesx.run_settings import ReferenceSettings
from bayesx.store.record import Artifact, RunRecord, RunStart, Summary
from bayesx.store.run_note import describe_run
from bayesx.store.tracking import ERROR_TAG

ROLE_TAG, KEY_TAG, USED_TAG = "role", "reference_key", "reference_run_id"
FOLDER, FILE = "reference", "moments.npz"


@dataclass(frozen=True)
class Reference:
    """The reference posterior's moments and where they come from."""

    mean: np.ndarray
    sd: np.ndarray
    ess_bulk_min: float
    run_id: str
    seconds: float  # spent by this process computing and recording it: 0 when reused from the store
    not_cached: str | None = None  # why it could not be saved in the store (then later runs compute it again)
    declared_mean: np.ndarray | None = None  # the declared parameters' moments, constrained (module docstring)
    declared_sd: np.ndarray | None = None

    @property
    def computed_now(self) -> bool:
        return self.seconds > 0

    def on_declared(self) -> "Reference | None":
        """The reference with the declared parameters' moments as its own; None where it has none."""
        if self.declared_mean is None or self.declared_sd is None:
            return None
        return Reference(self.declared_mean, self.declared_sd, self.ess_bulk_min, self.run_id, self.seconds,
                         self.not_cached)


def cache_key(identity: dict, settings: ReferenceSettings) -> str:
    """A digest of what defines the posterior and of the reference's settings."""
    parts = {**identity, "reference": {k: v for k, v in asdict(settings).items() if k != "enabled"}}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def obtain(target, identity: dict, settings: ReferenceSettings, tracker, names: dict[str, str],
           parent_run_id: str | None = None, progress: bool | None = None, datasets: tuple = (),
           compile: str = "auto", density_identity: str | None = None) -> Reference:
    """The reference for this posterior: from a FINISHED reference run in the store with the same key,
    else a new NUTS run recorded as its own run (``names``: the method, model and data choices of the
    run that asks, for the reference run's name and tags; ``compile`` and ``density_identity``: its density's
    compile policy and identity, as the run's, bayesx.kernels.backend.prepare)."""
    key = cache_key(identity, settings)
    found = tracker.find_finished(KEY_TAG, key)
    if found is not None:
        with tempfile.TemporaryDirectory(prefix="bayesx-reference-") as tmp:
            folder = tracker.download(found, FOLDER, Path(tmp))
            if folder is not None and (folder / FILE).is_file():
                with np.load(folder / FILE) as saved:
                    declared = {k: saved[k] for k in ("declared_mean", "declared_sd") if k in saved.files}
                    return Reference(saved["mean"], saved["sd"], float(saved["ess_bulk_min"]), found, 0.0,
                                     **declared)
    return _compute(target, identity, settings, tracker, key, names, parent_run_id, progress, datasets,
                    compile, density_identity)


def _compute(target, identity: dict, settings: ReferenceSettings, tracker, key: str, names: dict[str, str],
             parent_run_id: str | None, progress: bool | None, datasets: tuple = (), compile: str = "auto",
             density_identity: str | None = None) -> Reference:
    start = time.perf_counter()
    model, data = names.get("model", "model"), names.get("data", "none")
    tags = {ROLE_TAG: "reference", KEY_TAG: key, "method": "nuts", "model": model, "data": data,
            "family": "sampler", "reference_for": names.get("method", ""), "seed": str(settings.seed),
            "n_chains": str(settings.n_chains)}
    params = {f"reference.{k}": v for k, v in asdict(settings).items() if k != "enabled"}
    opening = RunStart(f"reference-{model}-{data}", tags, params, yaml.safe_dump(
        json.loads(json.dumps({**identity, "reference": params}, default=str)), sort_keys=True), parent_run_id,
        datasets=datasets)
    print(f"computing the NUTS reference posterior ({settings.n_chains} chains, {settings.num_warmup}+"
          f"{settings.num_draws} iterations) as its own run; later runs of this posterior reuse it")
    with tracker.run(opening) as run, tempfile.TemporaryDirectory(prefix="bayesx-reference-") as tmp:
        gen = torch.Generator(device=target.device).manual_seed(settings.seed)
        nuts = NUTS(max_tree_depth=settings.max_tree_depth, num_warmup=settings.num_warmup,
                    num_draws=settings.num_draws, init="laplace")
        result = nuts.infer(target, RunInputs(target.initial_point(settings.n_chains, gen), gen, progress,
                                              compile=compile, density_identity=density_identity))
        if result.interrupted:
            raise RunInterrupted("interrupted while computing the reference posterior (nothing kept)")
        if result.error is not None:
            raise RecordedFailure(f"the NUTS reference posterior failed: {result.error}; set reference.enabled=false "
                              "to run without it")
        draws = result.draws.numpy()
        flat = draws.reshape(-1, draws.shape[-1])
        diagnostics = convergence.summarize(draws)
        mean, sd = flat.mean(0), flat.std(0, ddof=1)
        if not (np.isfinite(mean).all() and np.isfinite(sd).all()):
            raise RecordedFailure("the NUTS reference posterior has non-finite moments (is the posterior proper?); "
                              "set reference.enabled=false to run without it")
        declared = declared_moments(target, result.draws)
        path = Path(tmp) / FILE
        np.savez(path, mean=mean, sd=sd, ess_bulk_min=diagnostics["ess_bulk_min"], **declared)
        metrics = {**{k: float(v) for k, v in diagnostics.items()}, **result.timings,
                   "wall_time_s": time.perf_counter() - start}
        shown = ("ess_bulk_min", "rhat_max", "wall_time_s")
        what = (f"The reference posterior of {model} (data {data}) for the `{names.get('method', '')}` run that asked "
                f"for it and every later run of this posterior: NUTS, {settings.n_chains} chains x {settings.num_draws} "
                f"draws after {settings.num_warmup} warm-up, seed {settings.seed}; its moments are "
                f"`{FOLDER}/{FILE}`.")
        description = describe_run({**tags, "method": "nuts (reference)"}, "FINISHED", metrics, shown, what,
                                   tuple(result.warnings), ())
        not_cached = _store(run, RunRecord("FINISHED", metrics, tags=dict(result.tags),
                                           artifacts=(Artifact(path, FOLDER),),
                                           summary=Summary(compared=shown, description=description)))
        run_id = run.run_id
    return Reference(mean, sd, float(diagnostics["ess_bulk_min"]), run_id, time.perf_counter() - start, not_cached,
                     **declared)


def declared_moments(target, draws: torch.Tensor) -> dict[str, np.ndarray]:
    """The mean and sd of the declared parameters, constrained (``target.constrain``), over the pooled draws;
    empty where the target declares none (``parameter_shapes`` is None) or they are not finite."""
    if target.parameter_shapes() is None:
        return {}
    read = target.read_draws(draws)
    flat = read.reshape(-1, read.shape[-1])
    mean, sd = flat.mean(0), flat.std(0, ddof=1)
    if not (np.isfinite(mean).all() and np.isfinite(sd).all()):
        return {}
    return {"declared_mean": mean, "declared_sd": sd}


def _store(run, record: RunRecord) -> str | None:
    """Record the reference run; a store that refuses (its files cannot be written, say) is a warning, not the
    failure of the run that asked for the reference: that run uses the moments computed here, and the
    reference run ends FAILED, so that no later run takes it for a cached reference. Returns why, or None."""
    try:
        run.store(record)
        return None
    except Exception as exc:  # noqa: BLE001 - any refusal of the store; interrupts are BaseExceptions and pass
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        print(f"bayesx: warning: the reference posterior could not be saved in the store ({why}); this run uses "
              f"it, and later runs of this posterior will compute it again", file=sys.stderr)
        run.status = "FAILED"
        with contextlib.suppress(Exception):
            run.set_tags({ERROR_TAG: f"its moments could not be saved in the store: {why}"})
        return why


def posterior_error(draws: np.ndarray, reference: Reference) -> dict[str, float]:
    flat = draws.reshape(-1, draws.shape[-1])
    sd_ref = np.maximum(reference.sd, 1e-300)
    return {"posterior_mean_err": float(np.mean(np.abs(flat.mean(0) - reference.mean) / sd_ref)),
            "posterior_sd_err": float(np.mean(np.abs(flat.std(0, ddof=1) - reference.sd) / sd_ref)),
            "reference_ess_bulk_min": reference.ess_bulk_min}


def remark(reference: Reference) -> str:
    """The summary's sentence on where the reference came from."""
    if reference.not_cached:
        return (f"reference posterior: NUTS run {reference.run_id[:8]} computed now in {reference.seconds:.1f} s, "
                f"not saved in the store ({reference.not_cached}), so later runs compute it again")
    if reference.computed_now:
        return (f"reference posterior: NUTS run {reference.run_id[:8]} computed now in {reference.seconds:.1f} s "
                "(its own run; not in this run's wall_time_s)")
    return f"reference posterior: NUTS run {reference.run_id[:8]}, reused from the store"
