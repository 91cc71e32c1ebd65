"""The shared MCMC driver: warm-up, then sampling, for any :class:`~bayesx.methods.mcmc.kernel.Kernel`.

A method subclasses :class:`MCMCMethod`: its ``Settings`` and ``name``, and ``make_kernel()``, the kernel built from
its settings (``init``, ``step``, ``log_density``, ``parameters(step_size, metric)``, ``gradients_per_transition()``
and ``uses_gradients``). Everything else is done here once, from separate parts:

- the start (``init``: the prior's points, or a Laplace or Pathfinder Gaussian) and the warm-up, bayesx.adaptation's
  WindowAdaptation wrapped around the kernel from outside;
- how long the run goes on, bayesx.methods.mcmc.run_length's state machine (warm-up, probe, re-tune, draw, extend,
  stop), which the sampling loop asks after each stage;
- the kept draws and the checkpoint (bayesx.methods.mcmc.collect), the progress bar (bayesx.methods.common.progress), the
  density's faults (bayesx.methods.mcmc.health), timing and interruption.

Optional hooks, for samplers with their own warm-up or tuning: ``search_step_size`` (a starting step size for dual
averaging), ``make_adaptation`` (the warm-up), ``extra_metrics`` and ``warnings``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.adaptation.window import (
    DENSE_FORMS,
    GRADIENT_FORMS,
    WarmupProgress,
    WarmupSchedule,
    WindowAdaptation,
    bracket_step_size,
    find_initial_step_size,
)
from bayesx.store.checkpoint import Resume, RunCheckpoint
from bayesx.errors import BayesxError, DensityError, RunInterrupted
from bayesx.kernels import backend
from bayesx.kernels.density import Density
from bayesx.kernels.metric import Metric, identity_metric, make_metric
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.collect import KeptDraws, SamplingCheckpoint, SamplingClock
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.health import FaultWatch, check_step_size_search
from bayesx.methods.mcmc.kernel import Kernel
from bayesx.methods.mcmc.run_length import (
    RETUNE_ITERATIONS,
    SAMPLING,
    Convergence,
    Phase,
    ProbeCount,
    RunLength,
    Stage,
)
from bayesx.methods.common.optimize import NoMode, laplace_start
from bayesx.methods.common.pathfinder import pathfinder_start
from bayesx.methods.common.progress import ChainProgress
from bayesx.settings import AtLeast, Between, InvalidSetting, Positive, Settings


@dataclass(frozen=True)
class MCMCSettings(Settings):
    """The options every MCMC method shares.

    num_warmup      warm-up iterations (adaptation), discarded
    num_draws       retained iterations per chain
    step_size       initial step size; null asks the heuristic of Hoffman and Gelman (Alg. 4)
    target_accept   acceptance statistic that dual averaging aims at
    adapt_step_size tune the step size during warm-up
    mass            inverse-mass-matrix (or proposal covariance) form: diag, dense or identity (Stan's
                    windowed estimates), diag_grad or lowrank (from draws and gradients, as nutpie;
                    gradient-based samplers only; see bayesx.adaptation.window); auto: dense up to
                    DENSE_UP_TO coordinates, else diag_grad (diag without gradients)
    mass_rank       the most directions the lowrank correction changes
    thin            keep every thin-th draw
    init_buffer, term_buffer, base_window
                    Stan's warm-up windows (fast, slow doubling from base_window, fast)
    init            prior: start from the target's initial points with an identity metric;
                    laplace: find the mode (L-BFGS), start the chains at draws from the Laplace
                    approximation N(mode, H^-1) and the metric at H^-1 (or its diagonal);
                    pathfinder: the same with the best Gaussian of one Pathfinder path
    max_draws       null: exactly num_draws per chain; else draw num_draws more while R-hat > 1.01
                    or the bulk ESS < min_ess, up to max_draws per chain (bayesx.methods.mcmc.run_length;
                    a num_draws of max_draws or more is never extended)
    raise_target_accept
                    targets to climb to, in order, where the first draws diverge on more than
                    divergence_limit of their transitions (their draws are dropped and the step size
                    re-tuned; bayesx.methods.mcmc.run_length); those not above target_accept are
                    skipped; empty: never
    """

    num_warmup: Annotated[int, AtLeast(0)] = 1000
    num_draws: Annotated[int, AtLeast(1)] = 1000
    step_size: Annotated[float | None, Positive()] = None
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.8
    adapt_step_size: bool = True
    mass: Literal["auto", "diag", "dense", "identity", "diag_grad", "lowrank"] = "diag"
    mass_rank: Annotated[int, AtLeast(1)] = 10
    thin: Annotated[int, AtLeast(1)] = 1
    init_buffer: Annotated[int, AtLeast(0)] = 75
    term_buffer: Annotated[int, AtLeast(0)] = 50
    base_window: Annotated[int, AtLeast(1)] = 25
    init: Literal["prior", "laplace", "pathfinder"] = "prior"
    max_draws: Annotated[int | None, AtLeast(1)] = None
    min_ess: Annotated[float, Positive()] = 400.0
    raise_target_accept: Annotated[tuple[float, ...], Between(0.0, 1.0)] = ()
    divergence_limit: Annotated[float, Between(0.0, 1.0)] = 0.002

    def check(self):
        super().check()
        ladder = self.raise_target_accept
        if any(later <= earlier for earlier, later in zip(ladder, ladder[1:])):
            raise InvalidSetting("raise_target_accept", f"={list(ladder)} must climb, each target above the last; "
                                                        f"e.g. [0.95, 0.99]")

    def schedule(self) -> WarmupSchedule:
        return WarmupSchedule.build(self.num_warmup, self.init_buffer, self.term_buffer, self.base_window,
                                    self.mass != "identity")


DENSE_UP_TO = 100
"""``mass=auto``'s dense metric up to this many coordinates. On the 13 posteriordb posteriors (3-26 coordinates)
NUTS with a dense metric reached 0.44x-354x the min-ESS per sampling second of diag_grad (median 2.4x; below 1 on
sblri_blr 0.44x, arma11 and eight_schools_noncentered 0.93x; R-hat <= 1.01 on 11 of 13 against 6 of 13;
results/posteriordb.md, 2026-11-25), and on digits (64) 2.7x (results/bench_samplers.md); its product costs
O(d^2) per step, small beside a gradient there, while at 500 coordinates (synthetic) it cost more than it gained."""


class MCMCMethod(Sampler):
    """The driver for one MCMC method (built from the method config group; options: MCMCSettings)."""

    Settings = MCMCSettings
    name = "mcmc"
    resumable = True  # the state after a draw is the position, step size and metric (what parameters() reads)

    # --- what a subclass provides -------------------------------------------------------------
    def make_kernel(self) -> Kernel:
        """The transition kernel, built from ``self.settings`` (bayesx.methods.mcmc.kernel)."""
        raise NotImplementedError

    @cached_property
    def kernel(self) -> Kernel:
        """This method's kernel (``make_kernel()``, built once)."""
        return self.make_kernel()

    @property
    def uses_gradients(self) -> bool:
        """Whether the kernel evaluates grad log p (diag_grad and lowrank adapt from it)."""
        return self.kernel.uses_gradients

    def needs_gradients(self) -> bool:
        return self.uses_gradients or self.settings.init != "prior"  # laplace and pathfinder search the mode

    def mass_form(self, dim: int) -> str:
        """The metric's form for a target of ``dim`` coordinates: the setting, ``auto`` resolved."""
        mass = self.settings.mass
        if mass != "auto":
            return mass
        return "dense" if dim <= DENSE_UP_TO else ("diag_grad" if self.uses_gradients else "diag")

    def check(self, target, n_chains: int) -> None:
        cfg = self.settings
        if cfg.mass in GRADIENT_FORMS and not self.uses_gradients:
            raise InvalidSetting("mass", f"={cfg.mass} adapts from gradients, which method={self.name} does not "
                                         f"compute; use mass=diag or dense")

    # --- optional hooks --------------------------------------------------------------------------
    def search_step_size(self, state, target, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """A starting step size for dual averaging, at the start and after each metric update: Hoffman and Gelman's
        heuristic (2014, Alg. 4: one leapfrog step from a fresh momentum) for a kernel that uses gradients; for one
        that does not, the same doubling or halving on the mean acceptance of one transition of the kernel itself,
        until it crosses ``target_accept``."""
        if self.uses_gradients:
            return find_initial_step_size(state, target, metric, gen, guess)

        def one_step_accept(step_size: float) -> float:
            params = self.kernel.parameters(step_size, metric)
            return float(self.kernel.step(state, target, params, gen)[1].accept_prob.mean())

        return bracket_step_size(one_step_accept, guess, self.settings.target_accept)

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:
        return {}

    def tuned(self) -> dict[str, float]:
        """What warm-up tuned beyond the step size and the metric (ChEES's and MAMS's trajectory length), as values
        that the checkpoint stores, so that a killed run resumes with them."""
        return {}

    def use_tuned(self, values: dict[str, float]) -> None:
        """Take :meth:`tuned`'s values back from a killed run's checkpoint (nothing to take by default)."""

    def checked_step_size_search(self, state, target, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """:meth:`search_step_size`, failing the run where the step size runs away (an improper posterior;
        bayesx.methods.mcmc.health)."""
        return check_step_size_search(self.search_step_size(state, target, metric, gen, guess), guess)

    def make_adaptation(self, target, gen: torch.Generator):
        """The warm-up around the kernel (``run(progress, target, gen, on_step)``): Stan's windows."""
        cfg = self.settings
        return WindowAdaptation(self.kernel.step, self.kernel.parameters,
                                lambda s, m, guess: self.checked_step_size_search(s, target, m, gen, guess),
                                cfg.schedule(), cfg.target_accept, cfg.adapt_step_size, self.mass_form(target.dim),
                                cfg.mass_rank)

    def backend_target(self, target):
        """The density this method's kernel evaluates, which :meth:`prepare_density` prepares: the target (a latent
        sampler: the target on the decoder's affine image)."""
        return target

    def kernel_density(self, target, density: Density):
        """What the kernel's ``init`` and ``step`` take as their density: the prepared Density (pCN-type kernels:
        the model's Gaussian-prior view, whose prior they move in)."""
        return density

    def density_calls_per_transition(self) -> int:
        """PyTorch calls of the density's gradient in one transition of all chains (they move in lock-step): the
        kernel's ``gradients_per_transition()``."""
        return self.kernel.gradients_per_transition()

    def prepare_density(self, target, inputs: RunInputs, out: Draws) -> Density:
        """The family's one preparation of the density (bayesx.kernels.backend.prepare) for this run's length, under
        the run's compile policy; its backend (the ``kernels`` tag), the compile's time and whether it came from
        the cache go into the run's record."""
        cfg = self.settings
        evaluated = self.backend_target(target)
        chains = inputs.initial
        points = chains if chains.shape[-1] == evaluated.dim else chains.new_zeros(chains.shape[0], evaluated.dim)
        calls = (cfg.num_warmup + cfg.num_draws * cfg.thin) * self.density_calls_per_transition()
        density = backend.prepare(evaluated, backend.Workload(points, calls, self.uses_gradients), inputs.compile,
                                  inputs.density_identity if evaluated is target else None)
        out.tags.update(density.tags(), kernels=density.name)
        out.timings.update(density.timings())
        return density

    # --- the driver ------------------------------------------------------------------------------
    def sample(self, target, inputs: RunInputs) -> Draws:
        """Warm up and sample all chains from ``inputs.initial`` (chains, dim); the retained draws go to
        ``inputs.checkpoint`` as they gather. With ``inputs.resume`` (a killed run's checkpoint), skip the
        warm-up and continue its sampling where it stopped, with its generator state."""
        initial_position, gen, progress, checkpoint = inputs.initial, inputs.gen, inputs.progress, inputs.checkpoint
        cfg = self.settings
        n_chains, dim = initial_position.shape
        out = Draws()
        density = self.prepare_density(target, inputs, out)
        moves_on = self.kernel_density(target, density)
        mass = self.mass_form(dim)
        if cfg.mass == "auto":
            out.tags["mass"] = mass
        if inputs.resume is not None:
            return self._sample(moves_on, gen, progress, checkpoint, inputs.resume, out=out)
        dense = mass in DENSE_FORMS
        start = time.perf_counter()
        metric = identity_metric(dim, dense, initial_position.dtype, initial_position.device)
        if cfg.init != "prior":
            try:
                initial_position, inv_mass = (laplace_start(target, density, initial_position, gen, mass)
                                              if cfg.init == "laplace" else
                                              pathfinder_start(density, initial_position, gen, mass))
                metric = make_metric(inv_mass)
            except (KeyboardInterrupt, RunInterrupted):  # stopped while finding the mode: part of warm-up
                out.interrupted = True
                out.timings.update(warmup_time_s=time.perf_counter() - start, sampling_time_s=0.0)
                out.tags["stopped_during"] = "warmup"
                return out
            except NoMode as exc:  # no mode to start from: the initial points and a unit metric, as init=prior
                out.warnings.append(f"{exc}; the chains started from the initial points instead (method.init=prior)")
                out.tags["init"] = "prior (no mode)"
            out.timings[f"{cfg.init}_time_s"] = time.perf_counter() - start
        state = self.kernel.init(initial_position, moves_on)
        if not bool(torch.isfinite(self.kernel.log_density(state)).all()):
            if cfg.init != "prior":  # the points came from the mode search's Gaussian, not from the model
                raise BayesxError(f"the log density is not finite at the chains' starting points drawn around the "
                                  f"{cfg.init} mode search's end: the search diverged (an improper posterior, or a "
                                  f"missing Jacobian term?); use method.init=prior or check the density")
            raise BayesxError("the log density is not finite at the initial point; check the data or set a smaller "
                              "model.init_scale")
        rules = RunLength.from_settings(cfg)
        stage = rules.warmup(cfg.target_accept)
        adaptation = self.make_adaptation(moves_on, gen)
        warm = WarmupProgress(state, float(cfg.step_size or "nan"), metric)  # nan: not searched yet
        bar = ChainProgress(cfg.num_warmup + stage.planned * cfg.thin, self.name, progress)
        faults = FaultWatch()

        def on_step(info, eps, it):
            faults.observe(info, sampling=False)
            bar.tick(info, eps, it)

        try:
            if cfg.step_size is None:
                warm.step_size = self.checked_step_size_search(state, moves_on, metric, gen, 1.0)
            adaptation.run(warm, moves_on, gen, on_step=on_step)
        except (KeyboardInterrupt, RunInterrupted, DensityError) as exc:
            bar.close()
            if isinstance(exc, DensityError):  # the run ends FAILED with this line and what warm-up learned
                out.error = f"{exc} (during warm-up)"
            else:
                out.interrupted = True
            out.timings.update(warmup_time_s=time.perf_counter() - start, sampling_time_s=0.0)
            out.tags["stopped_during"] = "warmup"
            summaries = self._summaries({}, warm.step_size, warm.grad_evals)
            if warm.step_size != warm.step_size:  # stopped before the first step-size search ended: none to report
                summaries.pop("step_size", None)
            out.metrics.update(summaries)
            out.fitted["inverse_mass"] = warm.metric.inv_mass.detach().to("cpu")
            return out
        warmup = {"warmup_time_s": time.perf_counter() - start, "n_grad_evals_warmup": warm.grad_evals,
                  **{k: v for k, v in out.timings.items() if k.endswith("_time_s")}}
        start_state = {"position": warm.state.position, "step_size": warm.step_size,
                       "inv_mass": warm.metric.inv_mass, "iteration": 0, "warmup": warmup, "tuned": self.tuned()}
        return self._sample(moves_on, gen, progress, checkpoint, Resume(np.zeros((n_chains, 0, dim)), {}, start_state),
                            bar, out, warm.state, rules.next(stage))

    def _sample(self, density, gen: torch.Generator, progress, checkpoint: RunCheckpoint | None, start: Resume,
                bar: ChainProgress | None = None, out: Draws | None = None, state=None,
                stage: Stage | None = None) -> Draws:
        """The sampling stage from ``start``: after warm-up (no draws yet; ``state`` is the warm-up's last
        kernel state, ``stage`` the run-length machine's after warm-up), or a killed run's checkpoint (its draws,
        statistics and state, including the generator's; the kernel state is rebuilt from the positions). The
        loop asks bayesx.methods.mcmc.run_length's machine what to do after each stage: probe, re-tune, draw,
        extend or stop. ``density``: what the kernel moves on (:meth:`kernel_density`)."""
        cfg = self.settings
        out = out or Draws()
        saved = start.state
        position = torch.as_tensor(saved["position"]).to(density.device, density.dtype)
        step_size, metric = float(saved["step_size"]), make_metric(torch.as_tensor(saved["inv_mass"]).to(
            density.device, density.dtype))
        if "gen_state" in saved:  # resumed: the same random stream as the run that was killed
            gen.set_state(saved["gen_state"])
            out.tags["resumed_at_draw"] = str(start.draws.shape[1])
        tuned = dict(saved.get("tuned", {}))
        self.use_tuned(tuned)
        warmup = dict(saved["warmup"])  # grows by what dropped probes and re-tuning cost
        state = state if state is not None else self.kernel.init(position, density)
        rules = RunLength.from_settings(cfg)
        if stage is None:
            stage = rules.resume(float(saved.get("target_accept", cfg.target_accept)), start.draws.shape[1],
                                 int(saved.get("planned_draws", cfg.num_draws)))
        kept = KeptDraws(cfg.thin, start)
        saver = SamplingCheckpoint(checkpoint, kept)
        bar = bar or ChainProgress(stage.planned * cfg.thin, self.name, progress)
        bar.stage("sampling")
        params = self.kernel.parameters(step_size, metric)
        clock = SamplingClock(float(saved.get("sampling_time_s", 0.0)), warmup)  # a resumed run's earlier sampling
        it = int(saved["iteration"])
        faults = FaultWatch()
        extensions: list[str] = []  # why the chains drew on, one reason per batch
        raises: list[str] = []  # each climb of the target acceptance, and why
        try:
            while stage.phase is not Phase.STOP:
                if stage.phase is Phase.RETUNE:  # drop the probe, re-tune at the raised target, start again
                    raises.append(stage.why)
                    dropped = kept.total("n_grad_evals")
                    kept.drop()
                    faults = FaultWatch()
                    bar.extend(RETUNE_ITERATIONS + rules.probe_draws() * cfg.thin)
                    bar.stage(f"retune {stage.target_accept:g}")
                    state, step_size, retune_grad_evals = self._retune(state, step_size, metric, stage.target_accept,
                                                                       density, gen, bar)
                    bar.stage("sampling")
                    warmup["n_grad_evals_warmup"] += dropped + retune_grad_evals
                    clock.retuned()
                    params, it = self.kernel.parameters(step_size, metric), 0
                kept.reserve(stage.until)
                while stage.phase in SAMPLING and it < stage.until * cfg.thin:
                    state, info = self.kernel.step(state, density, params, gen)
                    faults.observe(info, sampling=True, kept=kept.keeps(it))
                    if kept.keeps(it):
                        kept.add(state.position, info)
                        if stage.phase is not Phase.PROBE:  # checkpoints start after the probe
                            saver.update(kept, lambda it=it, state=state, stage=stage, step_size=step_size: {
                                "position": state.position.detach().cpu(), "step_size": step_size,
                                "inv_mass": metric.inv_mass.detach().cpu(), "gen_state": gen.get_state(),
                                "iteration": it + 1, "warmup": warmup, "planned_draws": stage.planned,
                                "target_accept": stage.target_accept, "sampling_time_s": clock.sampling_s(),
                                "tuned": tuned})
                    bar.tick(info, step_size, it)
                    it += 1
                before = stage
                stage = rules.next(stage, self._seen(stage, rules, kept, faults))
                if stage.phase is Phase.EXTEND:
                    extensions.append(stage.why)
                    bar.extend((stage.until - before.until) * cfg.thin)
        except (KeyboardInterrupt, RunInterrupted):
            out.interrupted = True
        except DensityError as exc:  # the run ends FAILED with this line and the draws so far
            out.error = f"{exc} (at sampling iteration {it + 1}; {len(kept)} draws kept)"
        finally:
            bar.close()
        if raises:
            out.tags["raised_target_accept"] = "; ".join(raises)
        if extensions:
            shown = extensions if len(extensions) <= 3 else [extensions[0], "...", extensions[-1]]
            out.tags["extended"] = f"{len(extensions)} times: " + "; ".join(shown)
        out.timings.update({k: v for k, v in warmup.items() if k != "n_grad_evals_warmup"})
        out.timings["sampling_time_s"] = clock.sampling_s()
        return self._report(out, kept, faults, step_size, metric, stage, warmup["n_grad_evals_warmup"])

    def _report(self, out: Draws, kept: KeptDraws, faults: FaultWatch, step_size: float, metric: Metric,
                stage: Stage, warmup_grad_evals: int) -> Draws:
        """``out`` with the kept draws, their statistics and summaries, the faults met, the target acceptance
        the run ended at (where the ladder rule is on) and the metric."""
        cfg = self.settings
        if len(kept):
            out.metrics["time_per_iter_s"] = out.timings["sampling_time_s"] / (len(kept) * cfg.thin)
            out.metrics["draws_per_chain"] = float(len(kept))
        out.tags["stopped_during"] = "sampling" if out.interrupted or out.error else "completed"
        out.draws, out.sample_stats = kept.draws(), kept.sample_stats()
        out.metrics.update(self._summaries(out.sample_stats, step_size, warmup_grad_evals))
        out.metrics.update(self.extra_metrics(out.sample_stats))
        out.metrics.update(faults.metrics())
        if cfg.raise_target_accept:  # the rule is on (whether or not it had a target left to climb to)
            out.metrics["target_accept_final"] = stage.target_accept
        out.warnings.extend(faults.warnings())
        out.fitted["inverse_mass"] = metric.inv_mass.detach().to("cpu")
        return out

    @staticmethod
    def _seen(stage: Stage, rules: RunLength, kept: KeptDraws,
              faults: FaultWatch) -> ProbeCount | Convergence | None:
        """What the run-length machine reads at the end of ``stage``: a probe's energy-error divergences (those
        that met a NaN density left out) and transitions; the kept draws' diagnostics where it may extend them."""
        if stage.phase is Phase.PROBE:
            return ProbeCount(kept.total("divergent") - faults.nan_divergent, len(kept) * kept.n_chains)
        if rules.needs_convergence(stage):
            return kept.convergence()
        return None

    def _retune(self, state, step_size: float, metric: Metric, target_accept: float, target, gen: torch.Generator,
                bar: ChainProgress):
        """Dual averaging alone at a raised ``target_accept``, the metric kept: a warm-up without windows, of
        RETUNE_ITERATIONS from ``step_size``. Returns the state, the step size and the gradients it took."""
        retune = WindowAdaptation(self.kernel.step, self.kernel.parameters, None,
                                  WarmupSchedule(RETUNE_ITERATIONS, ()), target_accept)
        tuned = retune.run(WarmupProgress(state, step_size, metric), target, gen, on_step=bar.tick)
        return tuned.state, tuned.step_size, tuned.grad_evals

    def _summaries(self, stats: dict[str, np.ndarray], step_size: float, warmup_grad_evals: int) -> dict[str, float]:
        out = {"step_size": float(step_size), "n_grad_evals_warmup": float(warmup_grad_evals)}
        if stats:
            out["accept_rate"] = float(np.mean(stats["accept_prob"]))
            out["n_divergent"] = float(np.sum(stats["divergent"]))
            out["n_grad_evals"] = float(np.sum(stats["n_grad_evals"]))
        return out
