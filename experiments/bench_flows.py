"""Benchmark: seconds per flowvi iteration (draws through the flow, the target's gradients, the
backward pass and the Adam step) for each flow family and depth, on U1 (2-D) with 512 draws.

    python experiments/bench_flows.py        # -> results/bench_flows.md (about 3 minutes)

The goal set for bayesx: a 32-layer planar flow on batch 512 under 5 ms per iteration on this CPU.
Rows with ``compile`` hand the layers to torch.compile (the compilation time is reported apart).
The CUDA column stays empty where no GPU is present, and says so.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import torch

from bayesx.methods.base import RunInputs
from bayesx.methods.vi.flowvi import FlowVI
from bayesx.targets.toy import Density

ROOT = Path(__file__).resolve().parents[1]
BATCH, WARM, TIMED = 512, 30, 300


def seconds_per_iteration(family: str, k: int, device: str, compile_: bool) -> tuple[float, float]:
    """(seconds per iteration over TIMED iterations after WARM, seconds of the first call)."""
    target = Density(name="u1", device=device)
    method = FlowVI(flow=family, n_layers=k, hidden=64, batch_size=BATCH, iterations=WARM + TIMED, check_every=WARM,
                    compile=compile_, num_draws=10)
    g = torch.Generator(device=device).manual_seed(0)
    result = method.infer(target, RunInputs(None, g, progress=False))
    clock = dict(result.traces["fit_elapsed_s"])
    return (clock[WARM + TIMED] - clock[WARM]) / TIMED, clock[WARM]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_flows.md"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    cuda = torch.cuda.is_available()
    cases = [(family, k, False) for family in ("planar", "radial", "nice", "realnvp", "maf", "iaf") for k in (2, 8, 32)]
    cases.append(("planar", 32, True))
    lines = ["# bench_flows: seconds per flowvi iteration on U1, batch 512", "",
             f"Command: `python experiments/bench_flows.py` on {platform.machine()}, 2 torch threads, torch "
             f"{torch.__version__}, Python {sys.version.split()[0]}; float64; hidden width 64 (coupling, MADE). "
             f"{WARM} warm-up iterations, then {TIMED} timed.  ",
             "CUDA: " + ("measured" if cuda else "no GPU on this machine; the column is empty, not zero."), "",
             "| flow | K | compile | CPU ms / iteration | first iterations s (incl. compilation) | CUDA ms / iteration |",
             "|---|---|---|---|---|---|"]
    for family, k, compile_ in cases:
        print(f"{family} K={k} compile={compile_} ...", flush=True)
        cpu, first = seconds_per_iteration(family, k, "cpu", compile_)
        gpu = f"{1000 * seconds_per_iteration(family, k, 'cuda', compile_)[0]:.2f}" if cuda else "-"
        lines.append(f"| {family} | {k} | {'yes' if compile_ else 'no'} | {1000 * cpu:.2f} | {first:.1f} | {gpu} |")
        print(f"  {lines[-1]}", flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
