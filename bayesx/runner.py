"""The runner: the one place that knows the model, the method, the device and the tracker.

run_job(cfg):  validate -> build data, target, method -> seed -> (the reference posterior, its own run)
               -> open the run (with its data as dataset inputs) -> method.infer -> the family's metrics
               + target.evaluate -> one RunRecord (with its description, bayesx.store.run_note) -> the tracker
               stores it -> summary.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from bayesx.diagnostics import convergence, lazy, plots
from bayesx.diagnostics.summary import posterior_summary, summary_lines, write_summary
from bayesx.errors import BayesxError, InterruptKept, RunInterrupted
from bayesx.memory import check_room, dtype_name, peak_resident_gb, reset_peak
from bayesx.methods.base import Method, RunInputs, check_fits
from bayesx.reports.sweep_summary import parent_ended
from bayesx.result import Result
from bayesx.run_settings import DeviceSettings, ReferenceSettings, RunSettings, TrackingSettings, options_of, run_settings
from bayesx.settings import InvalidSetting, Settings, configure
from bayesx.store.checkpoint import FOLDER as CHECKPOINT
from bayesx.store.checkpoint import WALL_TIME, Resume, RunCheckpoint, load_resume, patient_interrupts, recording
from bayesx.store.provenance import data_inputs, provenance_tags
from bayesx.store.record import Artifact, RunRecord, RunStart, Summary
from bayesx.methods.reference import KEY_TAG, USED_TAG, Reference, cache_key, obtain, posterior_error
from bayesx.methods.reference import remark as reference_remark
from bayesx.store.run_note import describe_run
from bayesx.store.tracking import Tracker, check_store
from bayesx.targets.base import Capabilities, Evaluation

DTYPES = {"float32": torch.float32, "float64": torch.float64}


# --- building blocks ------------------------------------------------------------------------------
def resolve_device(device: DeviceSettings, model: Capabilities) -> tuple[torch.device, torch.dtype]:
    """The torch device and dtype of ``device=`` for a model of these capabilities: ``dtype=auto`` is float32 on a
    GPU and the model's declared ``cpu_dtype`` on a CPU."""
    name = device.name
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BayesxError(f"device={name} was asked for but CUDA is not available to torch {torch.__version__}; use device=cpu")
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        raise BayesxError(f"unknown device '{name}'; use device=cpu or device=cuda") from exc
    if device.num_threads:
        torch.set_num_threads(device.num_threads)
    if device.dtype != "auto":
        return resolved, DTYPES[device.dtype]
    return resolved, torch.float32 if resolved.type == "cuda" else DTYPES[model.cpu_dtype]


def build(node: DictConfig, group: str, **live):
    """The object a config group names: its ``_target_``'s declared ``Settings`` checked against the
    node's options (bayesx.settings: errors name ``<group>.<key>`` once), then ``_target_(settings=...,
    **live)`` with the live objects (data sets, devices) that must not pass through OmegaConf."""
    from hydra.utils import get_object

    try:
        factory = get_object(str(node._target_))
    except Exception as exc:
        raise BayesxError(f"cannot find {group}._target_ '{node._target_}': {str(exc).splitlines()[0]}") from None
    schema = getattr(factory, "Settings", None)  # the one check of a class we may not have written
    if not (isinstance(schema, type) and issubclass(schema, Settings)):
        raise BayesxError(f"{node._target_} declares no Settings; give it a bayesx.settings.Settings dataclass "
                          f"of its options (see ARCHITECTURE.md)")
    settings = configure(schema, options_of(node, group), group)
    return factory(settings=settings, **live)


