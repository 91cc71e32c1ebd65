"""AE-HMC as a method of the runner: pre-sample with HMC, train an auto-encoder, sample in its
latent space (``bayesx.kernels.latent_hmc``), each stage timed.

    presample_time_s   HMC warm-up and the pre-sample draws (Deep MCMC: ~1000 draws, ~10% of a run)
    train_time_s       auto-encoder training on the standardized pre-samples
    warmup_time_s      HMC warm-up plus the latent sampler's step-size adaptation
    sampling_time_s    the retained AE-HMC iterations (what ESS per second divides by)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import torch

from bayesx.adaptation.window import bracket_step_size
from bayesx.diagnostics import plots
from bayesx.kernels import backend
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.mcmc.autoencoding import AutoEncodingMethod, AutoEncodingSettings, LatentSamplerSettings
from bayesx.methods.mcmc.hmc import HMC, HMCSettings
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.sampler import MCMCMethod
from bayesx.settings import AtLeast


class LatentSampler(MCMCMethod):
    """The third stage: the shared driver with the latent kernel; warm-up adapts the step size only."""

    Settings = LatentSamplerSettings
    name = "aehmc"

    def __init__(self, space: latent.LatentSpace, kernel_params: latent.LatentParams,
                 settings: LatentSamplerSettings | None = None, **options):
        super().__init__(settings, **options)
        self.space, self.kernel_params = space, kernel_params

    def make_kernel(self) -> TransitionKernel:
        steps = self.kernel_params.num_steps
        return TransitionKernel(latent.make_kernel(self.space), self.latent_params, gradients=steps)

    def latent_params(self, step_size, metric=None) -> latent.LatentParams:
        """The kernel's params at ``step_size`` (the latent space is standardized: no metric)."""
        return self.kernel_params._replace(step_size=step_size)

    def backend_target(self, target):
        """The target restricted to the decoder's affine image, which the latent trajectories evaluate."""
        return self.space.restricted

    def prepare_density(self, target, inputs, out):
        """As the driver's; a nonlinear decoder's trajectories (its Jacobians) run in PyTorch whatever evaluates the
        restricted density's gradient, and the ``kernels`` tag says so."""
        density = super().prepare_density(target, inputs, out)
        if self.space.ae.nonlinear:
            out.tags["kernels"] = backend.PYTORCH
        return density

    def density_calls_per_transition(self) -> int:
        """A linear decoder's trajectories run on the restricted density's native path; a nonlinear one's on
        PyTorch (its Jacobians), so there is nothing to compile for (0 calls: ``compile=auto`` does not)."""
        return 0 if self.space.ae.nonlinear else self.kernel_params.num_steps

    def search_step_size(self, state, density, metric, gen, guess):
        def one_step_accept(eps: float) -> float:
            params = self.kernel_params._replace(step_size=eps, num_steps=1)
            return float(self.kernel.step(state, density, params, gen)[1].accept_prob.mean())

        return bracket_step_size(one_step_accept, guess)


@dataclass(frozen=True)
class AEHMCPresampleSettings(HMCSettings):
    """The pre-sampling HMC run; num_draws is the total over chains, num_steps null: AE-HMC's."""

    num_steps: Annotated[int | None, AtLeast(1)] = None


@dataclass(frozen=True)
class AEHMCSettings(AutoEncodingSettings):
    num_steps: Annotated[int, AtLeast(1)] = 50  # leapfrog steps per iteration, as the HMC baseline
    energy_at_start: Literal["reconstructed", "original"] = "reconstructed"
    trajectory_plot: bool | None = None  # null: when latent_dim == 2 and dim <= 3 (Deep MCMC Figure 2)
    presample: AEHMCPresampleSettings = field(default_factory=AEHMCPresampleSettings)


class AEHMC(AutoEncodingMethod):
    """Auto-encoding HMC (Deep MCMC Alg. 1); see ``conf/method/aehmc.yaml`` for every option.

    energy_at_start    reconstructed | original (see bayesx.kernels.latent_hmc)
    volume_correction  multiply the acceptance ratio by the Gram volume ratio (Deep MCMC eq. 5-6);
                       false is the "approximate Bayes" variant of Deep MCMC sec. 3.3
    """

    Settings = AEHMCSettings
    name = "aehmc"

    def make_presampler(self, settings: AEHMCPresampleSettings) -> HMC:
        return HMC(settings.replace(num_steps=settings.num_steps or self.settings.num_steps))

    def latent_sampler(self, space, target) -> LatentSampler:
        cfg = self.settings
        params = latent.LatentParams(0.0, cfg.num_steps, cfg.volume_correction, cfg.energy_at_start)
        return LatentSampler(space, params, cfg.latent_sampler_settings())

    def training_tags(self) -> dict[str, str]:
        return {**super().training_tags(), "energy_at_start": self.settings.energy_at_start}

    def extra_artifacts(self, result, space, presamples, step_size, gen, folder) -> None:
        ae = space.ae
        wanted = self.settings.trajectory_plot
        wanted = (ae.latent_dim == 2 and space.dim <= 3) if wanted is None else wanted
        if wanted and ae.latent_dim >= 2 and space.dim >= 2:
            figure = trajectory_figure(space, presamples, step_size, self.settings.num_steps, gen,
                                       folder / "trajectory.png")
            result.artifacts.setdefault("plots", []).append(figure)


def trajectory_figure(space: latent.LatentSpace, presamples: torch.Tensor, step_size: float, num_steps: int,
                      gen: torch.Generator, path: Path) -> Path:
    """Deep MCMC Figure 2: pre-samples and one latent leapfrog trajectory, in the latent plane and mapped
    back to the first (up to three) original coordinates."""
    with torch.no_grad():
        q = presamples[-1:]
        z, _ = space.encode_position(q)
        noise = torch.randn(q.shape, generator=gen, dtype=q.dtype, device=q.device)
        p, _ = space.encode_noise(noise)
        restricted = backend.on_pytorch(space.restricted)
        potential, grad = space.potential_and_grad(z, restricted)
        points = [z]
        for _ in range(num_steps):
            z, p, potential, grad, _, _ = latent.latent_leapfrog(space, restricted, z, p, step_size, 1, potential,
                                                                 grad)
            points.append(z)
        path_latent = torch.cat(points)
        latent_pre, _ = space.encode_position(presamples)
        return plots.latent_trajectory(latent_pre.cpu().numpy(), path_latent.cpu().numpy(),
                                       presamples.cpu().numpy(), space.decode_position(path_latent).cpu().numpy(), path)
