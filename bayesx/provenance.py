"""What made a run, recorded as its tags: bayesx's version and git commit, the versions of Python,
torch and NumPy, the thread counts, and whether the native kernels were allowed to run (each MCMC
run's ``kernels`` tag says which implementation did run). The host and pid are the tracker's
(bayesx.tracking.liveness_tags)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from bayesx.native import build as native_build


def git_commit() -> str:
    """The short commit of the checkout bayesx runs from, or ``unknown`` (an installed wheel, no git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent, check=False)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def bayesx_version() -> str:
    try:
        return metadata.version("bayesx")
    except metadata.PackageNotFoundError:
        return "unknown"


def provenance_tags() -> dict[str, str]:
    return {
        "bayesx_version": bayesx_version(), "git_commit": git_commit(),
        "python_version": platform.python_version(), "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "torch_threads": str(torch.get_num_threads()), "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "native_kernels": "enabled" if native_build.enabled() else "disabled (BAYESX_NATIVE=0)",
    }
