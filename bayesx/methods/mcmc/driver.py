"""The MCMC driver as functions, in the order a run meets them: :func:`start` (where the chains begin, and the
metric they begin with), :func:`warm_up`, :func:`sample` (the sampling stages bayesx.methods.mcmc.run_length's
machine asks for: probe, re-tune, draw, extend, stop) and :func:`report`.

Each takes the sampler (bayesx.methods.mcmc.sampler.MCMCMethod: its settings, its kernel and its hooks) and the one
prepared ``density`` its kernel moves on, and passes the run's :class:`~bayesx.methods.mcmc.family.Draws` along:
what a stage learned stays there when a later one is stopped. Warm-up returns what it tuned as values (the step
size, the metric and ``WarmupProgress.tuned``, e.g. ChEES's and MAMS's trajectory length); the sampling stages take
them from there or from a killed run's checkpoint, which stores them, so that every run can be resumed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from bayesx.adaptation.window import DENSE_FORMS, WarmupProgress, WarmupSchedule, WindowAdaptation
from bayesx.errors import BayesxError, DensityError, RunInterrupted
from bayesx.kernels import backend
from bayesx.kernels.metric import Metric, identity_metric, make_metric
from bayesx.methods.common.optimize import NoMode, laplace_start
from bayesx.methods.common.pathfinder import pathfinder_start
from bayesx.methods.base import RunInputs
from bayesx.methods.common.progress import ChainProgress
from bayesx.methods.mcmc.collect import KeptDraws, SamplingCheckpoint, SamplingClock
from bayesx.methods.mcmc.family import Draws
from bayesx.methods.mcmc.health import FaultWatch
from bayesx.methods.mcmc.run_length import RETUNE_ITERATIONS, SAMPLING, Convergence, Phase, ProbeCount, RunLength, Stage
from bayesx.store.checkpoint import Resume, RunCheckpoint

STOPPED = (KeyboardInterrupt, RunInterrupted)


def prepare(sampler, target, inputs: RunInputs, out: Draws):
    """The family's one preparation of the density the sampler's kernel evaluates (``backend_target``;
    bayesx.kernels.backend.prepare) for this run's length, under the run's compile policy; its backend (the
    ``kernels`` tag), the compile's time and whether it came from the cache go into the run's record."""
    cfg = sampler.settings
    evaluated = sampler.backend_target(target)
    chains = inputs.initial
    points = chains if chains.shape[-1] == evaluated.dim else chains.new_zeros(chains.shape[0], evaluated.dim)
    calls = (cfg.num_warmup + cfg.num_draws * cfg.thin) * sampler.density_calls_per_transition()
    density = backend.prepare(evaluated, backend.Workload(points, calls, sampler.uses_gradients), inputs.compile,
                              inputs.density_identity if evaluated is target else None)
    out.tags.update(density.tags(), kernels=density.name)
    out.timings.update(density.timings())
    return density


def stopped_in_warmup(out: Draws, started: float) -> Draws:
    """``out`` marked as a run stopped before sampling began (``started``: when warm-up did)."""
    out.timings.update(warmup_time_s=time.perf_counter() - started, sampling_time_s=0.0)
    out.tags["stopped_during"] = "warmup"
    return out


def start(sampler, target, density, initial: torch.Tensor, gen: torch.Generator, mass: str, out: Draws,
          started: float) -> tuple[torch.Tensor, Metric] | None:
    """Where the chains begin and the metric they begin with: the initial points and a unit metric
    (``init=prior``), else draws of the Laplace (or Pathfinder) Gaussian around the mode and its covariance (the
    initial points where no mode is found, with a warning). None where the run was stopped during the search."""
    cfg = sampler.settings
    metric = identity_metric(initial.shape[1], mass in DENSE_FORMS, initial.dtype, initial.device)
    if cfg.init == "prior":
        return initial, metric
    try:
        position, inv_mass = (laplace_start(target, density, initial, gen, mass) if cfg.init == "laplace" else
                              pathfinder_start(density, initial, gen, mass))
        metric = make_metric(inv_mass)
    except STOPPED:  # stopped while finding the mode: part of warm-up
        out.interrupted = True
        stopped_in_warmup(out, started)
        return None
    except NoMode as exc:  # no mode to start from: the initial points and a unit metric, as init=prior
        out.warnings.append(f"{exc}; the chains started from the initial points instead (method.init=prior)")
        out.tags["init"] = "prior (no mode)"
        position = initial
    out.timings[f"{cfg.init}_time_s"] = time.perf_counter() - started
    return position, metric


def first_state(sampler, position: torch.Tensor, density):
    """The kernel's state at the starting points, refused in one line where the log density is not finite there."""
    state = sampler.kernel.init(position, density)
    if bool(torch.isfinite(sampler.kernel.log_density(state)).all()):
        return state
    init = sampler.settings.init
    if init != "prior":  # the points came from the mode search's Gaussian, not from the model
        raise BayesxError(f"the log density is not finite at the chains' starting points drawn around the {init} "
                          f"mode search's end: the search diverged (an improper posterior, or a missing Jacobian "
                          f"term?); use method.init=prior or check the density")
    raise BayesxError("the log density is not finite at the initial point; check the data or set a smaller "
                      "model.init_scale")


