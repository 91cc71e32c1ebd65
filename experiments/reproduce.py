"""Rerun the published tables' presets through the one path, ``bayesx run experiment=NAME`` then ``bayesx report``,
into results/NAME.md (and its plot results/NAME.png). ``make results`` runs them all; ``make results ONLY="ais_toy
svgd_mixture"`` some. The sweep's parent run is read from ``bayesx run --json`` (experiments/_runs.py), so the table is
the sweep this command made even when other runs share the store.

    python experiments/reproduce.py [NAME ...] [--uri URI] [--list]

Each table's header names the commands that made it (``bayesx report`` writes ``Made by:`` and ``Table by:``); the
paper's numbers come from results/published/NAME.yaml.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


@dataclass(frozen=True)
class Reproduction:
    """One preset (conf/experiment/NAME.yaml with results/published/NAME.yaml) and what a run of it costs on this
    project's 2-core CPU: ``minutes`` measured where ``measured``, else estimated from its earlier script's runs."""

    name: str
    minutes: float
    measured: bool
    what: str


# every preset with published numbers; all run on this machine (digits, synthetic, the vendored MNIST subset and
# posteriordb are in the repository, Fashion-MNIST in /usr/share/datasets); ordered roughly from the shortest
REPRODUCTIONS = [
    Reproduction("svgd_mixture", 1.5, True, "SVGD on Liu and Wang's 1-D mixture, with its no-repulsion control"),
    Reproduction("ais_toy", 5.0, True, "AIS on the advanced-VI notes' example, 4 sample sizes x 10 seeds"),
    Reproduction("hvi_betabinomial", 9.0, True, "Hamiltonian VI on the beta-binomial, 1-8 leapfrog steps, 3 seeds"),
    Reproduction("bench_flows", 3.0, False, "seconds per flowvi iteration, 6 flow families x 3 depths"),
    Reproduction("flows_u1", 2.0, True, "planar flows on U1, K = 2..32, with and without annealing"),
    Reproduction("gap_figures", 1.0, True, "GAP on t(1) and two mixtures beside Laplace, VFE, KL(p||q), Hellinger"),
    Reproduction("deep_mcmc_table1", 6.0, True, "Deep MCMC Table 1: HMC and AE-HMC on synthetic and digits"),
    Reproduction("flows_families", 30.0, False, "six flow families on U1-U4 with and without annealing"),
    Reproduction("vi_comparison", 10.0, True, "every approximation against NUTS on digits"),
    Reproduction("deep_mcmc_table2", 38.0, True, "Deep MCMC Table 2: pCN, AE-pCN, delayed acceptance, meshes 20, 40"),
    Reproduction("hvi_table_5_2", 4.0, True, "Zhang (2018) Table 5.2, HVI with 5 / 10 / 20 latents"),
    Reproduction("hvi_table_5_6", 14.0, True, "Zhang (2018) Table 5.6, VAE / HVI / RMHVI"),
    Reproduction("vae_flows_table", 11.0, True, "flow VAEs beside VAE and HVI"),
    Reproduction("hvi_table_5_3", 15.0, True, "Zhang (2018) Table 5.3, conv VAE and HVI"),
    Reproduction("dpp_vae_table44", 44.0, True, "Chen (2019) Table 4.4, DPP-VAE on Fashion-MNIST"),
    Reproduction("hvi_table_5_1", 13.0, True, "Zhang (2018) Table 5.1 at the paper's 50 epochs"),
    Reproduction("posteriordb", 117.0, True, "the posteriordb suite x every method (46 x 12; in parts: model.name=...)"),
]
BY_NAME = {r.name: r for r in REPRODUCTIONS}


def command_lines(name: str, uri: str | None, parent: str = "PARENT") -> tuple[list[str], list[str]]:
    """The two commands of one reproduction: the sweep, and the report of that sweep into results/NAME.md."""
    store = [f"tracking.uri={uri}"] if uri else []
    run = [f"experiment={name}", "progress=false", *store]
    note = f"remade by `make results ONLY={name}` (experiments/reproduce.py)"
    report = ["report", "--parent", parent, "--out", f"results/{name}.md", "--note", note,
              *(["--uri", uri] if uri else [])]
    return run, report


def reproduce(item: Reproduction, uri: str | None) -> bool:
    from _runs import bayesx_run

    run, _ = command_lines(item.name, uri)
    started = time.perf_counter()
    launched = bayesx_run(run, show_stderr=True)
    if not launched.runs:
        print(f"reproduce: {item.name}: the sweep recorded no run: {launched.failure()}", file=sys.stderr)
        return False
    _, report = command_lines(item.name, uri, launched.parent_run_id)
    print("$ bayesx " + shlex.join(report), flush=True)
    written = subprocess.run([sys.executable, "-m", "bayesx", *report], cwd=ROOT).returncode == 0
    print(f"reproduce: {item.name}: {len(launched.runs)} runs, {'all finished' if launched.ok else 'NOT all finished'}"
          f", {time.perf_counter() - started:.0f} s -> results/{item.name}.md", flush=True)
    return launched.ok and written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="presets to rerun (default: every one, shortest first)")
    parser.add_argument("--uri", default=None, help="tracking URI (default: the tracking config's store)")
    parser.add_argument("--list", action="store_true", help="print the presets and their cost, run nothing")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        print(f"reproduce: no reproduction named {', '.join(unknown)}; choose from {', '.join(BY_NAME)}",
              file=sys.stderr)
        return 2
    chosen = [BY_NAME[n] for n in args.names] or REPRODUCTIONS
    if args.list:
        for r in chosen:
            print(f"{r.name:18s} {'' if r.measured else '~'}{r.minutes:g} min  {r.what}")
        return 0
    failed = [r.name for r in chosen if not reproduce(r, args.uri)]
    if failed:
        print(f"reproduce: not remade: {', '.join(failed)} (see the messages above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
