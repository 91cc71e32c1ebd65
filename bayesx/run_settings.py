"""The top-level options of a run (``conf/config.yaml``) and of the device and tracking groups, as
bayesx.settings dataclasses: checked once, before anything is built."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Annotated, Literal

from omegaconf import DictConfig, OmegaConf

from bayesx.errors import BayesxError
from bayesx.settings import AtLeast, Between, Positive, Settings, configure


SEED_MAX = 2**63 - 1
"""The largest seed: torch's global generator takes at most a signed 64-bit integer (a larger one stopped the run
with "Overflow when unpacking long long"), so ``seed=99999999999999999999`` is refused in one line naming the range."""
Seed = Annotated[int, Between(0, SEED_MAX, closed=True)]


@dataclass(frozen=True)
class PlotSettings(Settings):
    n_coords: Annotated[int, AtLeast(0)] = 4  # trace and marginal plots of the lowest-ESS coordinates; 0: none


@dataclass(frozen=True)
class ReferenceSettings(Settings):
    """The cached NUTS reference posterior (bayesx.methods.reference)."""

    enabled: bool | None = None  # null: on for approximate draws on models without exact moments
    num_warmup: Annotated[int, AtLeast(0)] = 500
    num_draws: Annotated[int, AtLeast(4)] = 500  # per chain
    n_chains: Annotated[int, AtLeast(1)] = 4
    max_tree_depth: Annotated[int, AtLeast(1)] = 10
    seed: Seed = 12345


@dataclass(frozen=True)
class SweepSettings(Settings):
    """What a tuning sweeper (hydra/sweeper=optuna) optimizes: each job returns this metric of its run
    (NaN when the run failed or lacks it); the direction is the sweeper's (hydra.sweeper.direction)."""

    objective: str | None = None  # e.g. ess_bulk_min_per_s, test_lpd, elbo_final


@dataclass(frozen=True)
class RunSettings(Settings):
    seed: Seed = 0
    n_chains: Annotated[int, AtLeast(1)] = 4
    experiment_name: str = "bayesx"
    run_name: str | None = None
    progress: bool | None = None  # null: progress bars only on a terminal
    plots: PlotSettings = field(default_factory=PlotSettings)
    save_draws: bool = True
    checkpoint_every: Annotated[int, AtLeast(0)] = 250  # MCMC: save the draws every N kept draws, VAE: every epoch (bayesx.store.checkpoint); 0: off
    reference: ReferenceSettings = field(default_factory=ReferenceSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    resume: str | None = None  # the id of a killed MCMC run to continue into the same MLflow run


@dataclass(frozen=True)
class DeviceSettings(Settings):
    name: str = "cpu"  # cpu | cuda | cuda:N
    dtype: Literal["auto", "float32", "float64"] = "auto"  # auto: float32 on a GPU, the model's cpu_dtype on a CPU
    num_threads: Annotated[int | None, AtLeast(1)] = None  # torch intra-op threads; null: torch's default
    # compile densities without a hand-written native form for the C kernels (bayesx.kernels.backend):
    # auto (runs long enough to repay it), always, never; null: $BAYESX_COMPILE, else auto
    compile: Literal["auto", "always", "never"] | None = None

    def compile_policy(self) -> str:
        """The compile policy the runner passes to the method (bayesx.kernels.backend.prepare): the setting, else
        :func:`default_compile_policy`."""
        return self.compile or default_compile_policy()


def default_compile_policy() -> str:
    """The compile policy where ``device.compile`` is null: the user's $BAYESX_COMPILE (1/true: always, 0/false:
    never), else auto. Read here, where a run's settings are resolved, and passed on as an argument
    (RunInputs.compile); the kernels never read it."""
    raw = os.environ.get("BAYESX_COMPILE", "")
    value = raw.strip().lower() or "auto"
    value = {"1": "always", "true": "always", "0": "never", "false": "never"}.get(value, value)
    if value not in ("auto", "always", "never"):
        raise BayesxError(f"BAYESX_COMPILE={raw} is not one of auto, always, never; unset it or use one of them")
    return value


@dataclass(frozen=True)
class TrackingSettings(Settings):
    uri: str = "sqlite:///mlflow.db"  # an MLflow tracking URI: sqlite:///FILE, http://HOST:PORT, postgresql://...
    artifact_root: str | None = None  # where a local store puts artifacts; null: MLflow's default
    heartbeat_s: Annotated[float, Positive()] = 30.0  # a running run refreshes its heartbeat tag this often
    stale_after_s: Annotated[float, Positive()] = 600.0  # `bayesx runs clean`: a run on another host without a beat for this long is dead


# --- read from a composed config: light imports only, so bad input is refused before torch and MLflow load ---
def run_settings(cfg: DictConfig) -> tuple[RunSettings, DeviceSettings, TrackingSettings]:
    """The run's top-level options, its device and its tracking store, checked (errors name the key)."""
    top = {f.name: OmegaConf.select(cfg, f.name) for f in fields(RunSettings)}
    top = {k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v for k, v in top.items()}
    return (configure(RunSettings, top, ""), configure(DeviceSettings, options_of(cfg.device, "device"), "device"),
            configure(TrackingSettings, options_of(cfg.tracking, "tracking"), "tracking"))


def options_of(node: DictConfig, group: str) -> dict:
    """The node's options as plain Python values (interpolations resolved), without Hydra's keys."""
    try:
        options = OmegaConf.to_container(node, resolve=True)
    except Exception as exc:  # omegaconf resolution errors (e.g. a ??? value left unset)
        if "Missing mandatory value" in str(exc) and "full_key:" in str(exc):
            key = str(exc).split("full_key:")[-1].split()[0]
            raise BayesxError(f"{key} must be set; add {key}=VALUE to the command line") from None
        raise BayesxError(f"cannot read the {group} options: {str(exc).splitlines()[0]}") from None
    return {k: v for k, v in options.items() if not k.startswith("_")}
