"""The guards of issue 50, untimed: the gradient benchmark writes its ratio to the numpy/BLAS floor, and every
MCMC run records its cost per gradient (grad_cost_us) and the processor and flags it ran with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import isolated_store, run_ok

from bayesx.native import logistic as native

REPO = Path(__file__).resolve().parent.parent
needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler: the native kernels could not be built")


@needs_native
def test_bench_gradient_writes_the_floor_ratio(tmp_path):
    out = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, str(REPO / "experiments" / "bench_gradient.py"), "--rows", "40",
                           "--features", "24", "--repeats", "2", "--target-ms", "0.5", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "floor: numpy X@theta, X.T@r" in text and "pair of chains" in text
    assert "Made by: `python experiments/bench_gradient.py" in text and "Processor:" in text
    ratio = [line for line in text.splitlines() if line.startswith("ratio (bayesx one chain / floor")]
    assert len(ratio) == 1 and float(ratio[0].split(":")[1].split()[0]) > 0


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "grad_cost") as (root, uri):
        yield uri


def test_an_mcmc_run_records_its_cost_per_gradient_and_processor(store):
    run = run_ok(store, ["run", "experiment=quick", "data=digits", "method.num_warmup=30", "method.num_draws=20",
                         "device.num_threads=1", "save_draws=false"])
    metrics, tags = run.data.metrics, run.data.tags
    assert metrics["grad_cost_us"] == pytest.approx(1e6 * metrics["sampling_time_s"] / metrics["n_grad_evals"])
    assert tags["cpu_model"] and tags["native_flags"].startswith("-O3")
    assert int(tags["cpus_usable"]) >= 1
