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

FITTED = "training"  # the checkpoint's stage after pre-sampling and training: the pre-samples and the network
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
    resumable = True  # the first two stages' products are checkpointed when they end, the latent draws as they come
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
        """Pre-sample, train the auto-encoder, sample in its latent space. What the first two stages made (the
        pre-samples, the network, the generator's state) is checkpointed once they end, and the latent sampler's
        draws as any sampler's, so a killed run resumes (``inputs.resume``) without making them again."""
        n_chains, dim = inputs.initial.shape
        self.check(target, n_chains)
        out = Draws()
        saved = inputs.resume.stages.get(FITTED) if inputs.resume is not None else None
        try:
            fitted = self._restore(saved, target, inputs, out) if saved else self._presample_and_fit(target, inputs,
                                                                                                   out)
            if fitted is None:
                return out
            space, draws = fitted
            out.tags["stopped_during"] = "sampling"
            resume = inputs.resume if inputs.resume is not None and inputs.resume.draws is not None else None
            sampled = self.latent_sampler(space, target).sample(target, RunInputs(
                draws[:, -1], inputs.gen, inputs.progress, compile=inputs.compile, checkpoint=inputs.checkpoint,
                resume=resume))
        except (KeyboardInterrupt, RunInterrupted):
            out.interrupted = True
            return out
        self._join(out, sampled, space)
        if inputs.artifact_dir is not None:
            self._write_artifacts(out, space, draws.reshape(-1, dim), sampled.metrics.get("step_size", 0.1),
                                  inputs.gen, Path(inputs.artifact_dir))
        return out

    def _presample_and_fit(self, target, inputs: RunInputs, out: Draws):
        """The first two stages: pre-samples and the auto-encoder trained on them, as (space, pre-samples), their
        record in ``out`` and, with a checkpoint, in a stage file; None where the run was stopped while
        pre-sampling (``out`` then keeps the pre-samples as its draws)."""
        initial_position, gen = inputs.initial, inputs.gen
        out.tags["stopped_during"] = "presample"
        pre = self.presampler(initial_position.shape[0]).sample(target, RunInputs(
            initial_position, gen, inputs.progress, compile=inputs.compile, density_identity=inputs.density_identity))
        start_time = sum(pre.timings.get(k, 0.0) for k in ("laplace_time_s", "pathfinder_time_s"))
        out.timings["presample_warmup_time_s"] = start_time + pre.timings["warmup_time_s"]
        out.timings["presample_time_s"] = out.timings["presample_warmup_time_s"] + pre.timings["sampling_time_s"]
        out.metrics.update({f"presample_{k}": v for k, v in pre.metrics.items()
                            if k in ("accept_rate", "step_size", "n_divergent")})
        out.metrics["n_grad_evals_presample"] = pre.metrics.get("n_grad_evals_warmup", 0.0) + pre.metrics.get(
            "n_grad_evals", 0.0)
        out.tags["kernels"] = pre.tags["kernels"]
        if pre.interrupted:
            out.interrupted = True
            if pre.draws is not None:
                out.draws, out.sample_stats = pre.draws, pre.sample_stats
                out.tags["draws_are"] = f"{self.presample_method} pre-samples (the run stopped before latent sampling)"
            return None
        out.tags["stopped_during"] = "train"
        start = time.perf_counter()
        draws = pre.draws.to(initial_position.device, initial_position.dtype)
        space, report, choice = self._fit(target, draws.reshape(-1, draws.shape[-1]), gen)
        out.timings["train_time_s"] = time.perf_counter() - start
        self._record_training(out, report, choice)
        if inputs.checkpoint is not None:
            inputs.checkpoint.stage(FITTED, fitted_state(out, space, draws, gen))
        return space, draws

    def _restore(self, saved: dict, target, inputs: RunInputs, out: Draws):
        """The first two stages as a killed run's checkpoint kept them (:func:`fitted_state`), the generator
        where they left it unless the latent sampler's own checkpoint takes it further."""
        ae = AutoEncoder(saved["dim"], saved["latent_dim"], saved["arch"], saved["hidden"], inputs.initial.dtype,
                         inputs.initial.device)
        ae.load_state_dict(saved["state_dict"])
        on = {"device": inputs.initial.device, "dtype": inputs.initial.dtype}
        space = latent.LatentSpace(target, ae, saved["mean"].to(**on), saved["scale"].to(**on))
        out.metrics.update(saved["metrics"])
        out.timings.update(saved["timings"])
        out.tags.update(saved["tags"])
        out.traces.update({name: [tuple(point) for point in trace] for name, trace in saved["traces"].items()})
        out.warnings.extend(saved["warnings"])
        if inputs.resume.draws is None:
            inputs.gen.set_state(saved["gen_state"])
            out.tags["resumed_at_draw"] = "0"
        return space, saved["presamples"].to(**on)

    def _join(self, out: Draws, sampled: Draws, space: latent.LatentSpace) -> None:
        """The latent sampler's draws, metrics and times into the run's, beside the first two stages'."""
        out.draws, out.sample_stats, out.interrupted = sampled.draws, sampled.sample_stats, sampled.interrupted
        stages = (out.tags["kernels"], sampled.tags["kernels"])
        out.tags.update(sampled.tags)
        out.tags["kernels"] = stages[0] if stages[0] == stages[1] else "presample={},sampling={}".format(*stages)
        out.metrics.update(sampled.metrics)
        if "log_volume" in sampled.sample_stats:
            out.metrics["log_volume_mean"] = float(sampled.sample_stats["log_volume"].mean())
        out.timings["latent_warmup_time_s"] = sampled.timings["warmup_time_s"]
        out.timings["warmup_time_s"] = out.timings["presample_warmup_time_s"] + sampled.timings["warmup_time_s"]
        out.timings["sampling_time_s"] = sampled.timings["sampling_time_s"]
        out.fitted["inverse_mass"] = (space.scale**2).detach().cpu()

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


def fitted_state(out: Draws, space: latent.LatentSpace, presamples: torch.Tensor, gen: torch.Generator) -> dict:
    """What the first two stages made, as a checkpoint stores it: the pre-samples, the auto-encoder (its
    architecture and weights) with the standardization, their record in the run so far, and the generator's state
    when they ended."""
    ae: AutoEncoder = space.ae
    return {"presamples": presamples.detach().cpu(), "dim": ae.dim, "latent_dim": ae.latent_dim, "arch": ae.arch,
            "hidden": ae.hidden, "state_dict": {k: v.detach().cpu() for k, v in ae.state_dict().items()},
            "mean": space.mean.detach().cpu(), "scale": space.scale.detach().cpu(), "metrics": dict(out.metrics),
            "timings": dict(out.timings), "tags": dict(out.tags), "traces": dict(out.traces),
            "warnings": list(out.warnings), "gen_state": gen.get_state()}
