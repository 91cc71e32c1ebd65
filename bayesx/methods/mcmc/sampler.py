"""The MCMC method: its settings, its kernel and its hooks, for any :class:`~bayesx.methods.mcmc.kernel.Kernel`.

A method subclasses :class:`MCMCMethod`: its ``Settings`` and ``name``, and ``make_kernel()``, the kernel built from
its settings (``init``, ``step``, ``log_density``, ``parameters(step_size, metric, **tuned)``,
``gradients_per_transition()`` and ``uses_gradients``). The run is bayesx.methods.mcmc.driver's functions, once for
every sampler: the start (``init``: the prior's points, or a Laplace or Pathfinder Gaussian), the warm-up
(bayesx.adaptation's WindowAdaptation wrapped around the kernel from outside, or the sampler's own), the sampling
stages that bayesx.methods.mcmc.run_length's machine asks for (warm-up, probe, re-tune, draw, extend, stop), the kept
draws and the checkpoint (bayesx.methods.mcmc.collect), the progress bar, the density's faults
(bayesx.methods.mcmc.health), timing and interruption.

Optional hooks, for samplers with their own warm-up or tuning: ``search_step_size`` (a starting step size for dual
averaging), ``make_adaptation`` (the warm-up; what it tunes beyond the step size and the metric it returns as
``WarmupProgress.tuned``, which the kernel's ``parameters`` take and the checkpoint stores), ``extra_metrics``,
``reported_step_size`` and ``warnings``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.adaptation.window import (
    GRADIENT_FORMS,
    WarmupSchedule,
    WindowAdaptation,
    bracket_step_size,
    find_initial_step_size,
)
from bayesx.kernels.density import Density
from bayesx.kernels.metric import Metric
from bayesx.methods.base import RunInputs
from bayesx.methods.common.progress import ChainProgress
from bayesx.methods.mcmc import driver
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.health import check_step_size_search
from bayesx.methods.mcmc.kernel import Kernel
from bayesx.methods.mcmc.run_length import RunLength
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
results/archive/posteriordb_13x7.md, 2026-11-25), and on digits (64) 2.7x (results/bench_samplers.md); its product costs
O(d^2) per step, small beside a gradient there, while at 500 coordinates (synthetic) it cost more than it gained."""


class MCMCMethod(Sampler):
    """One MCMC method (built from the method config group; options: MCMCSettings): its kernel and hooks; the run
    itself is bayesx.methods.mcmc.driver's functions."""

    Settings = MCMCSettings
    name = "mcmc"
    resumable = True  # the state after a draw is the position and the values warm-up tuned (step size, metric, ...)

    # --- what a subclass provides -------------------------------------------------------------
    def make_kernel(self) -> Kernel:
        """The transition kernel, built from ``self.settings`` (bayesx.methods.mcmc.kernel)."""
        raise NotImplementedError

    @cached_property
    def kernel(self) -> Kernel:
        """This method's kernel (``make_kernel()``, built once)."""
        return self.make_kernel()

    @property
    def uses_gradients(self) -> bool:  # whether the kernel evaluates grad log p (diag_grad and lowrank adapt from it)
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
    def search_step_size(self, state, density, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """A starting step size for dual averaging, at the start and after each metric update: Hoffman and Gelman's
        heuristic (2014, Alg. 4: one leapfrog step from a fresh momentum) for a kernel that uses gradients; for one
        that does not, the same doubling or halving on the mean acceptance of one transition of the kernel itself,
        until it crosses ``target_accept``."""
        if self.uses_gradients:
            return find_initial_step_size(state, density, metric, gen, guess)

        def one_step_accept(step_size: float) -> float:
            params = self.kernel.parameters(step_size, metric)
            return float(self.kernel.step(state, density, params, gen)[1].accept_prob.mean())

        return bracket_step_size(one_step_accept, guess, self.settings.target_accept)

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:  # its own, of per-draw statistics
        return {}

    def reported_step_size(self, step_size: float) -> dict[str, float]:  # pCN-type: h as the kernel caps it, rho
        return {"step_size": step_size}

    def checked_step_size_search(self, state, density, metric: Metric, gen: torch.Generator, guess: float) -> float:
        """:meth:`search_step_size`, failing the run where the step size runs away (an improper posterior;
        bayesx.methods.mcmc.health)."""
        return check_step_size_search(self.search_step_size(state, density, metric, gen, guess), guess)

    def make_adaptation(self, density, gen: torch.Generator):
        """The warm-up around the kernel (``run(progress, density, gen, on_step)``, returning the WarmupProgress
        with what it tuned): Stan's windows."""
        cfg = self.settings
        return WindowAdaptation(self.kernel.step, self.kernel.parameters,
                                lambda s, m, guess: self.checked_step_size_search(s, density, m, gen, guess),
                                cfg.schedule(), cfg.target_accept, cfg.adapt_step_size, self.mass_form(density.dim),
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
        """The density the kernel evaluates, prepared once for this run (bayesx.methods.mcmc.driver.prepare)."""
        return driver.prepare(self, target, inputs, out)

    # --- the run: bayesx.methods.mcmc.driver's functions in turn ------------------------------------
    def sample(self, target, inputs: RunInputs) -> Draws:
        """Warm up and sample all chains from ``inputs.initial`` (chains, dim); the retained draws go to
        ``inputs.checkpoint`` as they gather. With ``inputs.resume`` (a killed run's checkpoint), skip the
        warm-up and continue its sampling where it stopped, with its generator state and tuned values."""
        out = Draws()
        prepared = self.prepare_density(target, inputs, out)
        density = self.kernel_density(target, prepared)  # what the kernel moves on
        mass = self.mass_form(inputs.initial.shape[1])
        if self.settings.mass == "auto":
            out.tags["mass"] = mass
        if inputs.resume is not None:
            return driver.sample(self, density, inputs.gen, inputs.progress, inputs.checkpoint, inputs.resume,
                                 out=out)
        started = time.perf_counter()
        begun = driver.start(self, target, prepared, inputs.initial, inputs.gen, mass, out, started)
        if begun is None:
            return out
        state = driver.first_state(self, begun[0], density)
        rules = RunLength.from_settings(self.settings)
        stage = rules.warmup(self.settings.target_accept)
        bar = ChainProgress(self.settings.num_warmup + stage.planned * self.settings.thin, self.name, inputs.progress)
        warm = driver.warm_up(self, density, state, begun[1], inputs.gen, bar, out, started)
        if warm is None:
            return out
        return driver.sample(self, density, inputs.gen, inputs.progress, inputs.checkpoint,
                             driver.after_warmup(warm, out, started, inputs.initial.shape[0]), bar, out, warm.state,
                             rules.next(stage))