def warm_up(sampler, density, state, metric: Metric, gen: torch.Generator, bar: ChainProgress, out: Draws,
            started: float) -> WarmupProgress | None:
    """The sampler's warm-up (``make_adaptation``) from ``state``, after a step-size search where no step size is
    set. None where it was stopped, or where the density failed (the run then ends FAILED with that line); ``out``
    keeps what warm-up had learned."""
    cfg = sampler.settings
    adaptation = sampler.make_adaptation(density, gen)
    warm = WarmupProgress(state, float(cfg.step_size or "nan"), metric)  # nan: not searched yet
    faults = FaultWatch()

    def on_step(info, eps, it):
        faults.observe(info, sampling=False)
        bar.tick(info, eps, it)

    try:
        if cfg.step_size is None:
            warm.step_size = sampler.checked_step_size_search(state, density, metric, gen, 1.0)
        adaptation.run(warm, density, gen, on_step=on_step)
    except (*STOPPED, DensityError) as exc:
        bar.close()
        if isinstance(exc, DensityError):  # the run ends FAILED with this line and what warm-up learned
            out.error = f"{exc} (during warm-up)"
        else:
            out.interrupted = True
        stopped_in_warmup(out, started)
        summaries = step_size_metrics(sampler, warm.step_size, warm.grad_evals)
        if warm.step_size != warm.step_size:  # stopped before the first step-size search ended: none to report
            summaries.pop("step_size", None)
        out.metrics.update(summaries)
        out.fitted["inverse_mass"] = warm.metric.inv_mass.detach().to("cpu")
        return None
    return warm


def after_warmup(warm: WarmupProgress, out: Draws, started: float, n_chains: int) -> Resume:
    """The sampling stages' start after warm-up: no draws yet, and the values warm-up tuned (what a checkpoint
    stores from then on)."""
    warmup = {"warmup_time_s": time.perf_counter() - started, "n_grad_evals_warmup": warm.grad_evals,
              **{k: v for k, v in out.timings.items() if k.endswith("_time_s")}}
    dim = warm.state.position.shape[-1]
    return Resume(np.zeros((n_chains, 0, dim)), {}, {
        "position": warm.state.position, "step_size": warm.step_size, "inv_mass": warm.metric.inv_mass,
        "iteration": 0, "warmup": warmup, "tuned": dict(warm.tuned)})


@dataclass
class Sampling:
    """Where the sampling stages stand: the kernel's state, the values they run with (step size, metric, what
    warm-up tuned), the kept draws and what watches them; the loop of :func:`sample` updates it."""

    sampler: object
    density: object
    gen: torch.Generator
    state: object
    step_size: float
    metric: Metric
    tuned: dict
    warmup: dict  # warm-up's timings and gradients, grown by what dropped probes and re-tuning cost
    kept: KeptDraws
    saver: SamplingCheckpoint
    clock: SamplingClock
    bar: ChainProgress
    iteration: int
    faults: FaultWatch = field(default_factory=FaultWatch)
    extensions: list = field(default_factory=list)  # why the chains drew on, one reason per batch
    raises: list = field(default_factory=list)  # each climb of the target acceptance, and why

    @property
    def params(self):
        """The kernel's params from the step size, the metric and the tuned values."""
        return self.sampler.kernel.parameters(self.step_size, self.metric, **self.tuned)

    def saved(self, stage: Stage) -> dict:
        """What a checkpoint stores after the current draw, from which :func:`sample` resumes."""
        return {"position": self.state.position.detach().cpu(), "step_size": self.step_size,
                "inv_mass": self.metric.inv_mass.detach().cpu(), "gen_state": self.gen.get_state(),
                "iteration": self.iteration + 1, "warmup": self.warmup, "planned_draws": stage.planned,
                "target_accept": stage.target_accept, "sampling_time_s": self.clock.sampling_s(),
                "tuned": self.tuned, "kernel_state": plain_tree(self.state)}


