"""Delayed-acceptance pCN as a method of the runner (``method=dapcn``; kernel: bayesx.kernels.dapcn).

Proposals are screened on coarse likelihood levels (the model's PDE on coarser meshes) and only the
survivors pay the exact solve; the chain targets the exact posterior (Christen and Fox 2005;
Lykkegaard et al. 2023). ``proposal=pcn`` moves by pCN on the coarsest level. ``proposal=ae`` first
runs delayed-acceptance pCN to collect pre-samples, fits AE-pCN's linear auto-encoder (PCA by
default, Deep MCMC sec. 4.2) and then moves its latent directions and their complement by separate
pCN block updates (``latent_step_size``, and ``step_size`` adapted on the complement's moves):
AE-pCN's proposal, made exact. ``proposal=lis`` splits the prior the other way round, with no
pre-sampling: its subspace is the likelihood-informed one (:func:`likelihood_informed_directions`),
where the data constrain the field, moved with the small ``informed_step_size``; its complement,
which the data barely see, moves with the adapted h (on the elliptic model, independent prior draws).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Annotated, Literal

import numpy as np
import torch

from bayesx.errors import BayesxError
from bayesx.kernels import dapcn, pcn
from bayesx.kernels.common import Kernel
from bayesx.kernels.latent_hmc import LatentSpace
from bayesx.kernels.latent_pcn import decoder_linearization
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.family import Draws, Sampler
from bayesx.methods.mcmc.autoencoding import AutoEncodingMethod, AutoEncodingSettings, LatentSamplerSettings
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.pcn import CrankNicolsonSampler, PCNSettings, require_gaussian_prior
from bayesx.settings import AtLeast, Between, InvalidSetting, Positive

POOR_FINE_ACCEPT = 0.1  # below this, the coarse levels mislead the exact chain more than they help
LEVEL_STATS = ("first_stage_accept_rate", "fine_accept_rate", "fine_solves_per_iter", "coarse_solves_per_iter")


@dataclass(frozen=True)
class DASamplerSettings(LatentSamplerSettings):
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.25
    noise_block: Annotated[int, AtLeast(1)] = 64


@dataclass(frozen=True)
class LearningErrors:
    """DA-pCN's warm-up with the error model: the window adaptation, whose steps feed ``errors``, returning the error
    model it learned among what it tuned (so that a checkpoint stores it and a resumed run samples with it)."""

    adaptation: object
    errors: dapcn.ErrorModel

    def run(self, progress, density, gen, on_step=None):
        progress = self.adaptation.run(progress, density, gen, on_step=on_step)
        progress.tuned["error_model"] = self.errors.state()
        return progress


class DASampler(CrankNicolsonSampler):
    """The shared pCN driver around the delayed-acceptance kernel: h is the coarsest level's step, adapted
    to its acceptance (``accept_rate``); the exact chain's acceptance and solve counts are extra metrics.
    The params carry the levels' misfits from an ErrorModel (kernels.dapcn), built for the target at the start
    of a run; with ``error_model`` every warm-up step's fine solves feed it, and the coarse levels use its
    estimate from then on; it is frozen for sampling. Without, it stays plain."""

    Settings = DASamplerSettings
    name = "dapcn"

    def __init__(self, meshes: tuple[int, ...], subchain_lengths: tuple[int, ...],
                 proposal: dapcn.PriorProposal | dapcn.SubspaceProposal, latent_step_size: float | None = None,
                 error_model: bool = False, settings: DASamplerSettings | None = None, **options):
        super().__init__(settings, **options)
        self.meshes, self.subchain_lengths = meshes, subchain_lengths
        self.proposal, self.latent_step_size = proposal, latent_step_size
        self.learns_errors = error_model
        self.errors: dapcn.ErrorModel | None = None  # made by sample() for its target

    def make_kernel(self) -> TransitionKernel:
        functions = Kernel(partial(dapcn.init, meshes=self.meshes, proposal=self.proposal), dapcn.step,
                           dapcn.log_density)
        return TransitionKernel(functions, self.level_params, gradients=0, uses_gradients=False)

    def sample(self, target, inputs: RunInputs) -> Draws:
        """The driver's, with this run's error model: a resumed run's as its warm-up left it (the checkpoint's
        tuned ``error_model``)."""
        self.errors = dapcn.ErrorModel(*target.coarse_levels().sensor_data(), len(self.meshes))
        if inputs.resume is not None and "error_model" in inputs.resume.state.get("tuned", {}):
            self.errors.restore(inputs.resume.state["tuned"]["error_model"])
        return super().sample(target, inputs)

    def level_params(self, step_size, metric=None, **tuned) -> dapcn.DAParams:
        """The kernel's params: h on the coarsest level, the levels, the proposal and the error model's misfits
        (the tuned ``error_model`` is this run's, restored by :meth:`sample`)."""
        return dapcn.DAParams(min(step_size, pcn.MAX_H), self.meshes, self.subchain_lengths, self.proposal,
                              self.latent_step_size, self.settings.noise_block, self.errors.misfits())

    def make_adaptation(self, density, gen):
        adaptation = super().make_adaptation(density, gen)
        if not self.learns_errors:
            return adaptation
        return LearningErrors(replace(adaptation, step=self._learning_step), self.errors)

    def _learning_step(self, state, density, params, gen):
        """A warm-up step whose fine solves add their (exact, coarse) prediction pairs to the error model."""
        state, info, solves = dapcn.step_with_solves(state, density, params, gen)
        self.errors.add(solves.fine[solves.solved], solves.coarse[:, solves.solved])
        return state, info

    def extra_metrics(self, stats: dict[str, np.ndarray]) -> dict[str, float]:
        if not stats:
            return {}
        return {"first_stage_accept_rate": float(np.mean(stats["accept_prob"])),
                "fine_accept_rate": float(np.mean(stats["fine_accept_prob"])),
                "move_rate": float(np.mean(stats["accepted"])),
                "fine_solves_per_iter": float(np.mean(stats["n_fine_solves"])),
                "coarse_solves_per_iter": float(np.mean(stats["n_coarse_solves"])),
                **({"error_model_pairs": float(self.errors.count)} if self.learns_errors else {})}


@dataclass(frozen=True)
class DAPCNSettings(AutoEncodingSettings):
    """coarse_mesh        a mesh (or a list, for more levels) dividing the model's mesh, coarser than it
    subchain_length    coarse steps per proposal to the next level (one per coarse level, or one for all)
    proposal           pcn | ae (latent and complement block moves in palindromic order; pre-samples and a PCA fit first)
                       | lis (the same block moves in the likelihood-informed subspace and its complement)
    latent_step_size   h of the latent directions with proposal=ae (null: the adapted step_size)
    informed_dim       proposal=lis: how many likelihood-informed directions (at most the number of observations)
    informed_step_size proposal=lis: their h (null: the adapted step_size)
    error_model        correct the coarse levels by the adaptive error model learnt in warm-up (Cui et al.)
    """

    coarse_mesh: Annotated[int | tuple[int, ...], AtLeast(2)] = 10
    subchain_length: Annotated[int | tuple[int, ...], AtLeast(1)] = 5
    proposal: Literal["pcn", "ae", "lis"] = "pcn"
    latent_step_size: Annotated[float | None, Positive()] = 4.0
    informed_dim: Annotated[int, AtLeast(1)] = 25
    informed_step_size: Annotated[float | None, Positive()] = 0.5
    error_model: bool = True
    noise_block: Annotated[int, AtLeast(1)] = 64
    latent_dim: Annotated[int | Literal["auto"] | None, AtLeast(1)] = 441  # as AE-pCN
    ae: Literal["linear", "pca"] = "pca"  # a subspace proposal needs a linear decoder
    num_warmup: Annotated[int, AtLeast(0)] = 500
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.25
    min_presamples_per_latent: Annotated[int, AtLeast(1)] = 2
    presample: PCNSettings = field(default_factory=PCNSettings)

    def levels(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The coarse meshes, coarsest first, and each one's subchain length (given in coarse_mesh's order):
        its steps per proposal to the next finer level."""
        meshes = (self.coarse_mesh,) if isinstance(self.coarse_mesh, int) else tuple(self.coarse_mesh)
        lengths = self.subchain_length
        lengths = (lengths,) * len(meshes) if isinstance(lengths, int) else tuple(lengths)
        if len(lengths) != len(meshes):  # check() names this; keep the pairs as given
            return meshes, lengths
        pairs = sorted(zip(meshes, lengths))
        return tuple(m for m, _ in pairs), tuple(n for _, n in pairs)

    def check(self):
        super().check()
        meshes, lengths = self.levels()
        if not meshes:
            raise InvalidSetting("coarse_mesh", "is an empty list; name at least one coarser mesh, e.g. 10")
        if len(set(meshes)) < len(meshes):
            raise InvalidSetting("coarse_mesh", f"={list(self.coarse_mesh)} names a mesh twice; list each level once")
        if self.presample.init != "prior":
            raise InvalidSetting("presample.init", f"={self.presample.init}: the delayed-acceptance pre-sampler starts "
                                 "from the prior; use prior")
        if len(lengths) != len(meshes):
            raise InvalidSetting("subchain_length", f"={list(lengths)} has {len(lengths)} entries for {len(meshes)} "
                                 f"coarse levels; give one per level or a single number")

    def sampler_settings(self, source) -> DASamplerSettings:
        """The driver's settings from this block (the main chain) or from ``presample``."""
        return DASamplerSettings(**{k: getattr(source, k) for k in DASamplerSettings.__dataclass_fields__})


def likelihood_informed_directions(target, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The likelihood-informed subspace of Cui, Martin, Marzouk, Solonen and Spantini (2014, "Likelihood-informed
    dimension reduction for nonlinear inverse problems"), linearized at the prior mean. With J = dF/dq at q = 0
    (``target.prediction_jacobian``) and whitened coordinates v = L^-1 q, the Gauss-Newton Hessian of the misfit
    is H = (J L)^T (J L) / sigma^2; its leading eigenvectors, the right singular vectors V_r of J L / sigma, are
    the directions in which the data constrain the parameter most relative to the prior (eigenvalue > 1: more
    than the prior does). Returns V_r (dim, rank), orthonormal in whitened coordinates, and all of H's nonzero
    eigenvalues, largest first. The choice of directions only shapes the proposal: the chain stays exact."""
    _, noise_sd = target.coarse_levels().sensor_data()
    chol = target.gaussian_prior().prior_factor()
    jacobian = target.coarse_levels().prediction_jacobian(chol.new_zeros(target.dim), None)
    _, singular_values, vt = torch.linalg.svd(jacobian @ chol / noise_sd, full_matrices=False)
    return vt[:rank].T, singular_values ** 2


class DAPCN(AutoEncodingMethod):
    """Delayed-acceptance pCN (exact); see the module docstring and conf/method/dapcn.yaml."""

    Settings = DAPCNSettings
    name = "dapcn"
    presample_method = "dapcn"
    approximate_draws = False  # the coarse levels only screen: the chain targets the exact posterior
    summary_keys = (*LEVEL_STATS, "error_model_pairs", "latent_dim", "informed_dim", "informed_eigenvalue_min",
                    *Sampler.summary_keys)
    compare_keys = (*Sampler.compare_keys, "fine_solves_per_iter")

    def check(self, target, n_chains: int) -> None:
        levels = target.coarse_levels()
        if levels is None:
            raise BayesxError(f"method=dapcn needs a model with coarse likelihood levels ({type(target).__name__} "
                              f"has none); use model=elliptic, or method=pcn")
        require_gaussian_prior(target, self.name)
        meshes, _ = self.settings.levels()
        for mesh in meshes:
            levels.check_level(mesh, "coarse_mesh")
        if self.settings.proposal == "ae":
            super().check(target, n_chains)
        if self.settings.proposal == "lis":
            most = min(levels.sensor_data()[0].shape[0], target.dim)
            if self.settings.informed_dim > most:
                raise InvalidSetting("informed_dim", f"={self.settings.informed_dim} exceeds the rank of the misfit's "
                                     f"Gauss-Newton Hessian, at most {most} (the observations, or the dimension); "
                                     f"use at most {most}")

    def warnings(self, metrics: dict[str, float]) -> list[str]:
        out = super().warnings(metrics)
        fine = metrics.get("fine_accept_rate", 1.0)
        if fine < POOR_FINE_ACCEPT:
            out.append(f"fine_accept_rate = {fine:.2g}: the coarse levels are a poor model of the fine one, so most "
                       "proposals they pass are rejected; use a finer method.coarse_mesh (or add one: a list) or a "
                       "shorter method.subchain_length")
        return out

    def _sampler(self, proposal, settings: DASamplerSettings, latent_step_size=None) -> DASampler:
        meshes, lengths = self.settings.levels()
        return DASampler(meshes, lengths, proposal, latent_step_size, self.settings.error_model, settings)

    def make_presampler(self, settings: PCNSettings) -> DASampler:
        return self._sampler(dapcn.PriorProposal(), self.settings.sampler_settings(settings))

    def latent_sampler(self, space: LatentSpace, target) -> DASampler:
        _, directions = decoder_linearization(space)
        proposal = dapcn.SubspaceProposal.from_directions(target.gaussian_prior().prior_factor(), directions)
        return self._sampler(proposal, self.settings.sampler_settings(self.settings), self.settings.latent_step_size)

    def sample(self, target, inputs: RunInputs) -> Draws:
        """proposal=pcn: one delayed-acceptance chain; proposal=ae: pre-sample, fit, then the subspace proposal;
        proposal=lis: the likelihood-informed subspace proposal, one chain."""
        if self.settings.proposal == "ae":
            return super().sample(target, inputs)
        settings = self.settings.sampler_settings(self.settings)
        one_chain = RunInputs(inputs.initial, inputs.gen, inputs.progress, checkpoint=inputs.checkpoint,
                              resume=inputs.resume)
        if self.settings.proposal == "pcn":
            return self._sampler(dapcn.PriorProposal(), settings).sample(target, one_chain)
        rank = self.settings.informed_dim
        basis, eigenvalues = likelihood_informed_directions(target, rank)
        proposal = dapcn.SubspaceProposal.from_whitened_basis(target.gaussian_prior().prior_factor(), basis)
        out = self._sampler(proposal, settings, self.settings.informed_step_size).sample(target, one_chain)
        out.metrics["informed_dim"] = float(rank)
        out.metrics["informed_eigenvalue_min"] = float(eigenvalues[rank - 1])
        return out
