"""The posteriordb suite against the best peers, in one run and one MLflow store: bayesx NUTS and MAMS beside
NumPyro NUTS, nutpie (default and low-rank metric), BlackJAX NUTS and BlackJAX MAMS.

For the chosen posteriors of ``model=posteriordb`` (bayesx/targets/posteriordb), one command

    python experiments/peers_posteriordb.py --posteriors kidscore_momiq earn_height arK \\
        --out results/posteriordb_peers.md

1. opens a parent run in the store and, posterior by posterior,
2. runs each of bayesx's contenders (``--bayesx "method=nuts,mams"``: every combination of the values) as its
   own ``bayesx run`` command, as a user runs it, with its defaults (4 chains, float64, the run-length rules),
   on a cold compiled-density cache (every density compiles inside its posterior's first run; --warm keeps it),
   timed from outside (``command_time_s``: interpreter, imports, compile, run) and made a child of the parent;
3. runs every peer (experiments/peers.py: each with its own defaults and tuning, 4 chains, float64, started
   uniformly in (-2, 2), on the suite's jax.numpy transcription, the recursions as ``lax.scan``; nutpie on the
   PyMC transcription, numba-compiled) in a child process and logs it as a child run of the same parent,
   tagged ``peer=<name>`` and with the param ``model.name``, so ``bayesx report --experiment posteriordb_peers``
   lists bayesx and the peers together;
4. reads every run of that parent back from the store and writes the suite table (--out): per posterior and
   contender the min bulk ESS per second of the **whole command** (a peer: its wall time from building the
   model to the draws plus its libraries' import in a fresh interpreter, as ``python script.py`` would take)
   and per second of the **sampler's time alone** (warm-up and draws: bayesx's ``warmup_time_s +
   sampling_time_s``, a peer's wall time less its JIT/compile seconds), R-hat, gradients per unit of min-ESS
   (warm-up included) and the worst error of the posterior means against the reference draws (in reference
   sds), and the goals' ratios on both clocks: bayesx NUTS and bayesx's best over the best converged peer
   (R-hat <= 1.01).

The peers: numpyro-nuts (defaults, 1000 + 1000), nutpie and nutpie-lowrank (nutpie 0.16.8's defaults: 400 +
1000, and with ``low_rank_modified_mass_matrix=True`` 800 + 1000), blackjax-nuts (window adaptation, 1000 + 1000), blackjax-mams
(``adjusted_mclmc_dynamic`` tuned by ``adjusted_mclmc_find_L_and_step_size`` over 1000 transitions, 1000
draws) and blackjax-mams-esslength (the same with the paper's ESS-based L; see peers.blackjax_mams).

The suite's second tier (posteriors where a run takes minutes: bayesx/targets/posteriordb/suite.py ``TIER2``) runs
the same way, its names given to --posteriors (``--posteriors sv_latent hier_normal logistic_100k``); the peers
sample its JAX transcription (tier2_xp.py, written without Python loops over time, so XLA unrolls nothing)
and its errors are against its reference draws (experiments/make_tier2.py).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (experiments/ is not a package)

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "posteriordb_peers"
RHAT_GOAL = 1.01  # the bar for a converged run
# the suite table's columns: (heading, how the run is told apart: bayesx's method tag or the peer's name)
BAYESX = {"bayesx NUTS": "nuts", "bayesx MAMS": "mams"}
PEER_COLUMNS = {"NumPyro": "numpyro-nuts", "nutpie default": "nutpie", "nutpie low-rank": "nutpie-lowrank",
                "BlackJAX NUTS": "blackjax-nuts", "BlackJAX MAMS": "blackjax-mams",
                "BlackJAX MAMS (ESS-based L)": "blackjax-mams-esslength"}
STARTUP_LIMIT_S = 300.0  # the peers' child process imports JAX, the peers and the posterior's data
NUTPIE_OWN_LENGTHS = {"nutpie", "nutpie-lowrank"}  # nutpie 0.16.8's defaults as its users run it: 400 + 1000
# transitions with the diagonal metric, 800 + 1000 with the low-rank one


def cold_environment(tmp: Path, warm: bool) -> dict[str, str]:
    """The environment of bayesx's runs: compiling on (BAYESX_COMPILE=auto) and, unless ``warm``, an empty
    compiled-density cache (the C kernels built at install time copied in), so every density compiles inside
    its run."""
    env = {**os.environ, "BAYESX_COMPILE": "auto"}
    if not warm:
        env["BAYESX_CACHE_DIR"] = str(tmp / "cache")
        native = Path(os.environ.get("BAYESX_CACHE_DIR", Path.home() / ".cache" / "bayesx")) / "native"
        if native.exists():
            shutil.copytree(native, tmp / "cache" / "native")
    return env


def peer_worker(posterior: str, names: list[str], settings: dict, results) -> None:
    """In a child process: each peer in ``names`` on ``posterior``, one after the other; puts (name, 'started',
    None) before a peer's run and (name, 'done' | 'skipped' | 'failed', PeerRun or why) after it."""
    import jax  # noqa: F401  (imported before any peer's clock starts: its import is no peer's cost)

    args = argparse.Namespace(**settings)
    post = peers.posterior_from(["model=posteriordb", f"model.name={posterior}"])
    for name in names:
        args.nutpie_defaults = name in NUTPIE_OWN_LENGTHS
        results.put((name, "started", None))
        try:
            results.put((name, "done", peers.PEERS[name](post, args)))
        except ImportError as exc:
            results.put((name, "skipped", f"not installed ({exc.name})"))
        except Exception as exc:  # a peer that fails on one posterior is a result, not the end of the run
            traceback.print_exc()
            results.put((name, "failed", f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]}"))


