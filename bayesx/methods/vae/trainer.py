"""The VAE training methods of the ``method`` config group: vae, hvi (and rmhvi, dppvae).

A method builds its bound (bayesx.methods.vae.bounds) for the model and trains both by Adam on minibatches,
maximizing the mean bound. Per epoch it records the train and test ELBO (stepped metrics) and the
epoch time; at the end the importance-sampling test_nll (``eval.k`` samples), sample and
reconstruction grids and the weights. Optimizer settings left null take the architecture's
published values (``TRAINING``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import torch

from bayesx.errors import RunInterrupted
from bayesx.methods.base import RunInputs
from bayesx.methods.vae.family import TrainedModel, Trainer
from bayesx.methods.common.progress import progress_bar
from bayesx.settings import AtLeast, Positive, Settings
from bayesx.methods.vae import bounds, evaluate, minority
from bayesx.methods.vae.model import VAEModel

# Zhang (2018) sec. 5: FC MNIST Adam 3e-3, x0.95 every 10 epochs, 50 epochs, batch 64; conv MNIST Adam 2e-4,
# 300 epochs; conv CIFAR-10 Adam 1e-4 (Zhang (2018) gives no epoch count for CIFAR-10: 100 is our choice)
TRAINING = {
    "fc": {"epochs": 50, "lr": 3e-3, "batch_size": 64, "lr_decay": 0.95, "lr_decay_every": 10},
    "conv": {"epochs": 300, "lr": 2e-4, "batch_size": 64, "lr_decay": 1.0, "lr_decay_every": 10},
    "conv_cifar": {"epochs": 100, "lr": 1e-4, "batch_size": 64, "lr_decay": 1.0, "lr_decay_every": 10},
}


@dataclass(frozen=True)
class EvalSettings(Settings):
    """The final evaluation: importance samples per image, how many test images (null: all)."""

    k: Annotated[int, AtLeast(1)] = 1000  # importance samples per test image
    n_test: Annotated[int | None, AtLeast(1)] = None
    batch_size: Annotated[int, AtLeast(1)] = 100
    chunk: Annotated[int, AtLeast(1)] = 100
    grid: Annotated[int, AtLeast(1)] = 64  # images in the sample and reconstruction grids


@dataclass(frozen=True)
class VariationalSettings(Settings):
    """Optimizer settings left null take the architecture's published values (``TRAINING``)."""

    epochs: Annotated[int | None, AtLeast(1)] = None
    lr: Annotated[float | None, Positive()] = None
    batch_size: Annotated[int | None, AtLeast(1)] = None
    lr_decay: Annotated[float | None, Positive()] = None
    lr_decay_every: Annotated[int | None, AtLeast(1)] = None
    test_every: Annotated[int, AtLeast(1)] = 1
    eval: EvalSettings = field(default_factory=EvalSettings)


