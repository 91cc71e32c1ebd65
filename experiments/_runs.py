"""The one way the experiment scripts start ``bayesx run`` and learn which runs it made.

A script runs ``bayesx run --json`` in a subprocess and reads the runs from what that command prints on standard
output: one JSON object per run (a sweep: one per job), each with its ``run_id``, ``parent_run_id``, ``status``,
``metrics`` and ``tags`` (bayesx/store/outputs.py). It never looks the run up as "the newest run by start time" in the
store, which is wrong as soon as two commands share a store (two scripts, or a user's run beside a benchmark).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Launched:
    """What one ``bayesx run --json`` command did: its exit status, its runs (job order) and its standard error
    (empty where it went to the terminal)."""

    returncode: int
    runs: list[dict] = field(default_factory=list)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.runs) and all(r.get("status") == "FINISHED" for r in self.runs)

    @property
    def run(self) -> dict:
        """The single run of a single-run command."""
        if len(self.runs) != 1:
            raise ValueError(f"bayesx run printed {len(self.runs)} runs; expected one (a sweep? read .runs)")
        return self.runs[0]

    @property
    def parent_run_id(self) -> str:
        """The sweep's parent run id, as each of its jobs carries it."""
        parents = {r.get("parent_run_id") for r in self.runs} - {None}
        if len(parents) != 1:
            raise ValueError(f"bayesx run printed runs of {len(parents)} sweep parents; expected one sweep")
        return parents.pop()

    def failure(self, tail: int = 2000) -> str:
        """One paragraph on why the command failed: the runs' own errors, else the end of its standard error."""
        errors = [f"{r.get('run_id') or 'job ' + str(r.get('job'))}: {r['error']}" for r in self.runs if r.get("error")]
        return "; ".join(errors) or self.stderr.strip()[-tail:] or f"exit status {self.returncode}"


def parse_runs(stdout: str) -> list[dict]:
    """The run objects of ``bayesx run --json``'s standard output (JSON Lines; nothing else is printed there)."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def bayesx_run(overrides: list[str], *, env: dict | None = None, echo: bool = True,
               show_stderr: bool = False, cwd: Path = ROOT) -> Launched:
    """``python -m bayesx run --json OVERRIDES`` (a sweep if they contain ``-m`` or a MULTIRUN preset); with
    ``show_stderr`` its progress and summaries go to this process's terminal, else they are kept in ``stderr``."""
    command = [sys.executable, "-m", "bayesx", "run", "--json", *overrides]
    if echo:
        print("$ bayesx " + shlex.join(command[3:]), flush=True)
    done = subprocess.run(command, cwd=cwd, env=env if env is not None else dict(os.environ),
                          stdout=subprocess.PIPE, stderr=None if show_stderr else subprocess.PIPE, text=True)
    return Launched(done.returncode, parse_runs(done.stdout), done.stderr or "")