def run_peers(names: list[str], posterior: str, parent: str, tracker, args) -> dict[tuple[str, str], str]:
    """Each peer on one posterior in a child process, logged under ``parent``; returns why a (posterior, peer)
    was not logged. A peer still running after --peer-limit seconds (BlackJAX MAMS's shipped tuning went on for
    9 minutes and more on arma11 and earn_height, one jitted call that no signal interrupts) is stopped with its
    process, recorded as such, and the next peer starts in a fresh process."""
    import multiprocessing
    import queue

    missing: dict[tuple[str, str], str] = {}
    settings = {k: v for k, v in vars(args).items() if k != "argv"}
    post = peers.posterior_from(["model=posteriordb", f"model.name={posterior}"])

    def log(name: str, out, stopped: tuple[str, str] | None) -> None:
        if out is not None:
            out.imports = peers.peer_imports(name)
        own = {"warmup": "nutpie's own", "draws": "nutpie's own"} if name in NUTPIE_OWN_LENGTHS else {}
        run_settings = {"chains": args.chains, "warmup": args.warmup, "draws": args.draws, "seed": args.seed}
        peers.log_peer(tracker, parent, name, post, out, {**run_settings, **own}, stopped)
        print(f"{posterior} {name}: " + (f"{out.wall:.1f} s" if out is not None else stopped[1]), flush=True)

    context = multiprocessing.get_context("spawn")  # JAX is multithreaded: a forked child can deadlock
    pending = list(names)
    while pending:
        results = context.Queue()
        worker = context.Process(target=peer_worker, args=(posterior, pending, settings, results), daemon=True)
        worker.start()
        running, limit = None, STARTUP_LIMIT_S
        try:
            while pending:
                try:
                    name, what, value = results.get(timeout=limit)
                except queue.Empty:
                    if running is None:
                        raise RuntimeError(f"the peers' process did not start within {STARTUP_LIMIT_S} s") from None
                    why = f"stopped at the {args.peer_limit:g} s limit"
                    log(running, None, ("KILLED", why))
                    pending.remove(running)
                    break
                if what == "started":
                    running, limit = name, args.peer_limit
                    continue
                pending.remove(name)
                running, limit = None, STARTUP_LIMIT_S
                if what == "skipped":  # not installed: nothing ran, so nothing goes to the store
                    missing[(posterior, name)] = value
                    print(f"{posterior} {name}: {value}", flush=True)
                else:
                    log(name, value, None) if what == "done" else log(name, None, ("FAILED", value))
        finally:
            worker.kill()
            worker.join()
    return missing


