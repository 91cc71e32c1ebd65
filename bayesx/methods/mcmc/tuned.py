"""A trajectory length tuned in warm-up, kept as a value a checkpoint stores (ChEES's T, MAMS's L).

A sampler whose warm-up object tunes ``trajectory_length`` mixes this in before :class:`MCMCMethod` and builds its
warm-up through :meth:`TunedTrajectoryLength.adapting`; the length is then the warm-up's while one runs or has run,
else the one a killed run's checkpoint kept (``MCMCMethod.tuned`` / ``use_tuned``), so ``resume=`` continues with it.
"""

from __future__ import annotations


class TunedTrajectoryLength:
    _adaptation = None  # this run's warm-up, which holds the length it tunes
    _restored_length: float | None = None  # the length from a killed run's checkpoint

    def adapting(self, adaptation):
        """Make ``adaptation`` (whose ``trajectory_length`` warm-up tunes) this run's warm-up, and return it."""
        self._adaptation, self._restored_length = adaptation, None
        return adaptation

    def tuned_length(self) -> float | None:
        """The length as warm-up tunes (or tuned) it, else as a checkpoint kept it; None before either."""
        adapted = self._adaptation
        if adapted is not None and adapted.trajectory_length:
            return float(adapted.trajectory_length)
        return self._restored_length

    def tuned(self) -> dict[str, float]:
        length = self.tuned_length()
        return {} if length is None else {"trajectory_length": length}

    def use_tuned(self, values: dict[str, float]) -> None:
        if "trajectory_length" in values:
            self._restored_length = float(values["trajectory_length"])
