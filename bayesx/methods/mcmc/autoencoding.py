"""The three stages every latent-space method shares (Deep MCMC, Shahbaba et al.): pre-sample, train an
auto-encoder, sample in its latent space; each stage timed.

latent space (``bayesx.kernels.latent_hmc``), each stage timed.

    presample_time_s   HMC warm-up and the pre-sample draws (Deep MCMC: ~1000 draws, ~10% of a run)
    train_time_s       auto-encoder training on the standardized pre-samples
    warmup_time_s      HMC warm-up plus the latent sampler's step-size adaptation
    sampling_time_s    the retained AE-HMC iterations (what ESS per second divides by)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Literal

import torch

from bayesx.errors import BayesxError, RunInterrupted
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.nn.autoencoder import (
    AutoEncoder,
    TrainReport,
    TrainSettings,
    pca_error_curve,
    split,
    train_autoencoder,
)
from bayesx.settings import AtLeast, Between, InvalidSetting

AUTO_GROWTH = 1.25  # latent_dim=auto: grow the PCA-chosen size by this factor while the trained AE misses recon_tol
AUTO_TRIES = 6


@dataclass(frozen=True)
class LatentSamplerSettings(MCMCSettings):
    """The sampler in the standardized latent space: no mass matrix, started at the last pre-samples."""

    mass: Literal["identity"] = "identity"
    init: Literal["prior"] = "prior"


@dataclass(frozen=True)
class AutoEncodingSettings(LatentSamplerSettings):
    """The options of a latent-space method; the MCMC fields are those of the latent sampler.

    latent_dim         int, null (about D/10, as in Deep MCMC) or "auto" (the smallest size whose
                       validation reconstruction error is below recon_tol)
    ae                 linear | tanh | pca
    hidden             tanh hidden width; null: 2 x latent_dim
    volume_correction  include the Jacobian (volume) terms in the acceptance ratio
    presample          settings of the pre-sampling run; num_draws is the total over chains
    train              auto-encoder training
    """

    latent_dim: Annotated[int | Literal["auto"] | None, AtLeast(1)] = None
    ae: Literal["linear", "tanh", "pca"] = "linear"
    hidden: Annotated[int | None, AtLeast(1)] = None
    recon_tol: Annotated[float, Between(0.0, 1.0)] = 0.1
    volume_correction: bool = True
    num_warmup: Annotated[int, AtLeast(0)] = 200
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.65
    min_presamples_per_latent: Annotated[int, AtLeast(1)] = 10
    presample: MCMCSettings = field(default_factory=MCMCSettings)
    train: TrainSettings = field(default_factory=TrainSettings)

    def check(self):
        if self.presample.num_draws < 2:
            raise InvalidSetting("presample.num_draws", f"must be >= 2 (the total over chains), got "
                                 f"{self.presample.num_draws}")

    def latent_sampler_settings(self) -> LatentSamplerSettings:
        """The latent sampler's settings: the fields shared with every MCMC method."""
        return LatentSamplerSettings(**{f.name: getattr(self, f.name) for f in fields(LatentSamplerSettings)})