def bayesx_contenders(spec: str) -> list[list[str]]:
    """``--bayesx "method=nuts,mams method.mass=diag"`` -> one override list per combination of the values."""
    import itertools

    choices = [[f"{key}={value}" for value in values.split(",")]
               for key, values in (token.split("=", 1) for token in spec.split())]
    return [list(combination) for combination in itertools.product(*choices)] if choices else []


def run_bayesx(posterior: str, contender: list[str], parent: str, tracker, args, env: dict[str, str]) -> None:
    """One bayesx contender on one posterior as its own ``bayesx run`` command, as a user runs it, timed from
    outside (interpreter start, imports and compile included) and logged as ``command_time_s`` on its run, which
    becomes a child of ``parent``. A command that fails is reported and its run (if any) kept as it ended."""
    from _runs import bayesx_run
    from bayesx.store.tracking import TrackedRun

    overrides = ["model=posteriordb", f"model.name={posterior}", *contender, f"seed={args.seed}",
                 f"n_chains={args.chains}", f"experiment_name={args.experiment}", f"tracking.uri={args.tracking_uri}",
                 "save_draws=false", "progress=false", "plots.n_coords=0"]
    start = time.perf_counter()
    launched = bayesx_run(overrides, env=env)
    seconds = time.perf_counter() - start
    for run in launched.runs:
        if run.get("run_id"):
            made = TrackedRun(tracker.client, run["run_id"])
            made.set_tags({"mlflow.parentRunId": parent})
            made.log_metrics({"command_time_s": seconds})
    label = " ".join(contender)
    print(f"{posterior} bayesx {label}: {seconds:.1f} s" if launched.ok else
          f"{posterior} bayesx {label}: failed: {launched.failure(400)}", flush=True)


# --- the table, from the store ----------------------------------------------------------------------
def contender(run) -> str | None:
    """A run's column heading: a peer by its tag, a bayesx run by its method."""
    peer = run.get("tags.peer")
    if isinstance(peer, str) and peer:
        return next((h for h, n in PEER_COLUMNS.items() if n == peer), None)
    return next((h for h, m in BAYESX.items() if m == run.get("tags.method")), None)


def sampler_seconds(run, metric) -> float | None:
    """The sampler's own seconds (warm-up and draws): a peer's ``sampler_time_s``, bayesx's warm-up (its mode
    search included) plus sampling."""
    if metric("sampler_time_s") is not None:
        return metric("sampler_time_s")
    warmup, sampling = metric("warmup_time_s"), metric("sampling_time_s")
    return warmup + sampling if warmup is not None and sampling is not None else None


def cell_values(run) -> dict[str, float | None]:
    """min-ESS per second of the whole command (``rate``; runs from before it was measured: of the wall time,
    ``clock`` says which) and of the sampler's time (``sampler_rate``), R-hat, gradients per min-ESS (warm-up
    included), ref error."""
    def metric(name):
        value = run.get(f"metrics.{name}")
        return None if value is None or not np.isfinite(value) else float(value)
    ess, command = metric("ess_bulk_min"), metric("command_time_s")
    wall = command or metric("wall_time_s")
    sampler = sampler_seconds(run, metric)
    grads = (metric("n_grad_evals") or 0.0) + (metric("n_grad_evals_warmup") or 0.0)
    return {"rate": ess / wall if ess and wall else None, "clock": "command" if command else "wall",
            "sampler_rate": ess / sampler if ess and sampler else None, "rhat": metric("rhat_max"),
            "grads_per_ess": grads / ess if ess and grads else None, "ref": metric("ref_mean_err_max"),
            "wall": wall, "compile": metric("compile_time_s"), "ess": ess}


