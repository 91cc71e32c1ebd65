"""What a run costs beyond its method (issue 56, parts 3 and 6): the heavy libraries load only where they are used
(bayesx.diagnostics.lazy: neither ``import bayesx.runner`` nor the command line's start loads them), and a run records
the seconds of each stage and its peak memory. Correctness checks only: the timings are the benchmark's
(experiments/bench_fixed_costs.py), never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import isolated_store, run_ok

import bayesx
from bayesx import memory
from bayesx.diagnostics import lazy

REPO = Path(bayesx.__file__).resolve().parent.parent
HEAVY = ("arviz", "matplotlib", "matplotlib.pyplot", "torch._dynamo", "h5netcdf", "xarray", "scipy.stats",
         "mlflow.store.tracking.sqlalchemy_store", "sympy")
STAGES = ("setup_time_s", "method_time_s", "evaluate_time_s", "diagnostics_time_s", "files_time_s", "summary_time_s",
          "plots_time_s", "record_time_s")


def loaded_after(code: str) -> list[str]:
    """The HEAVY modules in sys.modules after ``code`` runs in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_runner_loads_no_heavy_library():
    assert loaded_after("import bayesx.runner") == []


def test_the_command_lines_start_loads_no_heavy_library():
    """What `bayesx run` imports before a job starts: the commands, Hydra's composition of the config, the sweep
    callback and the runner, and the methods' and models' modules that Hydra's `_target_`s name."""
    code = ("from bayesx.cli.commands import main\nimport bayesx.cli.sweep, bayesx.runner\n"
            "from bayesx.cli.config import compose\ncfg = compose(['method=nuts'])\n"
            "import bayesx.methods.mcmc.nuts, bayesx.methods.vi.gaussian, bayesx.targets.logreg, bayesx.targets.custom")
    assert loaded_after(code) == []


def test_building_a_users_density_loads_no_heavy_library():
    """A user's float64 density is run once under the float32 check (bayesx.targets.precision) when it is built:
    a torch function mode, which loads no dynamo. Control: a dispatch mode, what the check used before, does."""
    density = f"{REPO}/examples/poisson_groups.py:log_density"
    data = f"{REPO}/examples/poisson_groups.npz"
    assert loaded_after("from bayesx.targets.custom import CustomModel\nimport torch\n"
                        f"CustomModel(log_density={density!r}, dim=4, data_file={data!r}, dtype=torch.float64)") == []
    control = ("import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
               "class Seen(TorchDispatchMode):\n"
               "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
               "        return func(*args, **(kwargs or {}))\n"
               "with Seen():\n    torch.ones(2) * 2")
    assert "torch._dynamo" in loaded_after(control)


def test_a_small_laplace_starts_hessian_loads_no_heavy_library():
    """The Laplace start's Hessian of a small density is one backward pass a row (optimize.LOOPED_ROWS_UP_TO):
    torch's vmap (``is_grads_batched``), which larger ones use, loads sympy on its first call (the control)."""
    code = ("import torch\nfrom bayesx.methods.common.optimize import autograd_hessian\n"
            "autograd_hessian(lambda q: -(q ** 4).sum() - torch.sin(q).sum(), torch.ones({}, dtype=torch.float64))")
    assert loaded_after(code.format(4)) == []
    assert "sympy" in loaded_after(code.format(100))


def test_the_check_sees_a_heavy_import():
    """Negative control: the same check finds ArviZ once a module that uses it has run."""
    assert "arviz" in loaded_after("from bayesx.diagnostics import lazy\nlazy.arviz()")


def test_a_preload_is_waited_for_and_loads_its_modules():
    code = ("from bayesx.diagnostics import lazy\nthread = lazy.preload('arviz', 'matplotlib.pyplot')\n"
            "assert thread is not None\naz = lazy.arviz()\nassert hasattr(az, 'ess')\nthread.join()\n"
            "import matplotlib\nassert matplotlib.get_backend().lower() == 'agg'\n"
            "assert lazy.preload('arviz') is None  # loaded: nothing to do")
    assert {"arviz", "matplotlib.pyplot"} <= set(loaded_after(code))


def test_every_late_import_is_listed_with_its_reason():
    assert set(lazy.RUN_LIBRARIES) <= set(lazy.LATE_IMPORTS)
    assert all(reason for reason in lazy.LATE_IMPORTS.values())


def test_the_peak_is_the_processs_high_water_mark():
    peak = memory.peak_resident_bytes()
    if peak is None:
        pytest.skip("no /proc/self/status here")
    assert peak >= memory.resident_bytes() * 0.99
    if memory.reset_peak():  # after a reset the mark starts again near what the process holds now
        assert memory.peak_resident_bytes() <= max(peak, memory.resident_bytes() * 1.5)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "run_costs") as found:
        yield found


def test_a_run_records_its_stages_and_its_peak_memory(store):
    _, uri = store
    run = run_ok(uri, ["run", "experiment=quick", "data=digits", "method=nuts", "method.num_warmup=40",
                       "method.num_draws=40", "device.num_threads=1", "progress=false"])
    metrics = run.data.metrics
    missing = [k for k in (*STAGES, "peak_memory_gb") if k not in metrics]
    assert not missing, missing
    assert 0.05 < metrics["peak_memory_gb"] < memory.host_available()[0] / memory.GB + metrics["peak_memory_gb"]
    parts = metrics["setup_time_s"] + metrics["method_time_s"] + metrics["record_time_s"]
    assert parts <= metrics["wall_time_s"] + 1e-6  # the stages are parts of the run's wall time
    record_parts = sum(metrics[k] for k in STAGES[2:-1])
    assert record_parts <= metrics["record_time_s"] + 1e-6
    assert metrics["method_time_s"] >= metrics["sampling_time_s"]


def test_the_processs_own_command_freezes_the_collector_and_an_in_process_call_does_not():
    """The command line's own call (no argv) ends with gc.freeze(), so the interpreter's exit skips collecting the
    libraries' objects; a caller that passes argv (the tests, a script) keeps its collector as it was."""
    code = ("import gc, sys\nfrom bayesx.cli.commands import main\nmain(['--help'])\nbefore = gc.get_freeze_count()\n"
            "sys.argv = ['bayesx', '--help']\nmain()\nprint(before, gc.get_freeze_count() > 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "0 True"
