"""A run's memory, estimated before anything is allocated, and the one-line refusal of a run the
machine cannot hold; and the CPUs this process may use (:func:`usable_cores`).

The runner asks the method what its run will hold at its peak (``Method.memory_needs(target,
n_chains)``), as :class:`Need` parts: the draws (chains x draws x dim), the chains' working state
(chains x dim, many copies in a NUTS tree or an L-BFGS history), the warm-up's metric windows, the
model's design as the density meets it for every chain (points x rows), and the dense Hessian of a
Laplace start or fit (dim x dim, several copies). It adds them up with :data:`LIBRARY_HEADROOM` and
compares the sum with what the machine can still give: MemAvailable of /proc/meminfo (lower where a
cgroup limit says so; what the process holds already is not in it) for host memory, and the GPU's free
memory (``torch.cuda.mem_get_info``) for the parts on a CUDA device.

The counts are the arrays' sizes times the copies the code makes of them, checked against the peak
resident memory of runs on the CPU (tests/test_failures_resources.py: a medium run within a factor of
two). The parts are summed although some are freed before others are made (the warm-up's windows
before the draws gather), so they err on the large side: a run refused here would have come close.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads where a size is computed: usable_cores serves the CLI before torch is needed
    import torch

from bayesx.errors import BayesxError

def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask: a Slurm step, taskset or a container's cpuset
    gives fewer than the machine has), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


GB = 1024.0**3
LIBRARY_HEADROOM = 0.3 * GB  # what a run imports after the check (ArviZ, matplotlib, h5netcdf) and its allocator keeps
STATE_COPIES = 40  # (chains, dim) arrays alive at once: a NUTS tree's stack, an L-BFGS history of 20 pairs, momenta
HESSIAN_COPIES = 7  # the Laplace fit's dim x dim arrays at once: H, its symmetrized copy, I, H + jitter I, the
# Cholesky factor, the covariance and its symmetrized copy (bayesx.methods.common.optimize.fit_laplace)
DRAWS_COPIES = 3  # measured: 60 chains x 1000 x 500 float64 peaked 0.75 GB beyond the process (3.1 copies)
DESIGN_COPIES = 6  # (points, rows) arrays of a logistic density and its gradient: logits, log-sigmoids, residuals


@dataclass(frozen=True)
class Need:
    """One part of a run's peak memory: what it is (with its shape), its bytes, how to need less, and
    whether it lives on the run's device (False: host memory, such as the draws collected on the CPU)."""

    part: str
    nbytes: float
    fix: str
    on_device: bool = True


def shown(nbytes: float) -> str:
    return f"{nbytes / GB:.1f} GB" if nbytes >= 0.1 * GB else f"{nbytes / 1024**2:.0f} MB"


def dtype_name(dtype: torch.dtype) -> str:
    """float32, float64, ...: a dtype as the options and tags spell it."""
    return str(dtype).removeprefix("torch.")


def itemsize(dtype: torch.dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def draws_need(n_chains: int, n_draws: int, dim: int, dtype: torch.dtype, fix: str) -> Need:
    """The retained draws, on the CPU, DRAWS_COPIES times: the per-draw list, the (chains, draws, dim) array it is
    stacked into, and the constrained copy the posterior summary reads (its diagnostics run by blocks of
    coordinates: bayesx.diagnostics.convergence.BLOCK_BYTES)."""
    return Need(f"the draws ({n_chains} x {n_draws} x {dim}, {dtype_name(dtype)})",
                float(DRAWS_COPIES) * n_chains * n_draws * dim * itemsize(dtype), fix, on_device=False)


def state_need(n_points: int, dim: int, dtype: torch.dtype, fix: str, copies: int = STATE_COPIES) -> Need:
    return Need(f"the working state ({n_points} points x {dim})", float(copies) * n_points * dim * itemsize(dtype), fix)


def hessian_need(dim: int, dtype: torch.dtype, fix: str) -> Need:
    """The dense Hessian of the Laplace approximation and the matrices made from it."""
    return Need(f"the Laplace Hessian ({dim} x {dim}, {HESSIAN_COPIES} copies)",
                float(HESSIAN_COPIES) * dim * dim * itemsize(dtype), fix)


def design_needs(target, n_points: int, fix: str) -> list[Need]:
    """The density's (points, rows) arrays where the target declares a logistic design (none otherwise)."""
    design = target.logistic_design()
    if design is None:
        return []
    rows = int(design.x.shape[0])
    return [Need(f"the density over the design ({n_points} points x {rows} rows)",
                 float(DESIGN_COPIES) * n_points * rows * itemsize(target.dtype), fix)]


# --- what the machine has -----------------------------------------------------------------------------
def resident_bytes() -> float:
    """This process's resident memory now (0 where /proc is absent)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0.0


def peak_resident_bytes() -> float | None:
    """This process's peak resident memory (VmHWM of /proc/self/status: its high-water mark since it started, or
    since :func:`reset_peak`); None where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
        return float(kb) * 1024
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def peak_resident_gb() -> float | None:
    """:func:`peak_resident_bytes` in GB (1024^3 bytes): a run's ``peak_memory_gb``."""
    peak = peak_resident_bytes()
    return None if peak is None else peak / GB