def flatten(cfg: DictConfig) -> dict[str, object]:
    out: dict[str, object] = {}

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return out


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Within the block, SIGTERM raises RunInterrupted (as Ctrl-C raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise RunInterrupted(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


DEFAULT_DATA = "synthetic"  # conf/config.yaml's data default


def capabilities_of(model_cfg: DictConfig) -> Capabilities:
    """The model class's declared capabilities, read before the model is built (its data depend on them)."""
    from hydra.utils import get_class

    try:
        cls = get_class(str(model_cfg._target_))
    except Exception as exc:
        raise BayesxError(f"cannot find the model class '{model_cfg._target_}': {str(exc).splitlines()[0]}") from None
    caps = getattr(cls, "capabilities", None)  # the one check of a class we did not write: a user's model
    if not isinstance(caps, Capabilities):
        raise BayesxError(f"the model class {cls.__name__} declares no capabilities; derive it from "
                          f"bayesx.targets.base.TargetBase (see ARCHITECTURE.md, 'Adding a target')")
    return caps


def apply_data_default(cfg: DictConfig, choices: dict[str, str], task_overrides: list[str]) -> None:
    """Models may name their own data default (``capabilities.default_data``, e.g. the VAE's mnist); it
    applies when the data group was left at the global default by both the command line and the experiment."""
    from omegaconf import open_dict

    from bayesx.settings import conf_dir

    name = capabilities_of(cfg.model).default_data
    keys = [o.split("=")[0].lstrip("+~") for o in task_overrides]
    if name and choices.get("data") == DEFAULT_DATA and "data" not in keys:
        data_cfg = OmegaConf.load(conf_dir() / "data" / f"{name}.yaml")
        # data.KEY=VALUE on the command line went to the global default's node: carry them over
        for key in (k[len("data."):] for k in keys if k.startswith("data.")):
            if OmegaConf.select(data_cfg, key, default=_ABSENT) is _ABSENT:
                raise BayesxError(f"data.{key} is not an option of data={name} (the default data of "
                                  f"model={choices.get('model')}); see `bayesx run data={name} --cfg job`")
            OmegaConf.update(data_cfg, key, OmegaConf.select(cfg.data, key), merge=False)
        with open_dict(cfg):
            cfg.data = data_cfg
        choices["data"] = name


_ABSENT = object()


# --- the summary -------------------------------------------------------------------------------------
def summary_keys(method: Method, evaluation: Evaluation, metrics: dict[str, float]) -> tuple[str, ...]:
    """What the run's summary shows: the target's evaluation, the ESS of its per-draw quantities, the
    family's (and method's) key metrics, the posterior error against a reference, the wall time."""
    keys = list(evaluation.metrics)
    keys += [convergence.quantity_ess_name(name, values) for name, values in evaluation.quantities.items()]
    keys += [k for k in method.summary_keys if k not in keys]
    keys += sorted(k for k in metrics if k.startswith("posterior_") and k not in keys)
    keys += [k for k in ("log_evidence_err",) if k not in keys]
    keys.append("wall_time_s")
    return tuple(k for k in keys if k in metrics)


def compared_keys(method: Method, evaluation: Evaluation, metrics: dict[str, float]) -> tuple[str, ...]:
    """The few metrics `bayesx compare` tabulates for this run."""
    keys = [*evaluation.metrics, *method.compare_keys, "posterior_mean_err", "log_evidence_err", "wall_time_s"]
    return tuple(k for k in keys if k in metrics)


def print_summary(title: str, record: RunRecord) -> None:
    print(f"\n{title}  [{record.status}]")
    for k in record.summary.shown:
        print(f"  {k:<22} {record.metrics[k]:>14.4g}")
    if record.summary.posterior:
        print("  posterior:")
        for line in record.summary.posterior:
            print(f"    {line}")
    for remark in record.summary.remarks:
        print(f"  note: {remark}")
    for warning in record.summary.warnings:
        print(f"  warning: {warning}")


# --- the reference posterior ---------------------------------------------------------------------------
def wants_reference(run: RunSettings, method: Method, target, comparing: Callable[[], bool]) -> bool:
    """reference.enabled: true/false, or null for auto: on targets whose exact moments are unknown and
    where a NUTS run is affordable (both declared in the target's capabilities), for methods whose
    draws are approximate, and for an exact sampler where ``comparing()`` says so (a sweep over methods, or
    a reference already in the store: then samplers share the approximations' accuracy metrics); it is
    asked only then, as it may read the store."""
    enabled = run.reference.enabled
    if enabled is not None:
        return enabled
    caps = target.capabilities
    if not (caps.posterior and not caps.exact_moments and caps.reference_affordable):
        return False
    return method.approximate_draws or comparing()


SWEEP_OVERRIDES_TAG = "sweep_overrides"  # bayesx.cli.sweep's parent run: the sweep's command-line overrides


def sweeps_methods(overrides: str | None) -> bool:
    """Whether a sweep's overrides (``method=nuts,vi,pathfinder model=logreg``) run several methods."""
    return any(o.lstrip("+").startswith("method=") and "," in o for o in (overrides or "").split())


def preset_sweep() -> str:
    """A preset's own sweep (``hydra.sweeper.params``) as overrides, inside a Hydra job; else empty."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return ""
    params = HydraConfig.get().sweeper.get("params") or {}
    return " ".join(f"{key}={value}" for key, value in params.items())


def reference_comparison(tracker: Tracker, parent_run_id: str | None, identity: dict,
                         settings: ReferenceSettings) -> bool:
    """Whether an exact sampler's run is compared with the reference posterior by default: when its sweep
    compares methods (``-m method=a,b`` or a preset's sweep over ``method``: the reference is made once
    and shared by the sweep's runs), or when the store holds the reference already (free to reuse). A
    single sampler run never pays for a reference run; a preset that compares methods in other ways
    sets ``reference.enabled: true`` (as vi_comparison does)."""
    if parent_run_id and sweeps_methods(f"{tracker.tag_of(parent_run_id, SWEEP_OVERRIDES_TAG)} {preset_sweep()}"):
        return True
    return tracker.find_finished(KEY_TAG, cache_key(identity, settings)) is not None


def compared_with(metrics: dict[str, float], reference: Reference | None, settings: ReferenceSettings,
                  method_name: str) -> str | None:
    """One sentence on what the run's accuracy metrics measure against (its description says it)."""
    if reference is not None and "posterior_mean_err" in metrics:
        how = "computed now, its own run" if reference.computed_now else "cached in the store"
        text = (f"posterior_mean_err and posterior_sd_err against the reference NUTS run {reference.run_id[:8]} "
                f"({settings.n_chains} chains x {settings.num_draws} draws after {settings.num_warmup} warm-up, "
                f"seed {settings.seed}; {how})")
        if method_name == "nuts":
            text += "; a NUTS run of its own seed, so for this NUTS run they measure the Monte Carlo error of both"
        return text
    if any(k.startswith("ref_mean_err") for k in metrics):
        return "ref_mean_err_* and ref_sd_err_* against the posterior's posteriordb gold-standard draws"
    if "posterior_mean_err_max" in metrics:
        return "posterior_mean_err_max and posterior_sd_err_max against the target's exact moments"
    return None


def posterior_identity(cfg: DictConfig, target, dtype: torch.dtype) -> dict:
    """What defines the posterior for the reference cache: the model's options, with the files that
    define it replaced by digests of their contents (a custom model's density and data), the data's
    options and the dtype."""
    model = {**options_of(cfg.model, "model"), **target.content_digests(), "_target_": str(cfg.model._target_)}
    data = OmegaConf.to_container(cfg.data, resolve=True) if target.capabilities.uses_data else None
    return {"model": model, "data": data, "dtype": dtype_name(dtype)}



def posterior_digest(identity_json: str) -> str:
    """The posterior's identity (:func:`posterior_identity`, as JSON with sorted keys) in 16 hex characters: the
    sha256 prefix every run logs as its param ``posterior_digest``, so that a killed run is resumed only on the
    posterior it sampled (an edit of a custom density's file or data between the kill and the resume changes it,
    though the command, and so every other param, is the same)."""
    return hashlib.sha256(identity_json.encode()).hexdigest()[:16]


# --- resuming ------------------------------------------------------------------------------------
UNCOMPARED = ("resume", "progress", "run_name", "tracking.", "device.num_threads", "plots.")
"""Options that may differ between a killed run and its resumption."""

POSTERIOR_DIGEST = "posterior_digest"  # the param of every run that identifies its posterior
RESUME_REASONS = {POSTERIOR_DIGEST: "the density or its data changed since the run"}
"""Params that are not options but facts about the run, each with what a difference in it means."""


def find_resume(job: RunSettings, method: Method, tracker: Tracker, params: dict[str, object],
                stale_after_s: float, into: Path) -> tuple[str, Resume]:
    """The killed run ``job.resume`` and its checkpoint, after checking that it can be continued: the
    method can resume, the command's config and posterior are the run's (the tracker compares the params,
    ``posterior_digest`` among them), and an intact checkpoint exists. Damaged checkpoint files (a kill or a
    full disk while one was copied) are passed over for the last intact state, and one line says so."""
    if not method.resumable:
        raise BayesxError(f"resume= works for the methods whose state a checkpoint holds (samplers, VAE trainers); "
                          f"method={method.name} cannot resume, so run it again without resume=")
    run_id, folder = tracker.resume(job.resume, params, UNCOMPARED, stale_after_s, CHECKPOINT, into, RESUME_REASONS)
    state = load_resume(folder) if folder is not None else None
    if state is None:
        raise BayesxError(f"resume={job.resume}: the run has no intact checkpoint (checkpoint_every=0, it stopped "
                          f"before its first {job.checkpoint_every} draws, or its checkpoint files are damaged); "
                          f"run it again without resume=")
    if state.damaged:
        print(f"bayesx: warning: resume={job.resume}: {resume_note(state)}", file=sys.stderr, flush=True)
    return run_id, state


def resume_note(state: Resume) -> str:
    """What a resumption passed over in its checkpoint, and where it goes on from."""
    return f"the checkpoint's {state.damaged}; the run continues from {state.where()}, its last intact checkpoint"


def make_checkpoint(job: RunSettings, run, tmp: Path, clock: Callable[[], float]) -> RunCheckpoint | None:
    """Where the method saves as it goes: the run's ``checkpoint/`` folder and its metrics (None: off); each
    state keeps ``clock()``, the run's wall time so far."""
    if not job.checkpoint_every:
        return None
    scratch = tmp / CHECKPOINT
    scratch.mkdir()
    return RunCheckpoint(job.checkpoint_every, lambda path: run.log_artifact(path, CHECKPOINT), scratch,
                         run.log_metrics, clock)


# --- the job --------------------------------------------------------------------------------------
def run_start(cfg: DictConfig, choices: dict[str, str], job: RunSettings, dtype: torch.dtype,
              device: torch.device, method: Method, target, params: dict[str, object], parent_run_id: str | None,
              resumed: tuple[str, Resume] | None, data) -> RunStart:
    """The run as it is opened: its name, the tags that identify it (the preset, ``experiment=NAME``, among
    them), its params and config, and its data's splits as dataset inputs."""
    with_data = data is not None
    model_name = choices.get("model", "model")
    data_name = choices.get("data", "") if with_data else "none"
    tags = {
        "method": choices.get("method", ""), "model": model_name, "family": method.family, "data": data_name,
        "device": str(device), "dtype": dtype_name(dtype), **provenance_tags(),
        "seed": str(job.seed), "n_chains": str(job.n_chains),
        **{f"target.{k}": v for k, v in target.describe().items()},
    }
    if choices.get("experiment") not in (None, "null"):
        tags[PRESET_TAG] = str(choices["experiment"])
    if resumed:  # its params are the run's already (checked); MLflow does not let a param change
        tags["resumed_with"] = " ".join(f"{k}={v}" for k, v in params.items()
                                        if k.startswith(UNCOMPARED) and v is not None)[:5000]
        tags["wall_time_before_resume_s"] = f"{earlier_wall_time(resumed[1]):.1f}"
        if resumed[1].damaged:
            tags["resume_note"] = resume_note(resumed[1])
    own_data = target.describe().get("data_file")  # a custom model's file: its stem names the run's data
    shown_data = Path(own_data).stem if own_data and not with_data else data_name
    name = job.run_name or f"{choices.get('method')}-{model_name}-{shown_data}-seed{job.seed}"
    return RunStart(name, tags, params, OmegaConf.to_yaml(cfg, resolve=True), parent_run_id,
                    resumed[0] if resumed else None, data_inputs(data, data_name) if with_data else ())


PRESET_TAG = "preset"  # the experiment preset a run was made with (bayesx run experiment=quick)


def run_job(cfg: DictConfig, choices: dict[str, str], parent_run_id: str | None = None,
            on_open: Callable[[Tracker, str], None] | None = None) -> dict[str, float]:
    """Run one configured job end to end and record it; returns the logged metrics.

    Raises BayesxError for bad input (before any run is recorded where possible) and
    RunInterrupted / KeyboardInterrupt after recording a KILLED run with what it had.
    ``on_open(tracker, run_id)`` is told the run's id as soon as the store holds it, so the caller can
    read the run back however it ends (bayesx run --json).
    """
    wall_start = time.perf_counter()
    reset_peak()  # peak_memory_gb: this run's, not an earlier job's of a sweep in this process
    job, device_settings, tracking = run_settings(cfg)
    check_store(tracking.uri)  # a URI that names no store is refused before anything is built
    model = capabilities_of(cfg.model)
    device, dtype = resolve_device(device_settings, model)
    compile_policy = device_settings.compile_policy()  # passed to the method: the family prepares its density
    data = build(cfg.data, "data") if model.uses_data else None
    torch.manual_seed(job.seed)  # what draws from torch's global generator (a network's initial weights) is seeded too
    target = build(cfg.model, "model", data=data, device=device, dtype=dtype)
    method = build(cfg.method, "method")
    if not isinstance(method, Method):
        raise BayesxError(f"method={choices.get('method')} builds a {type(method).__name__}, not a bayesx method; "
                          f"derive it from a family in bayesx.methods.base (see ARCHITECTURE.md)")
    check_fits(method, target, choices.get("method", "?"), choices.get("model", "model"))
    try:
        method.check(target, job.n_chains)  # the method's own checks that need the target
    except InvalidSetting as exc:
        raise exc.as_error("method") from None
    check_room(method.memory_needs(target, job.n_chains), device)  # refused in one line before anything is allocated
    gen = torch.Generator(device=device).manual_seed(job.seed)
    initial = method.initial_points(target, job.n_chains, gen)
    identity = posterior_identity(cfg, target, dtype)  # digests a user's files: once
    identity_json = json.dumps(identity, sort_keys=True, default=str)

    tracker = Tracker(tracking.uri, job.experiment_name, tracking.artifact_root, tracking.heartbeat_s, parent_ended)
    params = {**flatten(cfg), POSTERIOR_DIGEST: posterior_digest(identity_json)}
    resume_dir = tempfile.TemporaryDirectory(prefix="bayesx-resume-") if job.resume else contextlib.nullcontext()
    # SIGTERM is caught from before any run exists until the last is closed, so a run is never left RUNNING
    with sigterm_as_interrupt(), patient_interrupts() as interrupts, resume_dir:
        resumed = (find_resume(job, method, tracker, params, tracking.stale_after_s, Path(resume_dir.name))
                   if job.resume else None)
        reference = None
        compared = functools.partial(reference_comparison, tracker, parent_run_id, identity, job.reference)
        if wants_reference(job, method, target, compared):  # its own run, before this one opens: the run's
            # MLflow Duration and its wall_time_s leave it out
            names = {"method": choices.get("method", ""), "model": choices.get("model", "model"),
                     "data": choices.get("data", "") if data is not None else "none"}
            datasets = data_inputs(data, names["data"]) if data is not None else ()
            reference = obtain(target, identity, job.reference, tracker, names, parent_run_id, job.progress, datasets,
                               compile_policy, identity_json)
            reset_peak()  # the reference's memory was its own run's
        start = run_start(cfg, choices, job, dtype, device, method, target, params, parent_run_id,
                          resumed, data)
        # the run's wall time: its own (without a reference computed for it, its own run), and where it resumes a
        # killed run, that run's up to the checkpoint it goes on from (as its sampling_time_s does)
        spent_elsewhere = reference.seconds if reference is not None else 0.0
        earlier = earlier_wall_time(resumed[1]) if resumed else 0.0

        def wall_time() -> float:
            return earlier + time.perf_counter() - wall_start - spent_elsewhere

        opened = (lambda run_id: on_open(tracker, run_id)) if on_open is not None else None
        with tracker.run(start, opened) as run, tempfile.TemporaryDirectory(prefix="bayesx-") as tmp:
            checkpoint = make_checkpoint(job, run, Path(tmp), wall_time)
            lazy.preload(*after_method(job, method))  # while the method runs (the native sampler frees the GIL)
            stages = {"setup_time_s": wall_time()}
            with killed_before_a_record(run, start.name):
                result = method.infer(target, RunInputs(initial, gen, job.progress, Path(tmp), checkpoint,
                                                        resumed[1] if resumed else None,
                                                        compile=compile_policy,
                                                        density_identity=identity_json))
            stages["method_time_s"] = wall_time() - stages["setup_time_s"]
            with recording(interrupts):  # what the method made is stored, whatever signal comes now
                record = make_record(job, method, target, result, reference, Path(tmp), checkpoint, wall_time,
                                     start.tags, stages)
                run.store(record)
            print_summary(f"{start.name} (run {run.run_id})", record)
            if record.error is not None:  # recorded with what the method had; the run ends FAILED
                raise BayesxError(record.error)
            if result.interrupted:
                raise RunInterrupted("interrupted during sampling; the run keeps the draws it had")
    if interrupts.deferred is not None:  # after the method had finished: the run is stored whole, then it stops
        raise InterruptKept(f"the signal came after the method had finished, so the run {run.run_id[:8]} recorded "
                            f"all it made (its metrics and draws) and is {record.status}")
    return {**record.metrics, **{k: math.nan for k in record.not_finite}}  # a tuner sees a NaN objective as failed


@contextlib.contextmanager
def killed_before_a_record(run, name: str):
    """An interrupt that ends the method before it made anything to record (while its density compiles, before its
    first iteration) still says what became of the run: ``stopped_during=setup`` on the run, and its summary line
    ``[KILLED]``, as an interrupt later in the run has (the run itself ends KILLED in ``Tracker.run``)."""
    try:
        yield
    except (KeyboardInterrupt, RunInterrupted):
        with contextlib.suppress(Exception):  # the store may be what is going away: the line still prints
            run.set_tags({"stopped_during": "setup"})
        print(f"\n{name} (run {run.run_id})  [KILLED]\n  note: interrupted before the method had made anything "
              f"(while it set up: its density compiling, its first iteration)")
        raise


def after_method(job: RunSettings, method: Method) -> tuple[str, ...]:
    """The late libraries (bayesx.diagnostics.lazy) the run's record will load once its method has run: ArviZ for a
    sampler's or an approximation's diagnostics, plots and draws file, matplotlib where it plots, h5netcdf where it
    writes draws.nc."""
    draws = method.family in ("sampler", "approximation")
    wanted = {"arviz": draws, "matplotlib.pyplot": job.plots.n_coords > 0, "h5netcdf": draws and job.save_draws}
    return tuple(name for name in lazy.RUN_LIBRARIES if wanted[name])


class StageClock:
    """The seconds of each stage of a run's record, as ``<stage>_time_s`` (``with clock("plots"): ...``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            key = f"{stage}_time_s"
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start


def earlier_wall_time(resume: Resume) -> float:
    """The wall time a killed run had spent up to the checkpoint it is resumed from (0 for a checkpoint saved
    before states kept it)."""
    return float(resume.state.get(WALL_TIME, 0.0))


def make_record(job: RunSettings, method: Method, target, result: Result, reference: Reference | None, tmp: Path,
                checkpoint: RunCheckpoint | None, wall_time, identity: dict[str, str] | None = None,
                stages: dict[str, float] | None = None) -> RunRecord:
    """The run's record from the method's result: the family's metrics of the draws, the target's
    evaluation, the error against the reference, the files, the summary and the description (``identity``:
    the run's tags, for its headline). ``wall_time()`` is the run's own time so far (without a reference
    computed for it, which is its own run; with a resumed run's time before it was killed). Metrics that came out NaN or infinite are left out (a metric
    that does not apply is absent) and named in a remark.

    ``stages`` (the runner's ``setup_time_s`` and ``method_time_s``) join the record's own stages, each timed once:
    ``evaluate_time_s`` (the target's evaluation), ``diagnostics_time_s`` (the family's metrics of the draws and the
    error against the reference), ``files_time_s`` (the draws file and the target's and method's files),
    ``summary_time_s`` (the per-parameter summary), ``plots_time_s``, and ``record_time_s``, all of the record; and
    ``peak_memory_gb``, the process's peak resident memory over the run (bayesx.memory.peak_resident_gb). Within
    the record every per-coordinate diagnostic is computed once (convergence.computed_once)."""
    started = time.perf_counter()
    clock = StageClock()
    with convergence.computed_once():
        metrics = {**result.metrics, **result.timings}
        has_draws = result.draws is not None and result.draws.shape[1] > 0
        with clock("evaluate"):
            evaluation = target.evaluate(result.draws, result.sample_stats) if has_draws else Evaluation()
        with clock("diagnostics"):
            metrics.update(method.draw_metrics(result, evaluation))
        metrics.update(evaluation.metrics)
        tags = dict(result.tags)
        remarks = list(evaluation.remarks)
        if reference is not None and has_draws and not result.interrupted:
            with clock("diagnostics"):
                metrics.update(posterior_error(result.draws.numpy(), reference))
            tags[USED_TAG] = reference.run_id
            remarks.append(reference_remark(reference))
        if "log_evidence" in metrics and target.capabilities.exact_log_normalizer:
            metrics["log_evidence_err"] = metrics["log_evidence"] - target.log_normalizer()
        with clock("summary"):
            read = user_draws(method, target, result) if has_draws else None
        with clock("files"):
            artifacts = run_files(job, method, target, result, evaluation, has_draws, tmp, read)
        with clock("summary"):
            posterior = posterior_summary(read, target.reported_names()) if read is not None else None
            if posterior is not None:
                artifacts += (Artifact(write_summary(posterior, tmp)),)
        drawn, naming, against = (plotted_draws(method, target, result, read, reference) if has_draws
                                  else (None, ("", None), None))
        with clock("plots"):
            artifacts += tuple(Artifact(path, "plots") for path in plots.run_plots(
                method, drawn, result.sample_stats, result.traces, job.plots.n_coords, tmp, *naming, against,
                metrics.get("psis_khat")))
    complete = not result.interrupted and result.error is None and (job.save_draws or not has_draws)
    metrics.update(stages or {})
    metrics.update(clock.seconds, record_time_s=time.perf_counter() - started)
    peak = peak_resident_gb()
    if peak is not None:
        metrics["peak_memory_gb"] = peak
    metrics["wall_time_s"] = wall_time()
    warnings = tuple(result.warnings + method.warnings(metrics))
    not_finite = tuple(sorted(k for k, v in metrics.items() if not math.isfinite(v)))
    if not_finite:  # never logged as if it were a value (an improper posterior's evidence, a zero sd's error)
        remarks.append("not logged, not a number: " + ", ".join(f"{k} ({metrics[k]})" for k in not_finite))
    metrics = {k: v for k, v in metrics.items() if k not in not_finite}
    status = "KILLED" if result.interrupted else "FAILED" if result.error is not None else "FINISHED"
    shown = summary_keys(method, evaluation, metrics)
    description = describe_run(identity or {}, status, metrics, shown,
                               compared_with(metrics, reference, job.reference, method.name), warnings,
                               tuple(remarks), result.error)
    summary = Summary(shown, compared_keys(method, evaluation, metrics), warnings, tuple(remarks), description,
                      tuple(summary_lines(posterior, PRINTED_PARAMETERS)) if posterior is not None else ())
    return RunRecord(status, metrics, dict(result.traces), tags, artifacts,
                     (CHECKPOINT,) if complete else (),  # draws.nc (or the trainer's own files) hold it all
                     summary, result.error, checkpoint.logged_until if checkpoint is not None else 0, not_finite)


PRINTED_PARAMETERS = 10  # rows of the posterior summary on the terminal; posterior_summary.csv holds them all


def user_draws(method: Method, target, result: Result) -> np.ndarray | None:
    """A sampler's or an approximation's draws of the parameters a user reads (``target.constrain``: (chains, draws,
    p), named ``target.reported_names()``); None for a trainer."""
    if method.family not in ("sampler", "approximation"):
        return None
    return target.read_draws(result.draws)


def plotted_draws(method: Method, target, result: Result, read: np.ndarray | None, reference=None):
    """The draws a run's plots show, their naming (param_name, coordinate names) and the reference they are set
    against: on the parameters the user declared (``read``, by their names) where the target names them
    (``parameter_shapes``), with the reference's moments of those parameters (``Reference.on_declared``); else the
    sampled coordinates with the reference's moments of them. A reference saved before it kept the declared
    parameters' moments keeps an approximation's plots on the sampled coordinates, where it can be compared (a
    sampler's plots are never set against a reference)."""
    declared = read is not None and target.parameter_shapes() is not None
    on_declared = reference.on_declared() if reference is not None else None
    if declared and (method.family == "sampler" or reference is None or on_declared is not None):
        return read, ("", target.reported_names()), on_declared
    return result.draws.numpy(), (target.param_name, target.coordinate_names()), reference


def run_files(job: RunSettings, method: Method, target, result: Result, evaluation: Evaluation, has_draws: bool,
              tmp: Path, read: np.ndarray | None = None) -> tuple[Artifact, ...]:
    """The run's files: its draws and plots, the target's own files (its data, fields), the method's,
    and its fitted quantities (e.g. the adapted inverse mass matrix). ``read``: the draws on the declared
    parameters where user_draws computed them."""
    out = list(draw_files(job, target, result, tmp, read)) if has_draws else []
    files = target.write_artifacts(tmp, result.draws if has_draws else None, evaluation)
    out += [Artifact(Path(path), folder) for folder, paths in [*files.items(), *result.artifacts.items()]
            for path in paths]
    for name, value in result.fitted.items():
        path = tmp / f"{name}.npy"
        np.save(path, value.numpy())
        out.append(Artifact(path))
    return tuple(out)


def draw_files(job: RunSettings, target, result: Result, tmp: Path, read: np.ndarray | None = None) -> list[Artifact]:
    """draws.nc: one variable per parameter the user reads, with its shape, where the target names them
    (``parameter_shapes``: declared parameters, posteriordb's), else the sampled vector with its coordinates' names."""
    out = []
    if job.save_draws:
        path = tmp / "draws.nc"
        draws_data(target, result, read).to_netcdf(str(path), engine="h5netcdf")
        out.append(Artifact(path))
    return out


def draws_data(target, result: Result, read: np.ndarray | None = None):
    """The run's draws as ArviZ InferenceData (draw_files); ``read``: the constrained draws where already computed."""
    shapes = target.parameter_shapes()
    if shapes is None:
        return convergence.to_inference_data(result.draws.numpy(), result.sample_stats, target.param_name,
                                             target.coordinate_names())
    return convergence.named_inference_data(target.read_draws(result.draws) if read is None else read, shapes,
                                            result.sample_stats)
