"""AE-pCN as a method of the runner (Deep MCMC sec. 4.2; kernel: bayesx.kernels.latent_pcn)."""

from __future__ import annotations

from bayesx.kernels import pcn
from bayesx.kernels.latent_hmc import LatentSpace
from bayesx.kernels.latent_pcn import LatentPCNParams, LatentProposal, LatentReference, make_kernel
from bayesx.methods.mcmc.autoencoding import AutoEncodingMethod
from bayesx.methods.mcmc.pcn import PCN, CrankNicolsonSampler, require_gaussian_prior


class LatentPCNSampler(CrankNicolsonSampler):
    """The third stage of AE-pCN: the shared driver with the latent pCN kernel (h adapted in warm-up)."""

    name = "aepcn"

    def __init__(self, space: LatentSpace, reference: LatentReference, volume_correction: bool, **kwargs):
        super().__init__(mass="identity", init="prior", **kwargs)
        self.kernel = make_kernel(LatentProposal(space, reference, volume_correction))

    def make_params(self, step_size, metric=None):
        return LatentPCNParams(min(step_size, pcn.MAX_H))


class AEPCN(AutoEncodingMethod):
    """AE-pCN: pCN pre-samples, an auto-encoder, pCN in its latent space; see conf/method/aepcn.yaml."""

    name = "aepcn"
    presample_method = "pcn"

    def __init__(self, latent_dim: int | str | None = 441, ae: str = "pca", target_accept: float = 0.25,
                 min_presamples_per_latent: int = 2, **kwargs):
        super().__init__(latent_dim=latent_dim, ae=ae, target_accept=target_accept,
                         min_presamples_per_latent=min_presamples_per_latent, **kwargs)

    def make_presampler(self, **kwargs) -> PCN:
        return PCN(**kwargs)

    def check(self, target, n_chains: int) -> None:
        require_gaussian_prior(target, self.name)
        super().check(target, n_chains)

    def latent_sampler(self, space: LatentSpace, target) -> LatentPCNSampler:
        return LatentPCNSampler(space, LatentReference(space, target), self.volume_correction, **self.sampler_settings)