def resumed(sampler, density, gen: torch.Generator, checkpoint: RunCheckpoint | None, start_at: Resume,
            bar: ChainProgress, out: Draws, state=None) -> Sampling:
    """The sampling stages' standing at ``start_at``: after warm-up (``state`` its last kernel state), or a killed
    run's checkpoint (its draws, statistics and values, the generator's state included; the kernel state is rebuilt
    from the positions)."""
    saved = start_at.state
    position = torch.as_tensor(saved["position"]).to(density.device, density.dtype)
    metric = make_metric(torch.as_tensor(saved["inv_mass"]).to(density.device, density.dtype))
    if "gen_state" in saved:  # resumed: the same random stream as the run that was killed
        gen.set_state(saved["gen_state"])
        out.tags["resumed_at_draw"] = str(start_at.draws.shape[1])
    warmup = dict(saved["warmup"])
    kept = KeptDraws(sampler.settings.thin, start_at)
    if state is None:  # the kernel's whole state where the checkpoint has it (pCN's noise drawn ahead, ...)
        state = sampler.kernel.init(position, density)
        if "kernel_state" in saved:
            state = filled_like(state, saved["kernel_state"], position)
    return Sampling(sampler, density, gen, state,
                    float(saved["step_size"]), metric, dict(saved.get("tuned", {})), warmup, kept,
                    SamplingCheckpoint(checkpoint, kept), SamplingClock(float(saved.get("sampling_time_s", 0.0)),
                                                                        warmup),
                    bar, int(saved["iteration"]))


def sample(sampler, density, gen: torch.Generator, progress, checkpoint: RunCheckpoint | None, start_at: Resume,
           bar: ChainProgress | None = None, out: Draws | None = None, state=None, stage: Stage | None = None) -> Draws:
    """The sampling stages from ``start_at`` (:func:`resumed`), each as the run-length machine asks after the last
    (``stage``: the machine's after warm-up; None: read from a killed run's checkpoint); the kept draws go to
    ``checkpoint`` as they gather. Stopped or failed, the run keeps its draws so far."""
    cfg, out = sampler.settings, out or Draws()
    rules = RunLength.from_settings(cfg)
    saved = start_at.state
    if stage is None:
        stage = rules.resume(float(saved.get("target_accept", cfg.target_accept)), start_at.draws.shape[1],
                             int(saved.get("planned_draws", cfg.num_draws)))
    bar = bar or ChainProgress(stage.planned * cfg.thin, sampler.name, progress)
    run = resumed(sampler, density, gen, checkpoint, start_at, bar, out, state)
    bar.stage("sampling")
    try:
        while stage.phase is not Phase.STOP:
            if stage.phase is Phase.RETUNE:
                retune(run, stage, rules)
            draw(run, stage)
            before = stage
            stage = rules.next(stage, seen(stage, rules, run))
            if stage.phase is Phase.EXTEND:
                run.extensions.append(stage.why)
                bar.extend((stage.until - before.until) * cfg.thin)
    except STOPPED:
        out.interrupted = True
    except DensityError as exc:  # the run ends FAILED with this line and the draws so far
        out.error = f"{exc} (at sampling iteration {run.iteration + 1}; {len(run.kept)} draws kept)"
    finally:
        bar.close()
    return report(out, run, stage)


def draw(run: Sampling, stage: Stage) -> None:
    """Transitions until ``stage`` has its draws, each kept one checkpointed (after the probe)."""
    thin, params = run.sampler.settings.thin, run.params
    run.kept.reserve(stage.until)
    while stage.phase in SAMPLING and run.iteration < stage.until * thin:
        run.state, info = run.sampler.kernel.step(run.state, run.density, params, run.gen)
        keeps = run.kept.keeps(run.iteration)
        run.faults.observe(info, sampling=True, kept=keeps)
        if keeps:
            run.kept.add(run.state.position, info)
            if stage.phase is not Phase.PROBE:  # checkpoints start after the probe
                run.saver.update(run.kept, partial(run.saved, stage))
        run.bar.tick(info, run.step_size, run.iteration)
        run.iteration += 1


def retune(run: Sampling, stage: Stage, rules: RunLength) -> None:
    """Drop the probe's draws and re-tune the step size at the raised target: dual averaging alone, the metric
    and the tuned values kept, RETUNE_ITERATIONS from the current step size (a warm-up without windows); then
    sampling starts again from scratch."""
    run.raises.append(stage.why)
    dropped = run.kept.total("n_grad_evals")
    run.kept.drop()
    run.faults = FaultWatch()
    run.bar.extend(RETUNE_ITERATIONS + rules.probe_draws() * run.sampler.settings.thin)
    run.bar.stage(f"retune {stage.target_accept:g}")
    kernel = run.sampler.kernel
    adaptation = WindowAdaptation(kernel.step, partial(kernel.parameters, **run.tuned), None,
                                  WarmupSchedule(RETUNE_ITERATIONS, ()), stage.target_accept)
    tuned = adaptation.run(WarmupProgress(run.state, run.step_size, run.metric), run.density, run.gen,
                           on_step=run.bar.tick)
    run.state, run.step_size = tuned.state, tuned.step_size
    run.bar.stage("sampling")
    run.warmup["n_grad_evals_warmup"] += dropped + tuned.grad_evals
    run.clock.retuned()
    run.iteration = 0