def suite_cells(runs, posteriors: list[str]) -> tuple[dict[tuple[str, str], dict], dict[str, str]]:
    """(posterior, column heading) -> cell_values for the finished runs of ``runs``, and 'posterior/heading' ->
    why for those that did not finish (a peer stopped at the time limit or failed: the run's error tag)."""
    cells, why = {}, {}
    for _, run in runs.iterrows():
        heading, name = contender(run), run.get("params.model.name")
        if not heading or name not in posteriors:
            continue
        if run.get("status") == "FINISHED":
            cells[(name, heading)] = cell_values(run)
        else:
            error = run.get("tags.error")
            why[f"{name}/{heading}"] = error if isinstance(error, str) and error else str(run.get("status")).lower()
    return cells, why


def converged(cell: dict | None) -> bool:
    return bool(cell) and cell["rhat"] is not None and cell["rhat"] <= RHAT_GOAL


def best(cells: dict, posterior: str, headings, rate: str = "rate") -> tuple[str | None, float | None]:
    """The heading with the highest min-ESS/s (``rate``: of the whole command; ``sampler_rate``: of the
    sampler's time) among the converged runs of ``headings``, and that rate."""
    found = [(cells[(posterior, h)][rate], h) for h in headings
             if converged(cells.get((posterior, h))) and cells[(posterior, h)][rate]]
    if not found:
        return None, None
    rate, heading = max(found)
    return heading, rate


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def why_not_twice(cells: dict, posterior: str) -> str:
    """Where bayesx's best sampler is not 2x the best converged peer: why, from the runs. The ratio of two
    min-ESS/s is exactly (the peer's gradients per ESS / bayesx's) x (the peer's wall time per gradient /
    bayesx's): the sampler's efficiency times the cost of a gradient with everything else (compile, JIT,
    adaptation, overheads) spread over it; bayesx's compile time is named beside its share of the wall time."""
    peer, peer_rate = best(cells, posterior, PEER_COLUMNS)
    mine, mine_rate = best(cells, posterior, BAYESX)
    if peer is None:
        ran = any(cells.get((posterior, h)) for h in PEER_COLUMNS)
        return "no peer converged: no ratio" if ran else "no peer finished: no ratio"
    if mine is None:
        worst = [cells[(posterior, h)]["rhat"] for h in BAYESX if cells.get((posterior, h))]
        return (f"no bayesx sampler converged (R-hat {fmt(min(w for w in worst if w is not None))})"
                if any(w is not None for w in worst) else "no bayesx run")
    if mine_rate >= 2 * peer_rate:
        return ""
    a, b = cells[(posterior, peer)], cells[(posterior, mine)]
    if not (a["grads_per_ess"] and b["grads_per_ess"]):
        return "-"
    efficiency = a["grads_per_ess"] / b["grads_per_ess"]
    per_grad = (mine_rate / peer_rate) / efficiency
    compile_s = b.get("compile")
    compiled = f"; compile {compile_s:.3g} s of its {b['wall']:.3g} s" if compile_s and b["wall"] else ""
    return (f"{mine} needs {1 / efficiency:.2g}x {peer}'s gradients per ESS, at {per_grad:.2g}x its speed per "
            f"gradient (wall time included){compiled}")


