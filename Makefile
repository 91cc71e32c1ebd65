# bayesx developer commands. `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH_VERSION := 2.13.0

.PHONY: install run test test-slow test-all test-ray bench bench-gpu bench-gradient busy-machine results check-gpu ui-screenshots clean

install: $(STAMP)

# torch first, pinned, so pip takes the local CPU build instead of multi-GB CUDA wheels; then the native
# kernels are compiled for this machine (without a C compiler it says so, and the PyTorch kernels run)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m bayesx.native.build
	touch $(STAMP)

# OpenMP threads that sleep instead of spinning between the native kernels' parallel regions: on a busy machine
# the default job took 70 s instead of 102 s, two at once 112 s instead of 188 s (results/busy_machine.md)
run: export OMP_WAIT_POLICY ?= passive
run: $(STAMP)
	$(BIN)/bayesx run

# the default suite; the slow end-to-end and statistical tests (subprocess sweeps, a PostgreSQL
# server, SIGKILLed runs, long samplers) run in test-slow; CI runs both. Test files run in parallel
# (pytest-xdist, one worker per core, a file's tests in one worker): most tests wait on subprocesses,
# so on 2 cores the default suite took 6.5 min instead of 16.7 (TEST_WORKERS=0 runs them one by one)
TEST_WORKERS ?= auto
PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PARALLEL)

# the tests that compare wall times (marked timed) run after the others, alone on the machine
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m "slow and not timed" $(PARALLEL)
	$(BIN)/python -m pytest -q -m "slow and timed"

test-all: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL)

# the Ray launcher's tests in an environment of their own, .venv-ray: hydra-ray-launcher pins cloudpickle<3,
# which joblib (bayesx[parallel]) refuses; .venv-ray sees .venv's packages behind its own (a .pth file)
RAY_VENV  := .venv-ray
RAY_STAMP := $(RAY_VENV)/.installed
$(RAY_STAMP): $(STAMP)
	$(PYTHON) -m venv $(RAY_VENV)
	$(BIN)/python -c "import sysconfig; print(f\"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\")" \
		> "$$($(RAY_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/bayesx-venv.pth"
	$(RAY_VENV)/bin/python -m pip install --quiet "hydra-ray-launcher>=1.2"
	touch $(RAY_STAMP)

test-ray: $(RAY_STAMP)
	$(RAY_VENV)/bin/python -m pytest -q -m slow tests/test_launchers.py -k ray

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python experiments/peers.py --bayesx "method=nuts method.init=prior method.mass=diag,dense"
	$(BIN)/bayesx report --experiment bench_samplers

# the native gradient against the numpy/BLAS floor in one process, other builds beside it (results/bench_gradient.md)
bench-gradient: $(STAMP)
	$(BIN)/python experiments/bench_gradient.py --builds --out results/bench_gradient.md

# the default job alone, then two at once (results/busy_machine.md)
busy-machine: $(STAMP)
	$(BIN)/python experiments/busy_machine.py --out results/busy_machine.md

# the published tables again through the one path: each preset (conf/experiment/NAME.yaml) as `bayesx run --json
# experiment=NAME`, then `bayesx report --parent <its sweep> --out results/NAME.md` (experiments/reproduce.py);
# all of them, shortest first (hours on 2 cores), or ONLY="ais_toy svgd_mixture"; `python experiments/reproduce.py
# --list` gives each one's cost (results/README.md)
ONLY ?=
results: $(STAMP)
	$(BIN)/python experiments/reproduce.py $(ONLY)

# the README's screenshots of the MLflow UI (the run table, a sweep's comparison plot), taken by the browser test
# (tests/test_browser_ui.py: headless Chromium on a nuts,vi,pathfinder sweep) into results/ui/
ui-screenshots: $(STAMP)
	BAYESX_UI_SCREENSHOTS=results/ui $(BIN)/python -m pytest -q -m slow tests/test_browser_ui.py

# every method family and the main models from the command line on device=cuda and on the CPU, compared
# within Monte Carlo error, into results/gpu_check.md (bayesx/cli/gpu_check.py); without a GPU: one line, exit 0
check-gpu: $(STAMP)
	$(BIN)/python -m bayesx.cli.gpu_check

# many-chain ChEES and MAMS (1,024 and 4,096 chains) and NUTS against BlackJAX on the same GPU, a 500-d logistic
# regression and a real-data one, into results/bench_gpu_samplers.md (experiments/bench_gpu.py; run it after
# check-gpu; BlackJAX needs jax[cuda] there). Without a GPU it writes the table's rows with empty cells and says why
bench-gpu: $(STAMP)
	$(BIN)/python experiments/bench_gpu.py --device cuda --out results/bench_gpu_samplers.md

clean:
	rm -rf $(VENV) $(RAY_VENV) outputs multirun mlflow.db mlartifacts .pytest_cache