def reset_peak() -> bool:
    """Start this process's high-water mark again from its resident memory now (Linux: ``5`` written to
    /proc/self/clear_refs), so that a job of a sweep run in one process measures its own peak, not an earlier job's;
    False where the kernel does not allow it (the peak then counts from the process's start)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _cgroup_room() -> float | None:
    """A cgroup's memory limit less its usage (v2, then v1); None without a limit."""
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap, used = Path(limit).read_text().strip(), Path(usage).read_text().strip()
        except OSError:
            continue
        if cap.isdigit() and used.isdigit() and int(cap) < 2**60:
            return float(int(cap) - int(used))
    return None


def host_available() -> tuple[float, str] | None:
    """The host memory a run can still take, and where the number comes from; None where it is not known."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        room, source = float(fields["MemAvailable"].split()[0]) * 1024, "MemAvailable"
    except (OSError, KeyError, ValueError):
        return None
    cgroup = _cgroup_room()
    if cgroup is not None and cgroup < room:
        room, source = cgroup, "its cgroup's limit"
    return room, source


def device_available(device: torch.device) -> float | None:
    """Free memory of a CUDA device (None on the CPU)."""
    if device.type != "cuda":
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    return float(free)


# --- the check ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """What a run will take beyond what its process holds already (``resident``, which the machine's
    available memory already leaves out): its parts, and on the host :data:`LIBRARY_HEADROOM`. On a CUDA
    device the parts ``on_device`` are the GPU's; the rest are the host's."""

    resident: float
    needs: tuple[Need, ...]
    device: torch.device

    def on_gpu(self, need: Need) -> bool:
        return need.on_device and self.device.type == "cuda"

    def host_needs(self) -> list[Need]:
        return [n for n in self.needs if not self.on_gpu(n)]

    def host_bytes(self) -> float:
        return LIBRARY_HEADROOM + sum(n.nbytes for n in self.host_needs())

    def device_needs(self) -> list[Need]:
        return [n for n in self.needs if self.on_gpu(n)]

    def device_bytes(self) -> float:
        return sum(n.nbytes for n in self.device_needs())


def refusal(what: str, needed: float, room: float, source: str, needs: list[Need]) -> str:
    """The one line: the estimate, its largest parts, the machine's memory, the fix of the largest part."""
    largest = sorted(needs, key=lambda n: -n.nbytes)[:3]
    parts = f" ({'; '.join(f'{n.part}: {shown(n.nbytes)}' for n in largest)})" if largest else ""
    fix = largest[0].fix if largest else "close other programs or use a machine with more memory"
    return (f"this run would need about {shown(needed)} more {what}{parts}, but the machine has {shown(room)} "
            f"available ({source}); {fix}")


def check_room(needs: list[Need], device: torch.device) -> Estimate:
    """Refuse (BayesxError, before anything is allocated) a run whose estimate exceeds the machine's
    available memory, host or GPU; returns the estimate otherwise (also where the machine's memory is unknown)."""
    found = Estimate(resident_bytes(), tuple(needs), device)
    host = host_available()
    if host is not None and found.host_bytes() > host[0]:
        raise BayesxError(refusal("memory", found.host_bytes(), host[0], host[1], found.host_needs()))
    free = device_available(device)
    if free is not None and found.device_bytes() > free:
        raise BayesxError(refusal(f"memory on {device}", found.device_bytes(), free, "free on the GPU",
                                  found.device_needs()))
    return found