def suite_table(cells: dict, posteriors: list[str], dims: dict[str, int], why_empty: dict[str, str]) -> list[str]:
    """The suite table: one row per posterior; for each contender 'min-ESS/s of the command / of the sampler
    (R-hat, grads/ESS, ref err)' (a dagger: of the run's wall time, the command not measured)."""
    headings = [*PEER_COLUMNS, *BAYESX]
    lines = ["| posterior | dim | " + " | ".join(headings) + " | best peer (command / sampler) | bayesx NUTS / best "
             "peer (command / sampler) | bayesx best / best peer (command / sampler) | where bayesx's best is not 2x "
             "the best peer (command), why |",
             "|" + "---|" * (len(headings) + 6)]
    for posterior in posteriors:
        row = [posterior, str(dims[posterior])]
        for heading in headings:
            cell = cells.get((posterior, heading))
            if cell is None:
                row.append(f"not run: {why_empty.get(f'{posterior}/{heading}', why_empty.get(heading, '?'))}")
                continue
            flag = "" if converged(cell) else " **R-hat > 1.01**"
            wall = "" if cell["clock"] == "command" else "†"
            row.append(f"{fmt(cell['rate'])}{wall} / {fmt(cell['sampler_rate'])} ({fmt(cell['rhat'])}, "
                       f"{fmt(cell['grads_per_ess'])}, {fmt(cell['ref'], 2)}){flag}")
        ran = any(cells.get((posterior, h)) for h in PEER_COLUMNS)
        nuts = cells.get((posterior, "bayesx NUTS"))
        ratios, best_peer = [], []
        for rate in ("rate", "sampler_rate"):
            peer, peer_rate = best(cells, posterior, PEER_COLUMNS, rate)
            mine, mine_rate = best(cells, posterior, BAYESX, rate)
            nuts_rate = nuts[rate] if converged(nuts) else None
            best_peer.append(peer or ("none converged" if ran else "none finished"))
            ratios.append((fmt(nuts_rate / peer_rate if nuts_rate and peer_rate else None),
                           fmt(mine_rate / peer_rate if mine_rate and peer_rate else None)
                           + (f" ({mine})" if mine else "")))
        row += [" / ".join(best_peer) if best_peer[0] != best_peer[1] else best_peer[0],
                f"{ratios[0][0]} / {ratios[1][0]}", f"{ratios[0][1]} / {ratios[1][1]}",
                why_not_twice(cells, posterior)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def reference_tolerance(ess: float, dim: int) -> float:
    """The largest worst |mean error| in reference sds that Monte Carlo error explains: a mean's standard error
    is about 1 / sqrt(ESS) reference sds (the min bulk ESS bounds every coordinate's), Bonferroni over ``dim``
    two-sided tests at 0.1% (z = 3.3 to 4.1 for 1 to 10 coordinates), plus 0.05 for the reference draws' own
    error and the constrained coordinates' ESS differing from the unconstrained ones'."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1.0 - 0.001 / (2 * dim))
    return z / math.sqrt(max(ess, 1.0)) + 0.05


def wins(cells: dict, posterior: str, dims: dict[str, int], rate: str) -> bool:
    """bayesx NUTS (defaults) at or above the best converged peer by ``rate``, converged and within the
    reference check."""
    peer_rate = best(cells, posterior, PEER_COLUMNS, rate)[1]
    nuts = cells.get((posterior, "bayesx NUTS"))
    return bool(peer_rate and converged(nuts) and nuts[rate] and nuts[rate] >= peer_rate and nuts["ref"] is not None
                and nuts["ref"] < reference_tolerance(nuts["ess"], dims[posterior]))


def goals(cells: dict, posteriors: list[str], dims: dict[str, int]) -> list[str]:
    """The issue's goals counted on the table, on both clocks (the whole command's and the sampler's): bayesx
    NUTS (defaults) at or above the best converged peer while converged and within the reference check; bayesx's
    best sampler at 2x or more (on the command)."""
    compared = [p for p in posteriors if best(cells, p, PEER_COLUMNS)[0] is not None]
    n = len(compared)
    counts = []
    for rate, clock in (("rate", "the whole command's wall time"), ("sampler_rate", "the sampler's time alone")):
        won = [p for p in compared if wins(cells, p, dims, rate)]
        lost = [p for p in compared if p not in won]
        share = f" ({100 * len(won) / n:.0f}%)" if n else ""
        counts.append(f"- bayesx NUTS with its defaults at or above the best converged peer's min-ESS/s on {clock}, "
                      f"converged and within the reference check (worst mean error below Monte Carlo error, see "
                      f"`reference_tolerance`): {len(won)} of {n}{share}" + (f"; not on {', '.join(lost)}" if lost
                                                                              else "") + ".")
    twice = [p for p in compared if (best(cells, p, BAYESX)[1] or 0.0) >= 2 * best(cells, p, PEER_COLUMNS)[1]]
    finished = [p for p in posteriors if any(cells.get((p, h)) for h in PEER_COLUMNS)]
    return [f"**Goals, counted on the {n} posteriors where a peer converged** (of {len(posteriors)}; on "
            f"{len(finished) - n} no peer that finished reached R-hat <= {RHAT_GOAL}"
            + (f", on {len(posteriors) - len(finished)} no peer finished" if len(finished) < len(posteriors) else "")
            + "):",
            *counts,
            f"- bayesx's best sampler at 2x the best converged peer or more (whole command): {len(twice)} of {n}; the "
            "last column says why where not."]


def write_table(args, sources: list[tuple[str, str]], started: str, missing: dict, posteriors: list[str],
                search_runs) -> None:
    """The suite table of ``posteriors`` from the runs of the sweep parents ``sources`` ((tracking URI, parent
    id) pairs), printed and written to --out (after each posterior, so that a run cut short leaves the table of
    what it finished)."""
    import pandas as pd

    from bayesx.targets.posteriordb.suite import ENTRIES

    found = []
    for uri, parent in sources:
        runs = search_runs(uri, args.experiment)
        found.append(runs[runs["tags.mlflow.parentRunId"].astype(str).str.startswith(parent)])
    for i, runs in enumerate(found):  # a posterior run in several sweeps: the last one's runs only
        later = {name for after in found[i + 1:] for name in after["params.model.name"].dropna()}
        found[i] = runs[~runs["params.model.name"].isin(later)]
    runs = pd.concat(found, ignore_index=True)
    cells, stopped = suite_cells(runs, posteriors)
    why = {f"{p}/{h}": reason for (p, n), reason in missing.items() for h, m in PEER_COLUMNS.items() if m == n}
    why.update(stopped)
    why.update({h: "not in --peers" for h, n in PEER_COLUMNS.items() if n not in args.peers})
    why.update({h: "not in --bayesx" for h, m in BAYESX.items() if m not in args.bayesx})
    why.update({h: "the bayesx run failed (see its run in the store)" for h in BAYESX if h not in why})
    stores = "; ".join(f"`{uri}` parent `{parent[:8]}` (`bayesx report --uri {uri} --parent {parent[:8]}`)"
                       for uri, parent in sources)
    dims = {p: ENTRIES[p].dim for p in posteriors}
    lines = [
        "# The posteriordb suite against the best peers",
        "",
        f"Command: `python experiments/peers_posteriordb.py {' '.join(args.argv)}`",
        "",
        f"Table written {started}; machine: {platform.machine()}, {os.cpu_count()} cores; one run each, seed "
        f"{args.seed}, {args.chains} chains, every contender one after the other; MLflow experiment "
        f"`{args.experiment}`, from {stores}. {args.note}",
        "",
        "Each cell: **min-ESS/s of the whole command / of the sampler alone** (min bulk ESS over the unconstrained "
        "coordinates; per second of the command: `bayesx run` timed from outside with the density compiled on a "
        "cold cache, a peer's wall time from building its model to its draws, JIT or compile included, plus its "
        "libraries' import in a fresh interpreter; per second of the sampler: warm-up and draws only, bayesx's "
        "`warmup_time_s + sampling_time_s`, a peer's wall time less the JIT/compile seconds JAX's monitoring "
        "events or nutpie's compile step report) (R-hat, gradients per min-ESS with the warm-up's, worst |mean "
        "error| against the reference draws in reference sds). A dagger marks a run from before the command was "
        "timed (its rate is per second of the run's wall time, imports not included). A run with R-hat > 1.01 is "
        "flagged and does not count as best. Ratios: bayesx NUTS (defaults) and bayesx's best sampler over the "
        "best converged peer, on each clock. nutpie samples the numba-compiled PyMC models "
        "(experiments/pymc_models.py) where its `peer_note` says so. Peers' notes are the runs' `peer_note` tags.",
        "",
        *goals(cells, posteriors, dims),
        "",
        *suite_table(cells, posteriors, dims, why),
        "",
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)


def main(argv: list[str] | None = None) -> int:
    from bayesx.targets.posteriordb import ALL_NAMES as NAMES  # either tier

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posteriors", nargs="+", choices=list(NAMES), metavar="NAME",
                        help="the posteriors to run (with --from: to tabulate; default every one found)")
    parser.add_argument("--peers", nargs="*", default=list(PEER_COLUMNS.values()), choices=list(peers.PEERS))
    parser.add_argument("--bayesx", default="method=nuts,mams", help="bayesx's contenders: sweep overrides, '' for none")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000, help="the peers' warm-up (nutpie: its own)")
    parser.add_argument("--draws", type=int, default=1000, help="the peers' draws per chain (nutpie: its own 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-limit", type=float, default=600.0,
                        help="seconds a peer may run on one posterior before it is stopped and recorded as such")
    parser.add_argument("--warm", action="store_true", help="keep bayesx's compiled-density cache")
    parser.add_argument("--experiment", default=EXPERIMENT, help="MLflow experiment")
    parser.add_argument("--tracking-uri", help="default: the tracking config / MLFLOW_TRACKING_URI")
    parser.add_argument("--note", default="", help="a line for the table's header (e.g. how busy the machine was)")
    parser.add_argument("--out", help="the suite table (markdown)")
    parser.add_argument("--from", dest="sources", nargs=2, action="append", metavar=("URI", "PARENT"),
                        help="run nothing: tabulate the runs of these sweep parents (repeatable; a parent id's "
                             "first characters do)")
    args = parser.parse_args(argv)
    if not args.posteriors and not args.sources:
        parser.error("--posteriors is required (or --from URI PARENT to tabulate earlier runs)")
    args.argv = argv if argv is not None else sys.argv[1:]
    args.jax_dtype, args.mcmc_lengths = "float64", False  # what peers.py's samplers and sweep read
    from bayesx.cli.config import compose
    from bayesx.errors import BayesxError
    from bayesx.store.tracking import Tracker, search_runs

    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if args.sources:
        sources = [(uri, parent) for uri, parent in args.sources]
        if not args.posteriors:
            tabulated = set()
            for uri, parent in sources:
                runs = search_runs(uri, args.experiment)
                runs = runs[runs["tags.mlflow.parentRunId"].astype(str).str.startswith(parent)]
                tabulated.update(runs["params.model.name"].dropna())
            args.posteriors = [name for name in NAMES if name in tabulated]
        write_table(args, sources, started, {}, args.posteriors, search_runs)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="peers_pdb_"))
    try:
        args.tracking_uri = args.tracking_uri or str(compose([]).tracking.uri)
        tracker = Tracker(args.tracking_uri, args.experiment)
        overrides = ["model=posteriordb", f"model.name={','.join(args.posteriors)}"]
        parent = tracker.start_parent(f"peers {' '.join(overrides)}", {"sweep": "parent",
                                                                       "sweep_overrides": " ".join(overrides)})
        print(f"parent run {parent[:8]} in {args.tracking_uri} (experiment {args.experiment})", flush=True)
        env = cold_environment(tmp, args.warm)
        missing: dict[tuple[str, str], str] = {}
        for done, posterior in enumerate(args.posteriors, 1):
            for contender in bayesx_contenders(args.bayesx):
                run_bayesx(posterior, contender, parent, tracker, args, env)
            missing.update(run_peers(args.peers, posterior, parent, tracker, args))
            write_table(args, [(args.tracking_uri, parent)], started, missing, args.posteriors[:done],
                        search_runs)
        tracker.terminate(parent, "FINISHED")
    except BayesxError as exc:
        print(f"peers_posteriordb.py: error: {exc}", file=sys.stderr)
        return 2
    return 0

if __name__ == "__main__":
    sys.exit(main())
