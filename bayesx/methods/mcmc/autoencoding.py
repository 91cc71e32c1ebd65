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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Literal

import torch

from bayesx.errors import RunInterrupted
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc import latent_stages as stages
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.sampler import MCMCMethod, MCMCSettings
from bayesx.nn.autoencoder import TrainSettings
from bayesx.settings import AtLeast, Between, InvalidSetting


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

    def resolved_latent_dim(self, dim: int) -> int | None:
        """The latent size for a target of ``dim`` coordinates; None: chosen by training (``auto``)."""
        if self.latent_dim == "auto":
            return None
        return max(1, round(dim / 10)) if self.latent_dim is None else int(self.latent_dim)

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

    def training_tags(self) -> dict[str, str]:
        """The run's tags that say how the latent space was made."""
        return {"ae": self.settings.ae, "volume_correction": str(self.settings.volume_correction).lower()}

    def extra_artifacts(self, out: Draws, space: latent.LatentSpace, presamples: torch.Tensor, step_size: float,
                        gen: torch.Generator, folder: Path) -> None:
        """Files beyond the trained auto-encoder (AE-HMC: its trajectory figure)."""

    # --- the stages -------------------------------------------------------------------------------------
    def presampler(self, n_chains: int) -> MCMCMethod:
        """The pre-sampling run, the total num_draws split over the chains."""
        pre = self.settings.presample
        return self.make_presampler(pre.replace(num_draws=math.ceil(pre.num_draws / n_chains)))

    def check(self, target, n_chains: int) -> None:
        d = self.settings.resolved_latent_dim(target.dim)
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

    def sample(self, target, inputs: RunInputs) -> Draws:
        """Pre-sample, train the auto-encoder, sample in its latent space (bayesx.methods.mcmc.latent_stages). What
        the first two stages made (the pre-samples, the network, the generator's state) is checkpointed once they
        end, and the latent sampler's draws as any sampler's, so a killed run resumes (``inputs.resume``) without
        making them again."""
        self.check(target, inputs.initial.shape[0])
        out = Draws()
        saved = inputs.resume.stages.get(stages.FITTED) if inputs.resume is not None else None
        try:
            fitted = (stages.restore(saved, target, inputs, out) if saved else
                      stages.presample_and_fit(self, target, inputs, out))
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
        stages.join(out, sampled, space)
        if inputs.artifact_dir is not None:
            presamples, step_size = draws.reshape(-1, draws.shape[-1]), sampled.metrics.get("step_size", 0.1)
            stages.save_autoencoder(out, space, Path(inputs.artifact_dir))
            self.extra_artifacts(out, space, presamples, step_size, inputs.gen, Path(inputs.artifact_dir))
        return out
