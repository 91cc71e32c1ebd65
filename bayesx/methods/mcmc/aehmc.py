"""AE-HMC as a method of the runner: pre-sample with HMC, train an auto-encoder, sample in its
latent space (``bayesx.kernels.latent_hmc``), each stage timed.

    presample_time_s   HMC warm-up and the pre-sample draws (Deep MCMC: ~1000 draws, ~10% of a run)
    train_time_s       auto-encoder training on the standardized pre-samples
    warmup_time_s      HMC warm-up plus the latent sampler's step-size adaptation
    sampling_time_s    the retained AE-HMC iterations (what ESS per second divides by)
"""

from __future__ import annotations

from pathlib import Path

import torch

from bayesx.adaptation.window import bracket_step_size
from bayesx.diagnostics import plots
from bayesx.errors import BayesxError
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.mcmc.autoencoding import AutoEncodingMethod
from bayesx.methods.mcmc.hmc import HMC
from bayesx.methods.mcmc.sampler import MCMCMethod


class LatentSampler(MCMCMethod):
    """The third stage: the shared driver with the latent kernel; warm-up adapts the step size only."""

    name = "aehmc"

    def __init__(self, space: latent.LatentSpace, num_steps: int, volume_correction: bool, energy_at_start: str,
                 **kwargs):
        super().__init__(mass="identity", init="prior", **kwargs)
        self.space, self.num_steps = space, num_steps
        self.kernel = latent.make_kernel(space)
        self.volume_correction, self.energy_at_start = volume_correction, energy_at_start

    def kernel_name(self, target, position: torch.Tensor) -> str:
        z = torch.zeros(position.shape[0], self.space.latent_dim, dtype=position.dtype, device=position.device)
        return self.space.kernel_name(z)

    def make_params(self, step_size, metric=None):
        return latent.LatentParams(step_size, self.num_steps, self.volume_correction, self.energy_at_start)

    def search_step_size(self, state, target, metric, gen, guess):
        def one_step_accept(eps: float) -> float:
            params = latent.LatentParams(eps, 1, self.volume_correction, self.energy_at_start)
            return float(self.kernel.step(state, target, params, gen)[1].accept_prob.mean())

        return bracket_step_size(one_step_accept, guess)


class AEHMC(AutoEncodingMethod):
    """Auto-encoding HMC (Deep MCMC Alg. 1); see ``conf/method/aehmc.yaml`` for every option.

    energy_at_start    reconstructed | original (see bayesx.kernels.latent_hmc)
    volume_correction  multiply the acceptance ratio by the Gram volume ratio (Deep MCMC eq. 5-6);
                       false is the "approximate Bayes" variant of Deep MCMC sec. 3.3
    """

    name = "aehmc"

    def __init__(self, num_steps: int = 50, energy_at_start: str = "reconstructed",
                 trajectory_plot: bool | None = None, **kwargs):
        if energy_at_start not in latent.ENERGY_AT_START:
            raise BayesxError(f"method.energy_at_start must be one of {', '.join(latent.ENERGY_AT_START)}, "
                              f"got '{energy_at_start}'")
        if not (isinstance(num_steps, int) and num_steps >= 1):
            raise BayesxError(f"method.num_steps must be >= 1, got {num_steps}")
        if not (trajectory_plot is None or isinstance(trajectory_plot, bool)):
            raise BayesxError(f"method.trajectory_plot must be true or false or null, got {trajectory_plot!r}")
        self.num_steps, self.energy_at_start, self.trajectory_plot = num_steps, energy_at_start, trajectory_plot
        super().__init__(**kwargs)

    def make_presampler(self, **kwargs) -> HMC:
        return HMC(**{"num_steps": self.num_steps, **kwargs})

    def latent_sampler(self, space, target) -> LatentSampler:
        return LatentSampler(space, self.num_steps, self.volume_correction, self.energy_at_start,
                             **self.sampler_settings)

    def _record_training(self, result, report, choice) -> None:
        super()._record_training(result, report, choice)
        result.tags["energy_at_start"] = self.energy_at_start

    def _extra_artifacts(self, result, space, presamples, step_size, gen, folder) -> None:
        ae = space.ae
        wanted = self.trajectory_plot if self.trajectory_plot is not None else (ae.latent_dim == 2 and space.dim <= 3)
        if wanted and ae.latent_dim >= 2 and space.dim >= 2:
            figure = trajectory_figure(space, presamples, step_size, self.num_steps, gen, folder / "trajectory.png")
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
        potential, grad = space.potential_and_grad(z)
        points = [z]
        for _ in range(num_steps):
            z, p, potential, grad, _, _ = latent.latent_leapfrog(space, z, p, step_size, 1, potential, grad)
            points.append(z)
        path_latent = torch.cat(points)
        latent_pre, _ = space.encode_position(presamples)
        return plots.latent_trajectory(latent_pre.cpu().numpy(), path_latent.cpu().numpy(),
                                       presamples.cpu().numpy(), space.decode_position(path_latent).cpu().numpy(), path)
