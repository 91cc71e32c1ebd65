"""The GPU check (bayesx/cli/gpu_check.py): its one-line exit without a GPU, and its comparisons, which a
CPU-vs-CPU pair of runs with different seeds passes and a deliberately shifted result fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesx.cli import gpu_check
from bayesx.cli.gpu_check import (Comparison, PairResult, CaseRun, bonferroni_z, compare_draws, compare_relative,
                              compare_runs, compare_scalar, load_run)
from cli_helpers import isolated_store, run_ok

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")


def one_line_reason(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stdout + proc.stderr
    assert "no CUDA device" in lines[0] and "skipped" in lines[0]
    return lines[0]


def env_with_repo() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@NO_CUDA
def test_module_without_cuda_says_so_in_one_line_and_exits_0(tmp_path):
    out = tmp_path / "gpu_check.md"
    proc = subprocess.run([sys.executable, "-m", "bayesx.cli.gpu_check", "--out", str(out)], cwd=tmp_path,
                          env=env_with_repo(), capture_output=True, text=True, timeout=120)
    one_line_reason(proc)
    assert not out.exists(), "nothing ran, so no report is written"


@NO_CUDA
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_check_gpu_without_cuda_says_so_in_one_line_and_exits_0():
    # BIN: this interpreter's folder; STAMP empty: no install step (the suite already runs in an installed env)
    proc = subprocess.run(["make", "-s", "check-gpu", f"BIN={Path(sys.executable).parent}", "STAMP="], cwd=ROOT,
                          env=env_with_repo(), capture_output=True, text=True, timeout=120)
    one_line_reason(proc)


# --- the comparisons on real CPU runs --------------------------------------------------------------
NUTS = ["model=gaussian", "model.dim=5", "model.kind=correlated", "method=nuts", "n_chains=4",
        "method.num_warmup=200", "method.num_draws=300", "device.num_threads=1"]
# Gaussian VI: the same family (approximation) and metrics as a flow, with closed-form gradients (seconds)
VI = ["model=gaussian", "model.dim=3", "model.kind=isotropic", "method=vi", "method.num_draws=2000",
      "device.num_threads=1"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Two CPU runs (seeds 0 and 1) of NUTS and of Gaussian VI on Gaussians, read back from the store as the
    check reads them."""
    with isolated_store(tmp_path_factory, "gpu_check") as (root, uri):
        out = {}
        for name, overrides in (("nuts", NUTS), ("vi", VI)):
            for seed in (0, 1):
                run_name = f"{name}-cpu-seed{seed}"
                run_ok(uri, ["run", *overrides, f"seed={seed}", f"run_name={run_name}", *gpu_check.COMMON])
                record = CaseRun(name, "cpu", [f"seed={seed}"])
                out[name, seed] = load_run(record, uri, root / run_name, run_name=run_name)
        yield out


@pytest.mark.slow  # four real CLI runs: end to end, with the slow suite
def test_a_cpu_pair_with_different_seeds_has_the_same_posterior(pairs):
    a, b = pairs["nuts", 0], pairs["nuts", 1]
    assert a.draws.shape == b.draws.shape == (4, 300, 5)
    assert not np.allclose(a.draws, b.draws), "the seeds must give different draws"
    comparison = compare_draws(a.draws, b.draws)
    assert comparison.passed, comparison
    assert comparison.limit == pytest.approx(bonferroni_z(10))


@pytest.mark.slow  # four real CLI runs: end to end, with the slow suite
@pytest.mark.parametrize("shift", ["mean", "sd"])
def test_a_shifted_posterior_fails_the_comparison(pairs, shift):
    """The negative control: one coordinate's mean moved by half a posterior sd, or its sd made 50% larger."""
    a, b = pairs["nuts", 0].draws, pairs["nuts", 1].draws.copy()
    sd = b[..., 2].std()
    if shift == "mean":
        b[..., 2] += 0.5 * sd
    else:
        b[..., 2] = b[..., 2].mean() + 1.5 * (b[..., 2] - b[..., 2].mean())
    comparison = compare_draws(a, b)
    assert not comparison.passed and comparison.statistic > comparison.limit, comparison
    assert "coord 2" in comparison.detail


@pytest.mark.slow  # four real CLI runs: end to end, with the slow suite
def test_an_approximation_fitted_with_different_seeds_agrees_and_a_shifted_evidence_fails(pairs):
    case = gpu_check.case_by_name("betabinomial-flowvi")  # its allowances, on a fit the same family makes
    a, b = pairs["vi", 0], pairs["vi", 1]
    assert a.draws.shape == (1, 2000, 3)
    comparison = compare_runs(case, a, b)
    assert comparison.passed, comparison
    shifted = CaseRun(b.case, b.device, b.command, 0, b.wall_s, b.run_id,
                        {**b.metrics, "log_evidence": b.metrics["log_evidence"] + 0.5}, b.draws)
    control = compare_runs(case, a, shifted)
    assert not control.passed and "log_evidence" in control.detail, control


def test_scalar_and_relative_comparisons():
    assert compare_scalar("x", 1.0, 0.1, 1.2, 0.1).passed  # z = 1.41 < 2.58
    failed = compare_scalar("x", 1.0, 0.1, 1.5, 0.1)  # z = 3.54
    assert not failed.passed and failed.statistic == pytest.approx(0.5 / np.sqrt(0.02))
    assert compare_scalar("x", 1.0, 0.1, 1.5, 0.1, allowance=0.3).passed  # z = 1.51
    assert not compare_scalar("x", float("nan"), 0.1, 1.0, 0.1).passed
    assert compare_relative("test_elbo", -101.0, -100.0, 0.03).passed
    assert not compare_relative("test_elbo", -110.0, -100.0, 0.03).passed


def test_the_report_lists_a_failed_run_and_its_error(tmp_path):
    case = gpu_check.CASES[0]
    good = CaseRun(case.name, "cpu", ["python", "-m", "bayesx.cli.commands", "run", "seed=0"], 0, 3.0, "abc",
                     {"sampling_time_s": 1.5})
    bad = CaseRun(case.name, "cuda", ["python", "-m", "bayesx.cli.commands", "run", "seed=0"], 2, 1.0,
                    error="bayesx: error: CUDA out of memory")
    ok = PairResult(case, good, good, Comparison(True, 1.0, 3.0, "fine"))
    failed = PairResult(case, bad, good, None)
    args = gpu_check.parse_args(["--out", str(tmp_path / "x.md")])
    text = gpu_check.report([ok, failed], "cuda", args, 60.0, ["vae-mnist"])
    assert "1 of 2 cases agree" in text and "not run (time budget): vae-mnist" in text
    assert "**not compared**" in text and "CUDA out of memory" in text
    assert "    bayesx run seed=0" in text
