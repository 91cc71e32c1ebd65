"""A run's plots by family (bayesx.diagnostics.plots) and a sweep's comparison on its parent run
(bayesx.reports.sweep_summary): which files each family gets, which coordinates they show, and what the parent's
description says won."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
from mlflow.tracking import MlflowClient

from bayesx.diagnostics import plots
from bayesx.reports.sweep_summary import BEGIN, END, NOTE_TAG, end_sweep, parent_ended, unique_labels, winners
from bayesx.store.record import RunRecord, RunStart, Summary
from bayesx.store.tracking import Tracker

PNG = b"\x89PNG\r\n\x1a\n"


class FakeMethod:
    """Just what the plots ask of a method: its family and its coordinates worth a look."""

    def __init__(self, family: str):
        self.family = family

    def plot_coordinates(self, draws, k):
        return list(range(min(k, draws.shape[-1])))


def chains(seed: int = 0, n_chains: int = 4, n_draws: int = 120, dim: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n_chains, n_draws, dim))


def hamiltonian_stats(n_chains: int = 4, n_draws: int = 120) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    divergent = np.zeros((n_chains, n_draws), dtype=bool)
    divergent[0, 10] = divergent[2, 50] = True
    return {"energy": rng.normal(size=(n_chains, n_draws)) + 5, "divergent": divergent,
            "accept_prob": rng.uniform(size=(n_chains, n_draws))}


def names(paths: list[Path]) -> list[str]:
    for path in paths:
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 3000, path
    return sorted(p.name for p in paths)


def test_a_hamiltonian_sampler_gets_trace_rank_and_energy_plots(tmp_path):
    out = plots.run_plots(FakeMethod("sampler"), chains(), hamiltonian_stats(), {}, 3, tmp_path, "theta")
    assert names(out) == ["energy.png", "rank.png", "trace.png"]


def test_a_sampler_without_energy_gets_no_energy_plot(tmp_path):
    stats = {"divergent": np.zeros((4, 120), dtype=bool), "accept_prob": np.full((4, 120), 0.3)}
    out = plots.run_plots(FakeMethod("sampler"), chains(), stats, {}, 2, tmp_path, "theta", ["a", "b", "c", "d", "e", "f"])
    assert names(out) == ["rank.png", "trace.png"]


def test_an_approximation_gets_marginals_against_the_reference_and_no_trace(tmp_path):
    draws = chains(n_chains=1, n_draws=800)
    reference = SimpleNamespace(mean=np.zeros(6), sd=np.ones(6))
    draws[..., 4] += 3.0  # the coordinate furthest from the reference
    draws[..., 1] += 1.5
    assert plots.furthest_from_reference(draws, reference.mean, reference.sd, 2) == [4, 1]
    out = plots.run_plots(FakeMethod("approximation"), draws, {}, {}, 2, tmp_path, "theta", reference=reference,
                          khat=1.2)
    assert names(out) == ["marginals.png"]
    (tmp_path / "alone").mkdir()  # without a reference: the method's coordinates, histograms alone
    assert names(plots.run_plots(FakeMethod("approximation"), draws, {}, {}, 2, tmp_path / "alone", "theta")) == [
        "marginals.png"]


def test_a_trainer_gets_its_elbo_curves_and_no_plot_is_made_when_asked_for_none(tmp_path):
    traces = {"train_elbo": [(1, -120.0), (2, -105.0), (3, -101.0)], "test_elbo": [(3, -103.0)],
              "epoch_time_s": [(1, 2.0)]}
    assert names(plots.run_plots(FakeMethod("trainer"), None, {}, traces, 4, tmp_path, "z")) == ["elbo.png"]
    assert plots.run_plots(FakeMethod("trainer"), None, {}, {"epoch_time_s": [(1, 2.0)]}, 4, tmp_path, "z") == []
    assert plots.run_plots(FakeMethod("sampler"), chains(), hamiltonian_stats(), {}, 0, tmp_path, "z") == []


def test_winners_name_the_best_run_per_criterion_and_say_when_runs_tie():
    import pandas as pd

    table = pd.DataFrame({"posterior_mean_err": [0.02, 0.4, float("nan")], "test_accuracy": [1.0, 1.0, 1.0],
                          "ess_bulk_min_per_s": [900.0, float("nan"), float("nan")], "wall_time_s": [30.0, 8.0, 3.0]})
    lines = winners(table, ["nuts", "vi", "pathfinder"])
    assert lines[0].startswith("- lowest posterior_mean_err") and "**nuts** 0.02" in lines[0] and "vi 0.4" in lines[0]
    assert "- test_accuracy: all 3 runs tie at 1" in lines
    assert not any("ess_bulk_min_per_s" in line for line in lines)  # one run reports it: nothing to compare
    assert any(line.startswith("- lowest wall_time_s") and "**pathfinder** 3" in line for line in lines)
    assert unique_labels(["nuts", "nuts", "vi"], ["a1", "b2", "c3"]) == ["nuts a1", "nuts b2", "vi"]


def test_a_sweep_parent_gets_the_comparison_table_plots_and_a_description(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "sweep", str(tmp_path / "artifacts"))
    parent = tracker.start_parent("sweep method=nuts,vi", {"sweep": "parent", "sweep_overrides": "method=nuts,vi"})
    runs = {"nuts": {"posterior_mean_err": 0.03, "ess_bulk_min_per_s": 500.0, "n_grad_evals": 2e4, "wall_time_s": 20.0},
            "vi": {"posterior_mean_err": 0.5, "n_grad_evals": 5e3, "wall_time_s": 5.0, "psis_khat": 1.7}}
    for method, metrics in runs.items():
        start = RunStart(f"{method}-run", {"method": method, "model": "logreg", "data": "digits", "seed": "0"},
                         {"seed": 0}, "seed: 0\n", parent_run_id=parent)
        with tracker.run(start) as run:
            warnings = ("psis_khat = 1.7 > 0.7: q misses mass",) if method == "vi" else ()
            run.store(RunRecord("FINISHED", metrics, summary=Summary(compared=tuple(metrics), warnings=warnings)))
    assert end_sweep(tracker, parent) == "FINISHED"

    client = MlflowClient(tracking_uri=uri)
    files = {a.path for a in client.list_artifacts(parent, "comparison")}
    assert {"comparison/report.md", "comparison/table.csv", "comparison/report.png", "comparison/error_vs_cost.png",
            "comparison/ess_per_s.png"} <= files, files
    report = Path(client.download_artifacts(parent, "comparison/report.md", str(tmp_path))).read_text()
    assert "| nuts |" in report and "| vi |" in report
    note = client.get_run(parent).data.tags[NOTE_TAG]
    assert "**nuts** 0.03" in note and "lowest posterior_mean_err" in note and "psis_khat = 1.7" in note
    assert note.count(BEGIN) == 1 and note.rstrip().endswith(END)
    # the Overview: the answer table and the plot open the description, and the table is the parent's own metrics
    assert "| run | posterior_mean_err | wall_time_s | n_grad_evals | reliable |" in note
    assert "| vi | 0.5 | 5 | 5000 | no: khat 1.7>0.7 |" in note and "| nuts | 0.03 | 20 | 20000 | - |" in note
    assert f"(get-artifact?path=comparison/error_vs_cost.png&run_uuid={parent})" in note
    assert note.index("| run |") < note.index("error_vs_cost.png") < note.index("The winner")
    assert "**pathfinder**" not in note and "fastest): **vi** 5 (unreliable: khat 1.7>0.7)" in note
    assert client.get_run(parent).data.metrics == {
        "posterior_mean_err/nuts": 0.03, "wall_time_s/nuts": 20.0, "n_grad_evals/nuts": 2e4,
        "posterior_mean_err/vi": 0.5, "wall_time_s/vi": 5.0, "n_grad_evals/vi": 5e3}

    parent_ended(tracker, parent, tracker.end_parent(parent))  # ended again (a resumed job settles it): one comparison
    assert client.get_run(parent).data.tags[NOTE_TAG].count(BEGIN) == 1


def test_a_sweep_without_runs_gets_no_comparison(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "sweep", str(tmp_path / "artifacts"))
    parent = tracker.start_parent("sweep seed=0,1", {"sweep": "parent"})
    assert end_sweep(tracker, parent) == "FINISHED"
    client = MlflowClient(tracking_uri=uri)
    assert client.list_artifacts(parent) == [] and NOTE_TAG not in client.get_run(parent).data.tags
