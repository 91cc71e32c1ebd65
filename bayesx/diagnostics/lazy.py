"""The deliberately late imports: the heavy libraries a run loads only where it uses them, listed in one place.

Every other import in bayesx sits at the top of its module. These load when first needed (:func:`load`), or, where
the runner knows a run will need them, in a background thread while the method runs (:func:`preload`): the native
sampler releases the GIL, so their loading overlaps warm-up and sampling instead of following them. Loading them
all at the top made ``import bayesx.runner`` take twice ``import torch, mlflow`` (issue 56: 6-10 s against 3-4 s);
``tests/test_run_costs.py`` checks that neither ``import bayesx.runner`` nor the command line's start loads them.

Thread safety: a module being imported in the preload thread is waited for by a main-thread import of it (Python's
per-module import locks); the preloaded modules share no module with what the main thread imports meanwhile (torch's
dynamo, loaded by torch.optim's optimizers in a fit), which was checked by listing both sets; a preload that fails for
any reason is forgotten, and the module is imported again, in the main thread, where it is used.
"""

from __future__ import annotations

import importlib
import logging
import threading
import warnings
from types import ModuleType

LATE_IMPORTS = {
    "arviz": "ESS, R-hat, PSIS, the sampler plots and the draws file (diagnostics.convergence, .importance, .plots); "
             "1.6-2.8 s with xarray and scipy.stats",
    "matplotlib.pyplot": "the run's plots (diagnostics.plots, with the Agg backend); 0.3-0.6 s",
    "h5netcdf": "the draws file, draws.nc (written through ArviZ); 0.2 s",
    "scipy.stats": "the rank transform of the batched ESS and R-hat (diagnostics.convergence); loaded with ArviZ",
    "scipy.special": "the normal quantile of the rank transform (diagnostics.convergence)",
    "torch._dynamo": "loaded by torch itself where it is used (torch.optim's optimizers, which VI's and the VAEs' "
                     "fits use, and make_fx when a density is traced; the mode search of a Laplace start is "
                     "methods.common.lbfgs, which loads nothing); 1.3-3 s",
    "mlflow.store.tracking.sqlalchemy_store": "loaded by MLflow when a SQLite store is opened (store.tracking.Tracker); "
                                              "0.5-1.6 s; a tracking server never needs it",
}
"""Each deliberately late import, with where it is used and what it costs to load (this machine, 2 cores)."""

RUN_LIBRARIES = ("arviz", "matplotlib.pyplot", "h5netcdf")
"""What a sampler's or an approximation's run loads after its method has run: the runner preloads them."""

_lock = threading.Lock()
_threads: dict[str, threading.Thread] = {}


def _import(name: str) -> ModuleType:
    if name == "matplotlib.pyplot":
        import matplotlib

        matplotlib.use("Agg")  # files only, no display; before pyplot picks a backend
    if name == "arviz":
        logging.getLogger("arviz").setLevel(logging.WARNING)
        with warnings.catch_warnings():  # ArviZ announces its 1.0 refactor on import
            warnings.simplefilter("ignore", FutureWarning)
            return importlib.import_module(name)
    return importlib.import_module(name)


def load(name: str) -> ModuleType:
    """The module ``name`` (one of :data:`LATE_IMPORTS`), imported now if it is not yet, after a preload of it in
    flight has finished."""
    with _lock:
        thread = _threads.get(name)
    if thread is not None:
        thread.join()
    return _import(name)


def arviz() -> ModuleType:
    return load("arviz")


def pyplot() -> ModuleType:
    return load("matplotlib.pyplot")


def preload(*names: str) -> threading.Thread | None:
    """Start importing ``names`` (in order) in a daemon thread, unless each is loaded or loading already; returns
    the thread (None: nothing to load). :func:`load` waits for it."""
    import sys

    with _lock:
        wanted = [n for n in names if n not in sys.modules and n not in _threads]
        if not wanted:
            return None

        def work():
            for name in wanted:
                try:
                    _import(name)
                except BaseException:  # noqa: BLE001 - imported again, with its real error, where it is used
                    pass

        thread = threading.Thread(target=work, name="bayesx-preload", daemon=True)
        for name in wanted:
            _threads[name] = thread
    thread.start()
    return thread