class VariationalMethod(Trainer):
    """Shared training loop; subclasses provide ``make_bound(model)``."""

    Settings = VariationalSettings
    name = "vae"
    resumable = True  # weights, optimizer, schedule and random states are saved after every epoch

    def make_bound(self, model: VAEModel) -> torch.nn.Module:
        return bounds.VAEBound()

    def training(self, model: VAEModel) -> dict:
        """The optimizer settings: the given ones, the architecture's published values for the rest."""
        given = {k: getattr(self.settings, k) for k in TRAINING[model.arch]}
        return {k: (v if v is not None else TRAINING[model.arch][k]) for k, v in given.items()}

    # --- training -------------------------------------------------------------------------------------
    def train(self, model: VAEModel, inputs: RunInputs, epoch_callback=None) -> TrainedModel:
        """Train; ``epoch_callback(epoch, training_seconds_so_far)``, where given, runs after each epoch (its
        own time is not counted as training time). Each epoch's state and metrics go to ``inputs.checkpoint``;
        with ``inputs.resume`` (a killed run's last epoch) training continues after it, with its random states."""
        gen, progress, checkpoint, resume = inputs.gen, inputs.progress, inputs.checkpoint, inputs.resume
        torch.manual_seed(int(gen.initial_seed()))  # reparameterization noise comes from torch's default RNG
        self._snapshot = None  # weights of the last finished epoch of this fit (not of an earlier one)
        settings = self.training(model)
        bound = self.make_bound(model)
        params = list(model.parameters()) + list(bound.parameters())
        optim = torch.optim.Adam(params, lr=settings["lr"])
        schedule = torch.optim.lr_scheduler.StepLR(optim, settings["lr_decay_every"], gamma=settings["lr_decay"])
        x_train, _ = model.tensors("train")
        x_test, _ = model.tensors("test")
        stochastic = getattr(model.data, "binarize", "none") == "stochastic"
        out = TrainedModel(model=model, traces={"train_elbo": [], "test_elbo": [], "epoch_time_s": []})
        out.tags.update({"bound": bound.name, "binarize": getattr(model.data, "binarize", "none")})
        for key, value in settings.items():
            out.tags[f"train_{key}"] = str(value)
        n, batch = x_train.shape[0], settings["batch_size"]
        first_epoch = 0
        if resume is not None:
            saved = resume.state
            model.load_state_dict(saved["model"])
            bound.load_state_dict(saved["bound"])
            optim.load_state_dict(saved["optim"])
            schedule.load_state_dict(saved["schedule"])
            torch.set_rng_state(saved["torch_rng"])
            gen.set_state(saved["gen"])
            out.traces = {k: [tuple(p) for p in v] for k, v in saved["traces"].items()}
            first_epoch = int(saved["epoch"])
            out.tags["resumed_at_epoch"] = str(first_epoch)
        start = time.perf_counter()
        epoch_bar = progress_bar(settings["epochs"], f"{self.name} epochs", progress, "epoch")
        epoch_bar.update(first_epoch)
        epoch = first_epoch
        try:
            for epoch in range(first_epoch, settings["epochs"]):
                t0 = time.perf_counter()
                data = torch.bernoulli(x_train, generator=_cpu_or(gen, x_train)) if stochastic else x_train
                order = torch.randperm(n, device=x_train.device)
                total = 0.0
                model.train(), bound.train()
                for b, first in enumerate(range(0, n, batch)):
                    xb = data[order[first:first + batch]]
                    value = bound.objective(model, xb).mean()
                    if not torch.isfinite(value):
                        out.error = (f"NaN loss at epoch {epoch + 1}, batch {b + 1}: training stopped (weights of "
                                     f"the last finished epoch are saved); lower method.lr "
                                     f"(now {settings['lr']:g})")
                        raise _Stop
                    optim.zero_grad()
                    (-value).backward()
                    optim.step()
                    total += float(value.detach()) * xb.shape[0]
                schedule.step()
                epoch_bar.update(1)
                seconds = time.perf_counter() - t0
                out.traces["train_elbo"].append((epoch + 1, total / n))
                out.traces["epoch_time_s"].append((epoch + 1, seconds))
                if (epoch + 1) % self.settings.test_every == 0 or epoch + 1 == settings["epochs"]:
                    out.traces["test_elbo"].append((epoch + 1, evaluate.test_elbo(model, bound, x_test)))
                    epoch_bar.set_postfix(train=f"{total / n:.1f}", test=f"{out.traces['test_elbo'][-1][1]:.1f}")
                self._snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
                if checkpoint is not None:
                    checkpoint.epoch(epoch + 1, {
                        "model": model.state_dict(), "bound": bound.state_dict(), "optim": optim.state_dict(),
                        "schedule": schedule.state_dict(), "torch_rng": torch.get_rng_state(),
                        "gen": gen.get_state(), "traces": out.traces,
                    }, {name: points[-1][1] for name, points in out.traces.items()
                        if points and points[-1][0] == epoch + 1})
                if epoch_callback is not None:
                    trained = sum(t for _, t in out.traces["epoch_time_s"])
                    epoch_callback(epoch + 1, trained)
        except _Stop:
            self._restore(model)
        except (KeyboardInterrupt, RunInterrupted):
            out.interrupted = True
            out.tags["stopped_during"] = f"training (epoch {epoch + 1})"
        finally:
            epoch_bar.close()
        out.timings["train_time_s"] = time.perf_counter() - start
        epochs_done = len(out.traces["train_elbo"])
        out.metrics["epochs"] = float(epochs_done)
        if epochs_done:
            out.metrics["train_elbo"] = out.traces["train_elbo"][-1][1]
            out.metrics["time_per_epoch_s"] = sum(t for _, t in out.traces["epoch_time_s"]) / epochs_done
        if out.traces["test_elbo"]:
            out.metrics["test_elbo"] = out.traces["test_elbo"][-1][1]
        if not out.interrupted and out.error is None and epochs_done:
            self._final_evaluation(model, bound, x_test, out, progress)
        if inputs.artifact_dir is not None and epochs_done:
            self._write_artifacts(model, bound, x_test, Path(inputs.artifact_dir), out)
        return out

    def _restore(self, model: VAEModel) -> None:
        snapshot = getattr(self, "_snapshot", None)
        if snapshot is not None:
            model.load_state_dict(snapshot)

    def _final_evaluation(self, model, bound, x_test, out: TrainedModel, progress) -> None:
        x = x_test[: self.settings.eval.n_test] if self.settings.eval.n_test else x_test
        start = time.perf_counter()
        bar = progress_bar(x.shape[0], f"test_nll (k={self.settings.eval.k})", progress, "img")
        try:
            ev = self.settings.eval
            out.metrics["test_nll"] = evaluate.test_nll(model, bound, x, ev.k, ev.batch_size, ev.chunk, bar)
        finally:
            bar.close()
        out.metrics["eval_k"] = float(self.settings.eval.k)
        out.metrics["eval_n_test"] = float(x.shape[0])
        minor = getattr(model.data, "minor_class", None)
        if minor is not None:  # two classes at an imbalance: how much of what it generates is the minor class
            out.metrics.update(minority.minor_share(model, minor))
        out.timings["eval_time_s"] = time.perf_counter() - start

    def _write_artifacts(self, model, bound, x_test, folder: Path, out: TrainedModel) -> None:
        from bayesx.methods.vae import plots

        weights = folder / "weights.pt"
        torch.save({"model": model.state_dict(), "bound": bound.state_dict(), "arch": model.arch,
                    "latent_dim": model.latent_dim, "image_shape": model.image_shape, "method": self.name}, weights)
        out.artifacts.setdefault("weights", []).append(weights)
        model.eval()
        with torch.no_grad():
            z = torch.randn(self.settings.eval.grid, model.latent_dim, device=model.device, dtype=model.dtype)
            samples = torch.sigmoid(model.decoder(z))
            x = x_test[: self.settings.eval.grid]
            recon = torch.sigmoid(model.decoder(model.encode(x)[0]))
        out.artifacts.setdefault("plots", []).extend([
            plots.image_grid(samples.float().cpu().numpy(), folder / "samples.png", "decoder means of z ~ N(0, I)"),
            plots.reconstructions(x.float().cpu().numpy(), recon.float().cpu().numpy(), folder / "reconstructions.png"),
        ])


class _Stop(Exception):
    """Internal: leave the training loop after a NaN loss."""


def _cpu_or(gen: torch.Generator, like: torch.Tensor) -> torch.Generator | None:
    """The run's generator when it lives on the tensor's device (else torch's default RNG)."""
    return gen if gen.device == like.device else None


class VAE(VariationalMethod):
    """The reparameterized ELBO (Kingma and Welling 2014)."""

    name = "vae"
