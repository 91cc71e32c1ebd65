"""The trainer family (the VAEs: vae, hvi, rmhvi, flowvae, dppvae).

A trainer's one hook is ``train(model, inputs) -> TrainedModel``: train a model that is trained, not
sampled (``capabilities.posterior`` False), saving each epoch to ``inputs.checkpoint`` and continuing
from ``inputs.resume`` where given. Its output has the trained model, per-epoch traces (train and
test ELBO), metrics (test_nll, ...) and files (weights, image grids); there are no draws.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import final

import torch

from bayesx.methods.base import Method, RunInputs
from bayesx.result import Outcome, Result


@dataclass
class TrainedModel(Outcome):
    """A trainer's output: the model (trained in place; None where the trainer did not keep it) and the
    run's :class:`Outcome`."""

    model: torch.nn.Module | None = None


class Trainer(Method):
    """A method that trains a model; subclasses implement :meth:`train`."""

    family = "trainer"
    hook = "train"
    summary_keys = ("test_elbo", "test_nll", "train_elbo", "generated_minor_share", "minor_classifier_accuracy",
                    "epochs", "time_per_epoch_s", "eval_time_s", "train_time_s")
    compare_keys = ("test_elbo", "test_nll", "train_time_s")

    def initial_points(self, target, n_chains: int, gen: torch.Generator) -> None:
        return None

    @abstractmethod
    def train(self, model, inputs: RunInputs) -> TrainedModel:
        """Train the model (saving each epoch to ``inputs.checkpoint``; from ``inputs.resume``'s epoch on)."""

    @final
    def infer(self, target, inputs: RunInputs) -> Result:
        return Result(**self.train(target, inputs).outcome())