class AutoEncodingMethod(Sampler):
    """The three stages every latent-space method shares (pre-sample, train, sample in the latent
    space), each timed; subclasses say which sampler pre-samples and which samples the latent space."""

    Settings = AutoEncodingSettings
    name = "latent"
    summary_keys = ("latent_dim", "recon_err", "presample_time_s", "train_time_s", *Sampler.summary_keys)
    approximate_draws = True  # with latent_dim < D: the runner reports the error against a reference posterior
    presample_method = "hmc"  # named in error messages

    # --- what a subclass provides ----------------------------------------------------------------------
    def make_presampler(self, settings: MCMCSettings) -> MCMCMethod:
        raise NotImplementedError

    def latent_sampler(self, space: latent.LatentSpace, target) -> MCMCMethod:
        raise NotImplementedError

    def presampler(self, n_chains: int) -> MCMCMethod:
        """The pre-sampling run, the total num_draws split over the chains."""
        pre = self.settings.presample
        return self.make_presampler(pre.replace(num_draws=math.ceil(pre.num_draws / n_chains)))

    # --- checks that need the target, made before a run is recorded ---------------------------------
    def resolved_latent_dim(self, dim: int) -> int | None:
        latent_dim = self.settings.latent_dim
        if latent_dim == "auto":
            return None
        return max(1, round(dim / 10)) if latent_dim is None else int(latent_dim)

    def check(self, target, n_chains: int) -> None:
        d = self.resolved_latent_dim(target.dim)
        if d is not None and d > target.dim:
            raise InvalidSetting("latent_dim", f"={d} exceeds the target's dimension {target.dim}; "
                                 f"set it to at most {target.dim}")
        total = math.ceil(self.settings.presample.num_draws / n_chains) * n_chains
        per_latent = self.settings.min_presamples_per_latent
        need = per_latent * (d or 1)
        if total < need:
            raise InvalidSetting("presample.num_draws", f"={total} is too few pre-samples to train the auto-encoder "
                                 f"for latent_dim={d or 1} (at least {per_latent} per latent dimension, {need}); "
                                 f"raise it or lower latent_dim")

    # --- the three stages ------------------------------------------------------------------------------
    def sample(self, target, inputs: RunInputs) -> Draws:
        """Pre-sample, train the auto-encoder, sample in its latent space. The draws are decoded only at
        the end, so nothing is checkpointed on the way (``inputs.checkpoint`` is ignored) and a run cannot
        be resumed (``resumable`` is False)."""
        initial_position, gen, progress = inputs.initial, inputs.gen, inputs.progress
        n_chains, dim = initial_position.shape
        self.check(target, n_chains)
        out = Draws()
        stage = "presample"
        try:
            pre = self.presampler(n_chains).sample(target, RunInputs(initial_position, gen, progress,
                                                                     compile=inputs.compile,
                                                                     density_identity=inputs.density_identity))
            start_time = sum(pre.timings.get(k, 0.0) for k in ("laplace_time_s", "pathfinder_time_s"))
            out.timings["presample_warmup_time_s"] = start_time + pre.timings["warmup_time_s"]
            out.timings["presample_time_s"] = out.timings["presample_warmup_time_s"] + pre.timings["sampling_time_s"]
            out.metrics.update({f"presample_{k}": v for k, v in pre.metrics.items()
                                if k in ("accept_rate", "step_size", "n_divergent")})
            if pre.interrupted:
                raise RunInterrupted("interrupted during pre-sampling")

            stage = "train"
            start = time.perf_counter()
            draws = pre.draws.to(initial_position.device, initial_position.dtype)
            space, report, choice = self._fit(target, draws.reshape(-1, dim), gen)
            out.timings["train_time_s"] = time.perf_counter() - start
            self._record_training(out, report, choice)

            stage = "sampling"
            sampled = self.latent_sampler(space, target).sample(target, RunInputs(draws[:, -1], gen, progress,
                                                                                  compile=inputs.compile))
        except (KeyboardInterrupt, RunInterrupted):
            out.interrupted = True
            out.tags["stopped_during"] = stage
            if stage == "presample" and "pre" in locals() and pre.draws is not None:
                out.draws, out.sample_stats = pre.draws, pre.sample_stats
                out.tags["draws_are"] = f"{self.presample_method} pre-samples (the run stopped before latent sampling)"
            return out

        out.draws, out.sample_stats, out.interrupted = sampled.draws, sampled.sample_stats, sampled.interrupted
        out.tags.update(sampled.tags)
        stages = (pre.tags["kernels"], sampled.tags["kernels"])
        out.tags["kernels"] = stages[0] if stages[0] == stages[1] else "presample={},sampling={}".format(*stages)
        out.metrics.update(sampled.metrics)
        out.metrics["n_grad_evals_presample"] = pre.metrics.get("n_grad_evals_warmup", 0.0) + pre.metrics.get(
            "n_grad_evals", 0.0)
        if "log_volume" in sampled.sample_stats:
            out.metrics["log_volume_mean"] = float(sampled.sample_stats["log_volume"].mean())
        out.timings["latent_warmup_time_s"] = sampled.timings["warmup_time_s"]
        out.timings["warmup_time_s"] = out.timings["presample_warmup_time_s"] + sampled.timings["warmup_time_s"]
        out.timings["sampling_time_s"] = sampled.timings["sampling_time_s"]
        out.fitted["inverse_mass"] = (space.scale**2).detach().cpu()
        if inputs.artifact_dir is not None:
            self._write_artifacts(out, space, draws.reshape(-1, dim), sampled.metrics.get("step_size", 0.1),
                                  gen, Path(inputs.artifact_dir))
        return out

    def _fit(self, target, draws: torch.Tensor, gen: torch.Generator):
        """Standardize the pre-samples, choose the latent size, train; returns the latent space."""
        mean = draws.mean(0)
        scale = draws.std(0).clamp(min=1e-12)
        x = (draws - mean) / scale
        cfg = self.settings
        x_train, x_val = split(x, cfg.train.val_fraction, gen)
        dim = x.shape[1]
        d = self.resolved_latent_dim(dim)
        choice = "fixed" if isinstance(cfg.latent_dim, int) else "default (dim/10)"
        if d is None:  # auto: the PCA error curve gives the smallest candidate, training confirms it
            curve = pca_error_curve(x_train, x_val)
            below = (curve <= cfg.recon_tol).nonzero()
            d = int(below[0]) + 1 if below.numel() else dim
            choice = f"auto (recon_tol={cfg.recon_tol})"
        for _ in range(AUTO_TRIES):
            ae, report = train_autoencoder(x_train, x_val, d, cfg.ae, cfg.train, gen, cfg.hidden)
            if cfg.latent_dim != "auto" or report.recon_err <= cfg.recon_tol or d == dim:
                break
            d = min(dim, math.ceil(d * AUTO_GROWTH))
        if not report.recon_err <= cfg.train.max_recon_err:
            raise BayesxError(f"the auto-encoder failed to train: validation reconstruction error "
                              f"{report.recon_err:.3g} > method.train.max_recon_err={cfg.train.max_recon_err}; "
                              f"raise method.latent_dim, method.train.max_epochs or method.presample.num_draws")
        return latent.LatentSpace(target, ae, mean, scale), report, choice

    def _record_training(self, out: Draws, report: TrainReport, choice: str) -> None:
        out.metrics.update({"latent_dim": float(report.latent_dim), "recon_err": report.recon_err,
                            "ae_epochs": float(report.epochs)})
        out.tags.update({"latent_dim_choice": choice, "ae": self.settings.ae,
                         "volume_correction": str(self.settings.volume_correction).lower()})
        out.traces["ae_train_loss"] = list(enumerate(report.train_loss))
        out.traces["ae_val_loss"] = list(enumerate(report.val_loss))
        if report.recon_err > self.settings.recon_tol:
            out.warnings.append(f"auto-encoder reconstruction error {report.recon_err:.3g} is above "
                                f"method.recon_tol={self.settings.recon_tol}: proposals miss part of the posterior; "
                                f"raise method.latent_dim (or use latent_dim=auto)")

    def _write_artifacts(self, out: Draws, space: latent.LatentSpace, presamples: torch.Tensor, step_size: float,
                         gen: torch.Generator, folder: Path) -> None:
        ae: AutoEncoder = space.ae
        path = folder / "autoencoder.pt"
        torch.save({"arch": ae.arch, "latent_dim": ae.latent_dim, "hidden": ae.hidden, "state_dict": ae.state_dict(),
                    "mean": space.mean.cpu(), "scale": space.scale.cpu()}, path)
        out.artifacts.setdefault("autoencoder", []).append(path)
        self._extra_artifacts(out, space, presamples, step_size, gen, folder)

    def _extra_artifacts(self, out, space, presamples, step_size, gen, folder) -> None:
        pass
