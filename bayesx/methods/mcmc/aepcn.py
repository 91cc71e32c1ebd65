"""AE-pCN as a method of the runner (Deep MCMC sec. 4.2; kernel: bayesx.kernels.latent_pcn)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from bayesx.kernels import pcn
from bayesx.kernels.latent_hmc import LatentSpace
from bayesx.kernels.latent_pcn import LatentPCNParams, LatentProposal, LatentReference, make_kernel
from bayesx.methods.mcmc.autoencoding import AutoEncodingMethod, AutoEncodingSettings, LatentSamplerSettings
from bayesx.methods.mcmc.kernel import TransitionKernel
from bayesx.methods.mcmc.pcn import PCN, CrankNicolsonSampler, PCNSettings, require_gaussian_prior
from bayesx.settings import AtLeast, Between


class LatentPCNSampler(CrankNicolsonSampler):
    """The third stage of AE-pCN: the shared driver with the latent pCN kernel (h adapted in warm-up)."""

    name = "aepcn"

    def __init__(self, space: LatentSpace, reference: LatentReference, volume_correction: bool,
                 settings: LatentSamplerSettings | None = None, **options):
        super().__init__(settings, **options)
        self.proposal = LatentProposal(space, reference, volume_correction)

    def make_kernel(self) -> TransitionKernel:
        return TransitionKernel(make_kernel(self.proposal), lambda h, metric=None: LatentPCNParams(min(h, pcn.MAX_H)),
                                gradients=0, uses_gradients=False)


@dataclass(frozen=True)
class AEPCNSettings(AutoEncodingSettings):
    latent_dim: Annotated[int | Literal["auto"] | None, AtLeast(1)] = 441  # Deep MCMC's elliptic run
    ae: Literal["linear", "tanh", "pca"] = "pca"
    target_accept: Annotated[float, Between(0.0, 1.0)] = 0.25
    min_presamples_per_latent: Annotated[int, AtLeast(1)] = 2
    presample: PCNSettings = field(default_factory=PCNSettings)


class AEPCN(AutoEncodingMethod):
    """AE-pCN: pCN pre-samples, an auto-encoder, pCN in its latent space; see conf/method/aepcn.yaml."""

    Settings = AEPCNSettings
    name = "aepcn"
    presample_method = "pcn"

    def make_presampler(self, settings: PCNSettings) -> PCN:
        return PCN(settings)

    def check(self, target, n_chains: int) -> None:
        require_gaussian_prior(target, self.name)
        super().check(target, n_chains)

    def latent_sampler(self, space: LatentSpace, target) -> LatentPCNSampler:
        return LatentPCNSampler(space, LatentReference(space, target), self.settings.volume_correction,
                                self.settings.latent_sampler_settings())
