"""The shared MCMC driver: warm-up, then sampling, for any kernel with ``init``, ``step`` and
``log_density`` (a module of bayesx.kernels, or a bayesx.kernels.common.Kernel).

A method subclasses :class:`MCMCMethod`, names its kernel and says how to build the kernel's
parameters (plain values) from a step size and a metric. Warm-up is bayesx.adaptation's
WindowAdaptation wrapped around the kernel from outside; collection of draws as (chains, draws,
dim), progress reporting, timing and interruption are handled here once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.adaptation.window import (
    DENSE_FORMS,
    GRADIENT_FORMS,
    WarmupProgress,
    WarmupSchedule,
    WindowAdaptation,
    find_initial_step_size,
)
from bayesx.store.checkpoint import RunCheckpoint, Resume
from bayesx.errors import BayesxError, DensityError, RunInterrupted
from bayesx.kernels import backend
from bayesx.kernels.metric import Metric, identity_metric, make_metric
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.health import FaultWatch, check_step_size_search
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.run_length import RETUNE_ITERATIONS, RunLength
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
    kernel: ModuleType
    name = "mcmc"
    resumable = True  # the state after a draw is the position, step size and metric (what make_params reads)
    uses_gradients = True  # the kernel's state carries grad log p (diag_grad and lowrank need it)

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
        if cfg.mass == "lowrank" and cfg.mass_rank > target.dim:
            raise InvalidSetting("mass_rank", f"={cfg.mass_rank} is larger than the target's dimension "
                                              f"{target.dim}; use at most {target.dim}")

    # --- what a subclass provides -------------------------------------------------------------
    def make_params(self, step_size: float, metric: Metric):
        raise NotImplementedError

    def search_step_size(self, state, target, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """A starting step size for dual averaging, at the start and after each metric update."""
        return find_initial_step_size(state, target, metric, gen, guess)

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:
        return {}

    def checked_step_size_search(self, state, target, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """:meth:`search_step_size`, failing the run where the step size runs away (an improper posterior;
        bayesx.methods.mcmc.health)."""
        return check_step_size_search(self.search_step_size(state, target, metric, gen, guess), guess)

    def make_adaptation(self, target, gen: torch.Generator):
        """The warm-up around the kernel (``run(progress, target, gen, on_step)``): Stan's windows."""
        cfg = self.settings
        return WindowAdaptation(self.kernel.step, self.make_params,
                                lambda s, m, guess: self.checked_step_size_search(s, target, m, gen, guess),
                                cfg.schedule(), cfg.target_accept, cfg.adapt_step_size, self.mass_form(target.dim),
                                cfg.mass_rank)

    def kernel_name(self, target, position: torch.Tensor) -> str:
        """Which backend runs the density this kernel moves on (the ``kernels`` tag; bayesx.kernels.backend)."""
        return backend.name(target, position)

    def backend_target(self, target):
        """The density this method's kernel evaluates through bayesx.kernels.backend, for the compile
        decision: the target, or None where the kernel computes no gradient (a random walk evaluates log pi
        alone, in large batches, which PyTorch serves)."""
        return target if self.uses_gradients else None

    def density_calls_per_transition(self) -> int:
        """PyTorch calls of the density's gradient in one transition of all chains (they move in lock-step):
        NUTS's trees of 8 leaves, its shallowest usual depth; static-trajectory methods say their steps."""
        return 8

    def prepare_backend(self, target, position: torch.Tensor, out: Draws) -> None:
        """Let the kernels' backend compile the density for this run's length (bayesx.kernels.backend);
        the compile's time and whether it came from the cache go into the run's record."""
        cfg = self.settings
        density = self.backend_target(target)
        if density is None:
            return
        calls = (cfg.num_warmup + cfg.num_draws * cfg.thin) * self.density_calls_per_transition()
        prepared = backend.prepare_sampler(density, position, calls)
        out.tags.update(prepared.tags())
        out.timings.update(prepared.timings())

    # --- the driver ------------------------------------------------------------------------------
    def sample(self, target, inputs: RunInputs) -> Draws:
        """Warm up and sample all chains from ``inputs.initial`` (chains, dim); the retained draws go to
        ``inputs.checkpoint`` as they gather. With ``inputs.resume`` (a killed run's checkpoint), skip the
        warm-up and continue its sampling where it stopped, with its generator state."""
        initial_position, gen, progress, checkpoint = inputs.initial, inputs.gen, inputs.progress, inputs.checkpoint
        cfg = self.settings
        n_chains, dim = initial_position.shape
        out = Draws()
        self.prepare_backend(target, initial_position, out)
        mass = self.mass_form(dim)
        if cfg.mass == "auto":
            out.tags["mass"] = mass
        if inputs.resume is not None:
            return self._sample(target, gen, progress, checkpoint, inputs.resume, out=out)
        dense = mass in DENSE_FORMS
        out.tags["kernels"] = self.kernel_name(target, initial_position)
        start = time.perf_counter()
        metric = identity_metric(dim, dense, initial_position.dtype, initial_position.device)
        if cfg.init != "prior":
            start_from = laplace_start if cfg.init == "laplace" else pathfinder_start
            try:
                initial_position, inv_mass = start_from(target, initial_position, gen, mass)
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
        state = self.kernel.init(initial_position, target)
        if not bool(torch.isfinite(self.kernel.log_density(state)).all()):
            if cfg.init != "prior":  # the points came from the mode search's Gaussian, not from the model
                raise BayesxError(f"the log density is not finite at the chains' starting points drawn around the "
                                  f"{cfg.init} mode search's end: the search diverged (an improper posterior, or a "
                                  f"missing Jacobian term?); use method.init=prior or check the density")
            raise BayesxError("the log density is not finite at the initial point; check the data or set a smaller "
                              "model.init_scale")
        adaptation = self.make_adaptation(target, gen)
        warm = WarmupProgress(state, float(cfg.step_size or "nan"), metric)  # nan: not searched yet
        bar = ChainProgress(cfg.num_warmup + cfg.num_draws * cfg.thin, self.name, progress)
        faults = FaultWatch()

        def on_step(info, eps, it):
            faults.observe(info, sampling=False)
            bar.tick(info, eps, it)

        try:
            if cfg.step_size is None:
                warm.step_size = self.checked_step_size_search(state, target, metric, gen, 1.0)
            adaptation.run(warm, target, gen, on_step=on_step)
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
                       "inv_mass": warm.metric.inv_mass, "iteration": 0, "warmup": warmup}
        return self._sample(target, gen, progress, checkpoint, Resume(np.zeros((n_chains, 0, dim)), {}, start_state),
                            bar, out, warm.state)

    def _sample(self, target, gen: torch.Generator, progress, checkpoint: RunCheckpoint | None, start: Resume,
                bar: ChainProgress | None = None, out: Draws | None = None, state=None) -> Draws:
        """The sampling stage from ``start``: after warm-up (no draws yet; ``state`` is the warm-up's last
        kernel state), or a killed run's checkpoint (its draws, statistics and state, including the
        generator's; the kernel state is rebuilt from the positions). The chains draw ``num_draws`` each and
        then as bayesx.methods.mcmc.run_length's rules ask: a divergence probe first where
        ``raise_target_accept`` is set, more draws while R-hat or the ESS fall short where ``max_draws`` is."""
        cfg = self.settings
        out = out or Draws()
        saved = start.state
        position = torch.as_tensor(saved["position"]).to(target.device, target.dtype)
        out.tags.setdefault("kernels", self.kernel_name(target, position))
        step_size, metric = float(saved["step_size"]), make_metric(torch.as_tensor(saved["inv_mass"]).to(
            target.device, target.dtype))
        if "gen_state" in saved:  # resumed: the same random stream as the run that was killed
            gen.set_state(saved["gen_state"])
            out.tags["resumed_at_draw"] = str(start.draws.shape[1])
        warmup = dict(saved["warmup"])  # grows by what dropped probes and re-tuning cost
        state = state if state is not None else self.kernel.init(position, target)
        length = RunLength.from_settings(cfg)
        planned = int(saved.get("planned_draws", cfg.num_draws))  # draws per chain, as the rules extend it
        target_accept = float(saved.get("target_accept", cfg.target_accept))
        ladder = [t for t in length.ladder if t > target_accept]
        probing = start.draws.shape[1] == 0 and bool(ladder)  # checkpoints are written after the probe
        params = self.make_params(step_size, metric)
        kept = [torch.as_tensor(start.draws[:, i]) for i in range(start.draws.shape[1])]
        stats: dict[str, list[np.ndarray]] = {k: [v[:, i] for i in range(v.shape[1])] for k, v in start.stats.items()}
        if checkpoint is not None:
            checkpoint.saved = len(kept)
        bar = bar or ChainProgress(planned * cfg.thin, self.name, progress)
        bar.stage("sampling")
        sampling_start = time.perf_counter()
        earlier = float(saved.get("sampling_time_s", 0.0))  # a resumed run's sampling before it was killed
        it = int(saved["iteration"])
        faults = FaultWatch()
        extensions: list[str] = []  # why the chains drew on, one reason per batch
        raises: list[str] = []  # each climb of the target acceptance, and why
        try:
            while True:
                end = (length.probe_draws() if probing else planned) * cfg.thin
                while it < end:
                    state, info = self.kernel.step(state, target, params, gen)
                    faults.observe(info, sampling=True, kept=it % cfg.thin == 0)
                    if it % cfg.thin == 0:
                        kept.append(state.position.detach().to("cpu"))
                        for name, value in info._asdict().items():
                            if name != "faults":  # where the density failed: summarised below, not a per-draw statistic
                                stats.setdefault(name, []).append(value.detach().to("cpu").numpy())
                        if checkpoint is not None and not probing:
                            checkpoint.update(kept, stats, lambda it=it, state=state: {
                                "position": state.position.detach().cpu(), "step_size": step_size,
                                "inv_mass": metric.inv_mass.detach().cpu(), "gen_state": gen.get_state(),
                                "iteration": it + 1, "warmup": warmup, "planned_draws": planned,
                                "target_accept": target_accept,
                                "sampling_time_s": earlier + time.perf_counter() - sampling_start})
                    bar.tick(info, step_size, it)
                    it += 1
                if probing:
                    probing = False
                    divergent = int(np.sum(stats["divergent"])) - faults.nan_divergent
                    transitions = len(kept) * position.shape[0]
                    if length.too_divergent(divergent, transitions):
                        raised = ladder.pop(0)
                        raises.append(f"{target_accept:g} -> {raised:g} ({divergent} of {transitions} probe "
                                      f"transitions divergent)")
                        dropped = int(np.sum(stats["n_grad_evals"]))
                        kept, stats, faults = [], {}, FaultWatch()
                        bar.extend(RETUNE_ITERATIONS + length.probe_draws() * cfg.thin)
                        bar.stage(f"retune {raised:g}")
                        # dual averaging alone at the raised target, the metric kept: a warm-up without windows
                        retune = WindowAdaptation(self.kernel.step, self.make_params, None,
                                                  WarmupSchedule(RETUNE_ITERATIONS, ()), raised)
                        tuned = retune.run(WarmupProgress(state, step_size, metric), target, gen, on_step=bar.tick)
                        bar.stage("sampling")
                        state, step_size = tuned.state, tuned.step_size
                        warmup["n_grad_evals_warmup"] += dropped + tuned.grad_evals
                        warmup["warmup_time_s"] += time.perf_counter() - sampling_start
                        sampling_start = time.perf_counter()
                        target_accept, params, it = raised, self.make_params(step_size, metric), 0
                        probing = bool(ladder)
                    continue
                if not length.may_extend(len(kept)):
                    break
                more, why = length.more_draws(torch.stack(kept, dim=1).numpy())
                if not more:
                    break
                extensions.append(why)
                planned += more
                bar.extend(more * cfg.thin)
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
        out.timings["sampling_time_s"] = earlier + time.perf_counter() - sampling_start
        if kept:
            out.metrics["time_per_iter_s"] = out.timings["sampling_time_s"] / (len(kept) * cfg.thin)
            out.metrics["draws_per_chain"] = float(len(kept))
        out.tags["stopped_during"] = "sampling" if out.interrupted or out.error else "completed"
        if kept:
            out.draws = torch.stack(kept, dim=1)
            out.sample_stats = {name: np.stack(values, axis=1) for name, values in stats.items()}
        out.metrics.update(self._summaries(out.sample_stats, step_size, warmup["n_grad_evals_warmup"]))
        out.metrics.update(self.extra_metrics(out.sample_stats))
        out.metrics.update(faults.metrics())
        if cfg.raise_target_accept:  # the rule is on (whether or not it had a target left to climb to)
            out.metrics["target_accept_final"] = target_accept
        out.warnings.extend(faults.warnings())
        out.fitted["inverse_mass"] = metric.inv_mass.detach().to("cpu")
        return out

    def _summaries(self, stats: dict[str, np.ndarray], step_size: float, warmup_grad_evals: int) -> dict[str, float]:
        out = {"step_size": float(step_size), "n_grad_evals_warmup": float(warmup_grad_evals)}
        if stats:
            out["accept_rate"] = float(np.mean(stats["accept_prob"]))
            out["n_divergent"] = float(np.sum(stats["divergent"]))
            out["n_grad_evals"] = float(np.sum(stats["n_grad_evals"]))
        return out
