"""results/ through one path: results/README.md cites only files and commands that exist, every table in results/
names the command that made it, every archived table names the commit that made it, and `make results`
(experiments/reproduce.py) covers every preset with published numbers. Each check is a function over text, run on
the real files and, as its negative control, on a made-up page with the fault it looks for."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
ARCHIVE = RESULTS / "archive"
FILE_TOKEN = re.compile(r"`([^`\s]+\.(?:md|png|json|yaml|py|csv))`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
SCRIPT = re.compile(r"\bpython3? (experiments/[\w/]+\.py)")
MODULE = re.compile(r"\bpython3? -m (bayesx(?:\.\w+)*)")
MAKE = re.compile(r"\bmake ([a-z][\w-]*)")
PRESET = re.compile(r"\bexperiment=(\w+)")
# "Made by: `command`", "Command: `...`", or "Made by (...):" with the command in backticks or an indented block
HEADER = re.compile(r"^(?:Made by|Commands?)\b(?:[^`]{0,300}?`[^`]+`|[^\n]*:\n\n(?: {4}.+\n)+)", re.MULTILINE)


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))


def missing_commands(text: str) -> list[str]:
    """The scripts, modules, make targets and presets that ``text`` runs and that do not exist."""
    gone = [s for s in SCRIPT.findall(text) if not (ROOT / s).is_file()]
    gone += [m for m in MODULE.findall(text) if importlib.util.find_spec(m) is None]
    gone += [f"make {t}" for t in MAKE.findall(text) if t not in make_targets()]
    presets = ROOT / "conf" / "experiment"
    gone += [f"experiment={p}" for p in PRESET.findall(text) if not (presets / f"{p}.yaml").is_file()]
    return gone


def missing_files(text: str, here: Path) -> list[str]:
    """The files ``text`` cites (in backticks, or as relative markdown links) that exist neither beside ``here``
    nor from the repository's root (a script may be named alone: ``bench_native.py``); paths in code written for
    another machine (absolute, $OUT, <placeholders>) are not citations of this tree."""
    cited = FILE_TOKEN.findall(text) + [link for link in LINK.findall(text) if "://" not in link]
    return [c for c in cited if not c.startswith(("/", "$")) and not any(ch in c for ch in "*<")
            and not any((base / c).exists() for base in (here, ROOT, ROOT / "experiments"))]


def unnamed_command(text: str) -> str | None:
    """Why a table does not name the command that made it (None if it does): a ``Made by:`` / ``Command:`` line
    near the top with the command in backticks or an indented code block, whose scripts exist."""
    header = "\n".join(text.splitlines()[:40])
    found = HEADER.search(header)
    if found is None:
        return "no 'Made by:' or 'Command:' line with its command in its first 40 lines"
    gone = missing_commands(found.group(0))
    return f"its command runs what does not exist: {', '.join(gone)}" if gone else None


TABLES = sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")


def test_results_readme_cites_only_files_that_exist():
    text = (RESULTS / "README.md").read_text()
    assert missing_files(text, RESULTS) == []
    assert missing_commands(text) == []


def test_results_readme_lists_every_table():
    text = (RESULTS / "README.md").read_text()
    assert [t.name for t in TABLES if f"`{t.name}`" not in text] == []


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_every_table_names_the_command_that_made_it(table):
    assert unnamed_command(table.read_text()) is None


ARCHIVED = sorted(p for p in ARCHIVE.iterdir() if p.name != "README.md")


def test_every_archived_file_is_listed_with_its_commit():
    rows = {}
    for line in (ARCHIVE / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            files, _, commits = line.strip("|").rpartition(" | ")
            for name in FILE_TOKEN.findall(files):
                rows[name] = commits.strip()
    assert sorted(rows) == [p.name for p in ARCHIVED]
    assert all(re.fullmatch(r"[0-9a-f]{7,40}(, [0-9a-f]{7,40})*", c) for c in rows.values()), rows


@pytest.mark.parametrize("table", [p for p in ARCHIVED if p.suffix == ".md"], ids=lambda p: p.name)
def test_every_archived_table_says_where_it_came_from(table):
    assert re.match(r"> Archived: made by .* at commit [0-9a-f]{7,40}\b", table.read_text())


def load_reproduce():
    spec = importlib.util.spec_from_file_location("experiment_reproduce", ROOT / "experiments" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_make_results_covers_every_preset_with_published_numbers():
    names = [r.name for r in load_reproduce().REPRODUCTIONS]
    published = sorted(p.stem for p in (RESULTS / "published").glob("*.yaml"))
    assert sorted(names) == published
    assert all((ROOT / "conf" / "experiment" / f"{n}.yaml").is_file() for n in names)
    assert "results" in make_targets()


def test_the_checks_catch_a_missing_file_a_removed_script_and_a_table_without_its_command():
    page = ("| `gone_table.md` | x | `python experiments/no_such_script.py --out results/x.md` |\n"
            "see [the notes](archive/no_such_notes.md); `make no-such-target`;\n"
            "`bayesx run experiment=no_such_preset`\n")
    assert missing_files(page, RESULTS) == ["gone_table.md", "archive/no_such_notes.md"]
    assert missing_commands(page) == ["experiments/no_such_script.py", "make no-such-target",
                                      "experiment=no_such_preset"]
    assert "no 'Made by:'" in unnamed_command("# A table\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "no_such_script" in unnamed_command("# A table\n\nCommand: `python experiments/no_such_script.py`\n")
    assert unnamed_command("# A table\n\nMade by: `bayesx run -m experiment=ais_toy`\n") is None


def test_the_run_helper_reads_the_runs_bayesx_printed_and_refuses_to_guess():
    """experiments/_runs.py, the scripts' one way to learn their runs: the objects of `bayesx run --json`'s standard
    output, one sweep's parent, and an error (not a guess) where the output does not say which run is meant."""
    spec = importlib.util.spec_from_file_location("experiment_runs", ROOT / "experiments" / "_runs.py")
    runs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = runs
    spec.loader.exec_module(runs)
    out = '{"run_id": "a1", "parent_run_id": "p1", "status": "FINISHED"}\n' \
          '{"run_id": "b2", "parent_run_id": "p1", "status": "FAILED", "error": "diverged"}\n'
    sweep = runs.Launched(1, runs.parse_runs(out))
    assert sweep.parent_run_id == "p1" and not sweep.ok and "b2: diverged" in sweep.failure()
    with pytest.raises(ValueError, match="2 runs"):
        sweep.run
    single = runs.Launched(0, runs.parse_runs('{"run_id": "c3", "parent_run_id": null, "status": "FINISHED"}\n'))
    assert single.ok and single.run["run_id"] == "c3"
    with pytest.raises(ValueError, match="0 sweep parents"):
        single.parent_run_id
    two = runs.Launched(0, runs.parse_runs(out.replace('"p1", "status": "FAILED"', '"p2", "status": "FAILED"')))
    with pytest.raises(ValueError, match="2 sweep parents"):
        two.parent_run_id
