"""What made a run: as its tags, bayesx's version and git commit, the versions of Python, torch and
NumPy, the thread counts, and whether the native kernels were allowed to run (each MCMC run's
``kernels`` tag says which implementation did run); as its dataset inputs, the splits of its data
with digests of their content. The host and pid are the tracker's (bayesx.store.tracking.liveness_tags)."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from bayesx.memory import usable_cores
from bayesx.native import build as native_build
from bayesx.store.record import DataInput


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


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; else the platform's word for it): a native kernel's
    speed depends on it (results/native_gradient_cause.md), so every run records it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_flags() -> str:
    """The native library's compile flags, and the processor's widest vector extension they may use."""
    flags = " ".join(native_build.COMPILE_FLAGS)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line for line in fh if line.startswith("flags")), "").split()
    except OSError:
        cpu = []
    widest = next((name for name in ("avx512f", "avx2", "avx", "sse4_2") if name in cpu), None)
    return f"{flags} ({widest})" if widest else flags


def provenance_tags() -> dict[str, str]:
    return {
        "bayesx_version": bayesx_version(), "git_commit": git_commit(),
        "python_version": platform.python_version(), "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "torch_threads": str(torch.get_num_threads()), "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "native_kernels": "enabled" if native_build.enabled() else "disabled (BAYESX_NATIVE=0)",
        "cpu_model": cpu_model(), "native_flags": native_flags(),
        "cpus_usable": str(usable_cores()),
    }


def content_digest(*arrays: np.ndarray | None) -> str:
    """A short SHA-256 digest of the arrays' shapes, types and bytes: two splits with equal digests hold
    the same numbers (MLflow shows it beside the data set's name)."""
    digest = hashlib.sha256()
    for array in arrays:
        if array is None:
            continue
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.view(np.uint8).reshape(-1).data if array.size else b"")
    return digest.hexdigest()[:16]


def data_inputs(data, name: str) -> tuple[DataInput, ...]:
    """The training and test splits of a run's data set (a loader's ``x_train``, ``y_train``, ``x_test``,
    ``y_test`` and ``source``), each with its content digest; none for data of another shape."""
    splits = []
    for split, context in (("train", "training"), ("test", "test")):
        features, targets = getattr(data, f"x_{split}", None), getattr(data, f"y_{split}", None)
        if isinstance(features, np.ndarray) and len(features):
            targets = targets if isinstance(targets, np.ndarray) else None
            splits.append(DataInput(name, context, content_digest(features, targets),
                                    str(getattr(data, "source", "unknown")), features, targets))
    return tuple(splits)
