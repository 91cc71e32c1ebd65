"""The stages of a latent-space method (bayesx.methods.mcmc.autoencoding), as functions: the pre-samples and the
auto-encoder trained on them (:func:`presample_and_fit`, or :func:`restore` from a killed run's checkpoint), the
latent sampler's draws joined to them (:func:`join`), and the trained network saved as an artifact.

What the first two stages made is a checkpoint stage (:func:`fitted_state`, ``checkpoint/stage_training.pt``): the
pre-samples, the auto-encoder's architecture and weights with the standardization, their record in the run, and
the generator's state when they ended, so that a resumed run samples the latent space as the killed one did.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from bayesx.errors import BayesxError
from bayesx.kernels import latent_hmc as latent
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.family import Draws
from bayesx.nn.autoencoder import AutoEncoder, TrainReport, pca_error_curve, split, train_autoencoder

FITTED = "training"  # the checkpoint's stage after pre-sampling and training: the pre-samples and the network
AUTO_GROWTH = 1.25  # latent_dim=auto: grow the PCA-chosen size by this factor while the trained AE misses recon_tol
AUTO_TRIES = 6


def presample_and_fit(method, target, inputs: RunInputs, out: Draws) -> tuple[latent.LatentSpace, torch.Tensor] | None:
    """The first two stages: pre-samples and the auto-encoder trained on them, as (space, pre-samples), their
    record in ``out`` and, with a checkpoint, its stage file; None where the run was stopped while pre-sampling
    (``out`` then keeps the pre-samples as its draws)."""
    initial_position, gen = inputs.initial, inputs.gen
    out.tags["stopped_during"] = "presample"
    pre = method.presampler(initial_position.shape[0]).sample(target, RunInputs(
        initial_position, gen, inputs.progress, compile=inputs.compile, density_identity=inputs.density_identity))
    record_presamples(out, pre)
    if pre.interrupted:
        out.interrupted = True
        if pre.draws is not None:
            out.draws, out.sample_stats = pre.draws, pre.sample_stats
            out.tags["draws_are"] = f"{method.presample_method} pre-samples (the run stopped before latent sampling)"
        return None
    out.tags["stopped_during"] = "train"
    start = time.perf_counter()
    draws = pre.draws.to(initial_position.device, initial_position.dtype)
    space, report, choice = fit(method.settings, target, draws.reshape(-1, draws.shape[-1]), gen)
    out.timings["train_time_s"] = time.perf_counter() - start
    record_training(out, report, choice, method.settings.recon_tol, method.training_tags())
    if inputs.checkpoint is not None:
        inputs.checkpoint.stage(FITTED, fitted_state(out, space, draws, gen))
    return space, draws


def record_presamples(out: Draws, pre: Draws) -> None:
    """The pre-sampling run's times, health and gradients, and its backend, into the run's record."""
    start_time = sum(pre.timings.get(k, 0.0) for k in ("laplace_time_s", "pathfinder_time_s"))
    out.timings["presample_warmup_time_s"] = start_time + pre.timings["warmup_time_s"]
    out.timings["presample_time_s"] = out.timings["presample_warmup_time_s"] + pre.timings["sampling_time_s"]
    out.metrics.update({f"presample_{k}": v for k, v in pre.metrics.items()
                        if k in ("accept_rate", "step_size", "n_divergent")})
    out.metrics["n_grad_evals_presample"] = pre.metrics.get("n_grad_evals_warmup", 0.0) + pre.metrics.get(
        "n_grad_evals", 0.0)
    out.tags["kernels"] = pre.tags["kernels"]


def fit(cfg, target, draws: torch.Tensor, gen: torch.Generator):
    """Standardize the pre-samples, choose the latent size, train; returns the latent space, the training's
    report and how the size was chosen."""
    mean = draws.mean(0)
    scale = draws.std(0).clamp(min=1e-12)
    x = (draws - mean) / scale
    x_train, x_val = split(x, cfg.train.val_fraction, gen)
    dim = x.shape[1]
    d = cfg.resolved_latent_dim(dim)
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


def record_training(out: Draws, report: TrainReport, choice: str, recon_tol: float, tags: dict[str, str]) -> None:
    """The training's size, error and loss curves into the run's record, and a warning where the error is above
    ``recon_tol``."""
    out.metrics.update({"latent_dim": float(report.latent_dim), "recon_err": report.recon_err,
                        "ae_epochs": float(report.epochs)})
    out.tags.update({"latent_dim_choice": choice, **tags})
    out.traces["ae_train_loss"] = list(enumerate(report.train_loss))
    out.traces["ae_val_loss"] = list(enumerate(report.val_loss))
    if report.recon_err > recon_tol:
        out.warnings.append(f"auto-encoder reconstruction error {report.recon_err:.3g} is above "
                            f"method.recon_tol={recon_tol}: proposals miss part of the posterior; "
                            f"raise method.latent_dim (or use latent_dim=auto)")


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


def restore(saved: dict, target, inputs: RunInputs, out: Draws) -> tuple[latent.LatentSpace, torch.Tensor]:
    """The first two stages as a killed run's checkpoint kept them (:func:`fitted_state`), the generator where they
    left it unless the latent sampler's own checkpoint takes it further."""
    on = {"device": inputs.initial.device, "dtype": inputs.initial.dtype}
    ae = AutoEncoder(saved["dim"], saved["latent_dim"], saved["arch"], saved["hidden"], **on)
    ae.load_state_dict(saved["state_dict"])
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


def join(out: Draws, sampled: Draws, space: latent.LatentSpace) -> None:
    """The latent sampler's draws, metrics and times into the run's, beside the first two stages'."""
    out.draws, out.sample_stats, out.interrupted = sampled.draws, sampled.sample_stats, sampled.interrupted
    backends = (out.tags["kernels"], sampled.tags["kernels"])
    out.tags.update(sampled.tags)
    out.tags["kernels"] = backends[0] if backends[0] == backends[1] else "presample={},sampling={}".format(*backends)
    out.metrics.update(sampled.metrics)
    if "log_volume" in sampled.sample_stats:
        out.metrics["log_volume_mean"] = float(sampled.sample_stats["log_volume"].mean())
    out.timings["latent_warmup_time_s"] = sampled.timings["warmup_time_s"]
    out.timings["warmup_time_s"] = out.timings["presample_warmup_time_s"] + sampled.timings["warmup_time_s"]
    out.timings["sampling_time_s"] = sampled.timings["sampling_time_s"]
    out.fitted["inverse_mass"] = (space.scale**2).detach().cpu()


def save_autoencoder(out: Draws, space: latent.LatentSpace, folder: Path) -> None:
    """The trained auto-encoder and its standardization as the run's artifact ``autoencoder.pt``."""
    ae: AutoEncoder = space.ae
    path = folder / "autoencoder.pt"
    torch.save({"arch": ae.arch, "latent_dim": ae.latent_dim, "hidden": ae.hidden, "state_dict": ae.state_dict(),
                "mean": space.mean.cpu(), "scale": space.scale.cpu()}, path)
    out.artifacts.setdefault("autoencoder", []).append(path)
