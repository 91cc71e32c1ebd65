"""The default job alone, then two at once, under each OpenMP wait policy: ``make busy-machine``.

Issue 49 asks that two default jobs started together on a two-core machine take at most 2.5x one alone
(ideal: 2x, each gets one core), and that the native kernels not busy-wait on a core another process
needs. Each job is ``bayesx run`` (the default job: NUTS on the synthetic logistic regression; extra
overrides after ``--``) in its own process and store; for each policy (``OMP_WAIT_POLICY`` unset, i.e.
libgomp's default of spinning for a while before sleeping, and ``passive``, which sleeps at once) this
script times one job alone, then two started together (the slower one's wall time counts), and writes
the ratio with the load average before and after each measurement. Wall times are what a user sees, so
other work on the machine inflates them: run it on an otherwise idle machine, or read the ratios only.

    python experiments/busy_machine.py --out results/busy_machine.md
    python experiments/busy_machine.py --policies unset -- experiment=quick
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAYESX = [sys.executable, "-m", "bayesx"]


def start(overrides: list[str], folder: Path, name: str, policy: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    command = [*BAYESX, "run", *overrides, f"tracking.uri=sqlite:///{folder}/{name}.db", "save_draws=false",
               f"hydra.run.dir={folder}/{name}"]
    return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait(proc: subprocess.Popen, started: float) -> tuple[float, str]:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bayesx run failed ({proc.returncode}):\n{out[-3000:]}")
    return time.perf_counter() - started, out


def metric(out: str, name: str) -> str:
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return parts[1]
    return "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", nargs="+", default=["unset", "passive"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="bayesx run overrides (after --)")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for policy in args.policies:
            load0 = os.getloadavg()
            t0 = time.perf_counter()
            alone, out = wait(start(args.overrides, folder, f"alone-{policy}", policy), t0)
            load1 = os.getloadavg()
            t0 = time.perf_counter()
            pair = [start(args.overrides, folder, f"pair{i}-{policy}", policy) for i in range(2)]
            both = [wait(p, t0) for p in pair]
            load2 = os.getloadavg()
            slower = max(t for t, _ in both)
            rows.append((policy, alone, slower, slower / alone, metric(out, "rhat_max"), metric(out, "grad_cost_us"),
                         ", ".join(metric(o, "grad_cost_us") for _, o in both), load0, load1, load2))
            print(rows[-1], flush=True)
    lines = ["# Two default jobs at once against one alone", "",
             f"Made by: `python experiments/busy_machine.py {shlex.join(argv if argv is not None else sys.argv[1:])}`"
             f" (`make busy-machine`), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; each job `bayesx run "
             f"{shlex.join(args.overrides)}` in its own process; {os.cpu_count()} CPUs, "
             f"{len(os.sched_getaffinity(0))} usable", "",
             "| OMP_WAIT_POLICY | one alone (s) | two at once, slower (s) | ratio (bound 2.5) | R-hat (alone) | "
             "grad_cost_us alone | grad_cost_us two | load before / between / after (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    for policy, alone, slower, ratio, rhat, cost, costs, l0, l1, l2 in rows:
        lines.append(f"| {policy} | {alone:.1f} | {slower:.1f} | {ratio:.2f} | {rhat} | {cost} | {costs} | "
                     f"{l0[0]:.2f} / {l1[0]:.2f} / {l2[0]:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
