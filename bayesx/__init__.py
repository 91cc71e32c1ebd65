"""bayesx: a command-line experiment runner for scalable Bayesian inference.

Importing bayesx first gives the libraries it loads a writable cache: ArviZ creates ``~/.cache/arviz`` when it is
imported (and stops with a traceback where it cannot), matplotlib wants ``~/.config/matplotlib`` and
``~/.cache/matplotlib`` (and warns where it cannot), torch keeps its hub under ``~/.cache/torch`` and Triton under
``~/.triton``. Where ``$XDG_CACHE_HOME`` (default ``~/.cache``) or ``$XDG_CONFIG_HOME`` (default ``~/.config``) cannot
be written (a read-only home on a cluster node, a home that does not exist, a service user's), they are pointed at
a private folder under the system's temporary folder (:func:`writable_library_caches`); a library's own variable
that the user set is never changed. bayesx's data cache is not moved (a read-only home may hold data sets to read), nor its built C
kernels where the home holds them.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__version__ = "0.1.0"


def _writable(folder: Path) -> bool:
    """Whether ``folder`` exists or can be created, and this process can create files in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def _private_temporary_folder() -> Path:
    """This user's folder for library caches under the temporary folder, shared by its processes (a sweep's
    jobs): ``bayesx-<uid>-cache``, used only where it is a real folder this user owns and no one else may
    write (a name in a shared /tmp could have been made by someone else), else a fresh one."""
    folder = Path(tempfile.gettempdir()) / f"bayesx-{os.getuid()}-cache"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022:
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="bayesx-cache-"))


def writable_library_caches(environ=os.environ) -> dict[str, str]:
    """Point the caches of the libraries bayesx imports at a private temporary folder where the user's cache or
    config folder cannot be written; returns the variables it set (none where they can be written). An
    unwritable ``XDG_CACHE_HOME`` or ``XDG_CONFIG_HOME`` is replaced (that is the problem); a library's own
    variable (``MPLCONFIGDIR``, ``TORCH_HOME``, ``TRITON_HOME``, ``BAYESX_CACHE_DIR``) that the user set is left as
    it is."""
    home = Path(os.path.expanduser("~"))
    wanted = {}
    if not _writable(Path(environ.get("XDG_CACHE_HOME") or home / ".cache")):
        wanted.update(XDG_CACHE_HOME="cache", TORCH_HOME="cache/torch")  # ArviZ (platformdirs), matplotlib, torch
        if not (home / ".cache" / "bayesx" / "native").is_dir():  # else its built kernels are read where they are
            wanted["BAYESX_CACHE_DIR"] = "cache/bayesx"  # the native C kernels are built there
    if not _writable(Path(environ.get("XDG_CONFIG_HOME") or home / ".config")):
        wanted.update(XDG_CONFIG_HOME="config", MPLCONFIGDIR="config/matplotlib")
    if not os.access(home, os.W_OK | os.X_OK):
        wanted["TRITON_HOME"] = "triton"  # Triton compiles GPU kernels into ~/.triton
    chosen = {key: sub for key, sub in wanted.items() if key.startswith("XDG_") or not environ.get(key)}
    if not chosen:
        return {}
    root = _private_temporary_folder()
    changed = {key: str(root / sub) for key, sub in chosen.items()}
    environ.update(changed)
    return changed


writable_library_caches()

# OpenMP threads that finish a parallel region sleep instead of spinning (GNU OpenMP's default spins for a while):
# on a machine busy with other work a spinning thread takes a core another process needs (the default job alone
# 70 s with passive threads against 102 s spinning, two at once 112 s against 188 s: results/busy_machine.md).
# Read by the OpenMP runtime when it starts, so it is set before torch or the native kernels load; a value the
# user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
