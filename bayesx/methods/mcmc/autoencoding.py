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
from pathlib import Path

import torch

from bayesx.errors import BayesxError, RunInterrupted
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.base import Sampler
from bayesx.methods.mcmc.sampler import MCMCMethod
from bayesx.nn.autoencoder import (
    ARCHITECTURES,
    AutoEncoder,
    TrainReport,
    TrainSettings,
    pca_error_curve,
    split,
    train_autoencoder,
)
from bayesx.result import Result

AUTO_GROWTH = 1.25  # latent_dim=auto: grow the PCA-chosen size by this factor while the trained AE misses recon_tol
AUTO_TRIES = 6


def settings_or_error(cls, options: dict, where: str):
    """cls(**options), with an unknown option reported as one line naming ``where``."""
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise BayesxError(f"{where} does not take the option '{unknown[0]}'; its options are {', '.join(sorted(known))}")
    return cls(**options)


class AutoEncodingMethod(Sampler):
    """The three stages every latent-space method shares (pre-sample, train, sample in the latent
    space), each timed; subclasses say which sampler pre-samples and which samples the latent space.

    latent_dim         int, null (about D/10, as in Deep MCMC) or "auto" (the smallest size whose
                       validation reconstruction error is below recon_tol)
    ae                 linear | tanh | pca
    volume_correction  include the Jacobian (volume) terms in the acceptance ratio
    presample          settings of the pre-sampling run; num_draws is the total over chains
    """

    name = "latent"
    summary_keys = ("latent_dim", "recon_err", "presample_time_s", "train_time_s", *Sampler.summary_keys)
    approximate_draws = True  # with latent_dim < D: the runner reports the error against a reference posterior
    presample_method = "hmc"  # named in error messages

    def __init__(self, latent_dim: int | str | None = None, ae: str = "linear", hidden: int | None = None,
                 recon_tol: float = 0.1, volume_correction: bool = True, num_warmup: int = 200,
                 num_draws: int = 1000, step_size: float | None = None, target_accept: float = 0.65, thin: int = 1,
                 min_presamples_per_latent: int = 10, presample: dict | None = None, train: dict | None = None):
        if ae not in ARCHITECTURES:
            raise BayesxError(f"method.ae must be one of {', '.join(ARCHITECTURES)}, got '{ae}'")
        if latent_dim is not None and latent_dim != "auto" and not (
                isinstance(latent_dim, int) and not isinstance(latent_dim, bool) and latent_dim >= 1):
            raise BayesxError(f"method.latent_dim must be an integer >= 1, null (about dim/10) or auto, got {latent_dim!r}")
        if not 0.0 < recon_tol < 1.0:
            raise BayesxError(f"method.recon_tol must lie in (0, 1) (a relative squared error), got {recon_tol}")
        if hidden is not None and not (isinstance(hidden, int) and not isinstance(hidden, bool) and hidden >= 1):
            raise BayesxError(f"method.hidden must be an integer >= 1 or null (2 x latent_dim), got {hidden!r}")
        if not isinstance(volume_correction, bool):
            raise BayesxError(f"method.volume_correction must be true or false, got {volume_correction!r}")
        self.latent_dim, self.ae, self.hidden, self.recon_tol = latent_dim, ae, hidden, recon_tol
        self.volume_correction, self.min_presamples_per_latent = volume_correction, min_presamples_per_latent
        self.sampler_settings = dict(num_warmup=num_warmup, num_draws=num_draws, step_size=step_size,
                                     target_accept=target_accept, thin=thin)
        MCMCMethod(**self.sampler_settings)  # validates the shared settings now, before any run starts
        self.presample = dict(presample or {})
        self.presample_draws = self.presample.pop("num_draws", 1000)
        if not isinstance(self.presample_draws, int) or self.presample_draws < 2:
            raise BayesxError(f"method.presample.num_draws must be an integer >= 2, got {self.presample_draws!r}")
        self.presampler(1)  # validates the pre-sampling settings now, before any run starts
        self.train = settings_or_error(TrainSettings, train or {}, "method.train")

    # --- what a subclass provides ----------------------------------------------------------------------
    def make_presampler(self, **kwargs) -> MCMCMethod:
        raise NotImplementedError

    def latent_sampler(self, space: latent.LatentSpace, target) -> MCMCMethod:
        raise NotImplementedError

    def presampler(self, n_chains: int) -> MCMCMethod:
        """The pre-sampling run, num_draws split over the chains; errors name method.presample."""
        kwargs = {**self.presample, "num_draws": math.ceil(self.presample_draws / n_chains)}
        try:
            return self.make_presampler(**kwargs)
        except BayesxError as exc:
            raise BayesxError(str(exc).replace("method.", "method.presample.", 1)) from None
        except TypeError as exc:
            name = str(exc).split("argument")[-1].strip(" '")
            raise BayesxError(f"method.presample does not take the option '{name}'; "
                              f"see conf/method/{self.name}.yaml for its options") from None

    # --- checks that need the target, made before a run is recorded ---------------------------------
    def resolved_latent_dim(self, dim: int) -> int | None:
        if self.latent_dim == "auto":
            return None
        return max(1, round(dim / 10)) if self.latent_dim is None else int(self.latent_dim)

    def check(self, target, n_chains: int) -> None:
        d = self.resolved_latent_dim(target.dim)
        if d is not None and d > target.dim:
            raise BayesxError(f"method.latent_dim={d} exceeds the target's dimension {target.dim}; "
                              f"set method.latent_dim to at most {target.dim}")
        total = math.ceil(self.presample_draws / n_chains) * n_chains
        need = self.min_presamples_per_latent * (d or 1)
        if total < need:
            raise BayesxError(f"too few pre-samples to train the auto-encoder: {total} draws for latent_dim={d or 1} "
                              f"(need at least {self.min_presamples_per_latent} per latent dimension, {need}); "
                              f"raise method.presample.num_draws or lower method.latent_dim")

    # --- the three stages ------------------------------------------------------------------------------
    def run(self, target, initial_position: torch.Tensor, gen: torch.Generator, progress: bool | None = None,
            artifact_dir: Path | None = None) -> Result:
        n_chains, dim = initial_position.shape
        self.check(target, n_chains)
        result = Result()
        stage = "presample"
        try:
            pre = self.presampler(n_chains).run(target, initial_position, gen, progress)
            result.timings["presample_warmup_time_s"] = pre.timings.get("laplace_time_s", 0.0) + pre.timings["warmup_time_s"]
            result.timings["presample_time_s"] = result.timings["presample_warmup_time_s"] + pre.timings["sampling_time_s"]
            result.metrics.update({f"presample_{k}": v for k, v in pre.metrics.items()
                                   if k in ("accept_rate", "step_size", "n_divergent")})
            if pre.interrupted:
                raise RunInterrupted("interrupted during pre-sampling")

            stage = "train"
            start = time.perf_counter()
            draws = pre.draws.to(initial_position.device, initial_position.dtype)
            space, report, choice = self._fit(target, draws.reshape(-1, dim), gen)
            result.timings["train_time_s"] = time.perf_counter() - start
            self._record_training(result, report, choice)

            stage = "sampling"
            sampled = self.latent_sampler(space, target).run(target, draws[:, -1], gen, progress)
        except (KeyboardInterrupt, RunInterrupted):
            result.interrupted = True
            result.tags["stopped_during"] = stage
            if stage == "presample" and "pre" in locals() and pre.draws is not None:
                result.draws, result.sample_stats = pre.draws, pre.sample_stats
                result.tags["draws_are"] = f"{self.presample_method} pre-samples (the run stopped before latent sampling)"
            return result

        result.draws, result.sample_stats, result.interrupted = sampled.draws, sampled.sample_stats, sampled.interrupted
        result.tags.update(sampled.tags)
        stages = (pre.tags["kernels"], sampled.tags["kernels"])
        result.tags["kernels"] = stages[0] if stages[0] == stages[1] else "presample={},sampling={}".format(*stages)
        result.metrics.update(sampled.metrics)
        result.metrics["n_grad_evals_presample"] = pre.metrics.get("n_grad_evals_warmup", 0.0) + pre.metrics.get(
            "n_grad_evals", 0.0)
        if "log_volume" in sampled.sample_stats:
            result.metrics["log_volume_mean"] = float(sampled.sample_stats["log_volume"].mean())
        result.timings["latent_warmup_time_s"] = sampled.timings["warmup_time_s"]
        result.timings["warmup_time_s"] = result.timings["presample_warmup_time_s"] + sampled.timings["warmup_time_s"]
        result.timings["sampling_time_s"] = sampled.timings["sampling_time_s"]
        result.fitted["inverse_mass"] = (space.scale**2).detach().cpu()
        if artifact_dir is not None:
            self._write_artifacts(result, space, draws.reshape(-1, dim), sampled.metrics.get("step_size", 0.1),
                                  gen, Path(artifact_dir))
        return result

    def _fit(self, target, draws: torch.Tensor, gen: torch.Generator):
        """Standardize the pre-samples, choose the latent size, train; returns the latent space."""
        mean = draws.mean(0)
        scale = draws.std(0).clamp(min=1e-12)
        x = (draws - mean) / scale
        x_train, x_val = split(x, self.train.val_fraction, gen)
        dim = x.shape[1]
        d = self.resolved_latent_dim(dim)
        choice = "fixed" if isinstance(self.latent_dim, int) else "default (dim/10)"
        if d is None:  # auto: the PCA error curve gives the smallest candidate, training confirms it
            curve = pca_error_curve(x_train, x_val)
            below = (curve <= self.recon_tol).nonzero()
            d = int(below[0]) + 1 if below.numel() else dim
            choice = f"auto (recon_tol={self.recon_tol})"
        for _ in range(AUTO_TRIES):
            ae, report = train_autoencoder(x_train, x_val, d, self.ae, self.train, gen, self.hidden)
            if self.latent_dim != "auto" or report.recon_err <= self.recon_tol or d == dim:
                break
            d = min(dim, math.ceil(d * AUTO_GROWTH))
        if not report.recon_err <= self.train.max_recon_err:
            raise BayesxError(f"the auto-encoder failed to train: validation reconstruction error "
                              f"{report.recon_err:.3g} > method.train.max_recon_err={self.train.max_recon_err}; "
                              f"raise method.latent_dim, method.train.max_epochs or method.presample.num_draws")
        return latent.LatentSpace(target, ae, mean, scale), report, choice

    def _record_training(self, result: Result, report: TrainReport, choice: str) -> None:
        result.metrics.update({"latent_dim": float(report.latent_dim), "recon_err": report.recon_err,
                               "ae_epochs": float(report.epochs)})
        result.tags.update({"latent_dim_choice": choice, "ae": self.ae,
                            "volume_correction": str(self.volume_correction).lower()})
        result.traces["ae_train_loss"] = list(enumerate(report.train_loss))
        result.traces["ae_val_loss"] = list(enumerate(report.val_loss))
        if report.recon_err > self.recon_tol:
            result.warnings.append(f"auto-encoder reconstruction error {report.recon_err:.3g} is above "
                                   f"method.recon_tol={self.recon_tol}: proposals miss part of the posterior; "
                                   f"raise method.latent_dim (or use latent_dim=auto)")

    def _write_artifacts(self, result: Result, space: latent.LatentSpace, presamples: torch.Tensor, step_size: float,
                         gen: torch.Generator, folder: Path) -> None:
        ae: AutoEncoder = space.ae
        path = folder / "autoencoder.pt"
        torch.save({"arch": ae.arch, "latent_dim": ae.latent_dim, "hidden": ae.hidden, "state_dict": ae.state_dict(),
                    "mean": space.mean.cpu(), "scale": space.scale.cpu()}, path)
        result.artifacts.setdefault("autoencoder", []).append(path)
        self._extra_artifacts(result, space, presamples, step_size, gen, folder)

    def _extra_artifacts(self, result, space, presamples, step_size, gen, folder) -> None:
        pass