def seen(stage: Stage, rules: RunLength, run: Sampling) -> ProbeCount | Convergence | None:
    """What the run-length machine reads at the end of ``stage``: a probe's energy-error divergences (those that met
    a NaN density left out) and transitions; the kept draws' diagnostics where it may extend them."""
    if stage.phase is Phase.PROBE:
        return ProbeCount(run.kept.total("divergent") - run.faults.nan_divergent, len(run.kept) * run.kept.n_chains)
    if rules.needs_convergence(stage):
        return run.kept.convergence()
    return None


def report(out: Draws, run: Sampling, stage: Stage) -> Draws:
    """``out`` with the kept draws, their statistics and summaries, the values warm-up tuned, the faults met, how
    the run's length was decided (target climbs, extensions, the target it ended at where the ladder rule is on)
    and the metric."""
    cfg, kept = run.sampler.settings, run.kept
    if run.raises:
        out.tags["raised_target_accept"] = "; ".join(run.raises)
    if run.extensions:
        reasons = run.extensions
        shown = reasons if len(reasons) <= 3 else [reasons[0], "...", reasons[-1]]
        out.tags["extended"] = f"{len(reasons)} times: " + "; ".join(shown)
    out.timings.update({k: v for k, v in run.warmup.items() if k != "n_grad_evals_warmup"})
    out.timings["sampling_time_s"] = run.clock.sampling_s()
    if len(kept):
        out.metrics["time_per_iter_s"] = out.timings["sampling_time_s"] / (len(kept) * cfg.thin)
        out.metrics["draws_per_chain"] = float(len(kept))
    out.tags["stopped_during"] = "sampling" if out.interrupted or out.error else "completed"
    out.draws, out.sample_stats = kept.draws(), kept.sample_stats()
    out.metrics.update(summaries(out.sample_stats))
    out.metrics.update(step_size_metrics(run.sampler, run.step_size, run.warmup["n_grad_evals_warmup"]))
    out.metrics.update({name: value for name, value in run.tuned.items() if isinstance(value, float)})
    out.metrics.update(run.sampler.extra_metrics(out.sample_stats))
    out.metrics.update(run.faults.metrics())
    if cfg.raise_target_accept:  # the rule is on (whether or not it had a target left to climb to)
        out.metrics["target_accept_final"] = stage.target_accept
    out.warnings.extend(run.faults.warnings())
    out.fitted["inverse_mass"] = run.metric.inv_mass.detach().to("cpu")
    return out


def plain_tree(state):
    """A kernel state (NamedTuples of tensors, nested) as plain tuples of CPU tensors, which a checkpoint loads
    safely (``torch.load(weights_only=True)``); :func:`filled_like` makes it a state again."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, (tuple, list)):
        return tuple(plain_tree(part) for part in state)
    return state


def filled_like(template, saved, like: torch.Tensor):
    """The kernel state of ``template``'s types (a fresh ``init``) with ``saved``'s values (:func:`plain_tree`),
    on ``like``'s device."""
    if isinstance(saved, torch.Tensor):
        return saved.to(like.device)
    if isinstance(template, tuple) and hasattr(template, "_fields"):
        return type(template)(*(filled_like(t, s, like) for t, s in zip(template, saved)))
    if isinstance(saved, tuple):
        return tuple(filled_like(None, s, like) for s in saved)
    return saved


def step_size_metrics(sampler, step_size: float, warmup_grad_evals: int) -> dict[str, float]:
    """The step size as the sampler reports it (``reported_step_size``) and warm-up's gradients."""
    return {**sampler.reported_step_size(float(step_size)), "n_grad_evals_warmup": float(warmup_grad_evals)}


def summaries(stats: dict[str, np.ndarray]) -> dict[str, float]:
    """Every sampler's summaries of its per-draw statistics: acceptance, divergences, gradients."""
    if not stats:
        return {}
    return {"accept_rate": float(np.mean(stats["accept_prob"])), "n_divergent": float(np.sum(stats["divergent"])),
            "n_grad_evals": float(np.sum(stats["n_grad_evals"]))}
