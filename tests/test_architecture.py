"""The package layout ARCHITECTURE.md describes, checked from the source: no import circle among bayesx's modules
nor among its packages (``kernels``, ``methods``, ``store``, ... and the top-level modules, each its own node), at
most eight top-level modules, and MLflow imported only by the store and the serving package.

Imports are read from the syntax tree (every ``import`` and ``from ... import``, at module level or inside a
function), so an import deferred into a function to dodge a circle at load time still counts as an edge.
Each check runs first on a small synthetic case that must fail it (its negative control).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bayesx"
MAX_TOP_LEVEL = 8
MLFLOW_PACKAGES = ("bayesx.store", "bayesx.serve")  # the only packages whose modules may import mlflow


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imported_names(source: str, name: str, is_package: bool) -> set[str]:
    """Every dotted name the module imports: ``import a.b`` gives a.b, ``from a import b`` gives a.b (the caller
    shortens it to the module it names: a.b where b is a submodule, else a); relative imports resolved against
    the module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.update(f"{base}.{alias.name}" for alias in node.names)  # a.b where b is not a module: a
    return found


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the bayesx modules it imports (a name resolves to the longest known module it starts with)."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = set()
        for target in imported_names(path.read_text(), name, path.name == "__init__.py"):
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                edges.add(".".join(parts))
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, colouring nodes on the stack)."""
    on_stack: dict[str, int] = {}
    done: set[str] = set()
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        on_stack[node] = len(stack)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                return stack[on_stack[nxt]:] + [nxt]
            if nxt not in done:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        del on_stack[node]
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def package_of(module: str) -> str:
    """The package a module belongs to: ``bayesx.methods.mcmc.nuts`` -> ``methods``; a top-level module is its own
    (``bayesx.runner`` -> ``runner``), and ``bayesx`` itself is ``bayesx``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the packages its modules import (an edge of the module graph between two packages)."""
    out: dict[str, set[str]] = {}
    for module, edges in graph.items():
        here = package_of(module)
        out.setdefault(here, set()).update(p for p in map(package_of, edges) if p != here)
    return out


def top_level_modules(package: Path = PACKAGE) -> list[str]:
    return sorted(p.name for p in package.glob("*.py"))


def mlflow_importers(known: dict[str, Path]) -> list[str]:
    """The modules outside store/ and serve/ that import mlflow."""
    outside = []
    for name, path in known.items():
        names = imported_names(path.read_text(), name, path.name == "__init__.py")
        if any(n == "mlflow" or n.startswith("mlflow.") for n in names) and not name.startswith(MLFLOW_PACKAGES):
            outside.append(name)
    return sorted(outside)


# -- negative controls: each check must see the fault it is for ---------------------------------------------------

def _synthetic_package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "bayesx"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def test_cycle_finder_finds_a_circle_through_a_deferred_import(tmp_path):
    package = _synthetic_package(tmp_path, {
        "__init__.py": "",
        "store/__init__.py": "",
        "store/tracking.py": "def end():\n    from bayesx.reports import summary\n",
        "reports/__init__.py": "",
        "reports/summary.py": "from bayesx.reports.table import render\n",
        "reports/table.py": "from .. store import tracking\n",
        "leaf.py": "import os\n",
    })
    graph = import_graph(modules(package))
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert set(cycle) == {"bayesx.store.tracking", "bayesx.reports.summary", "bayesx.reports.table"}
    del graph["bayesx.reports.table"]
    assert find_cycle(graph) is None


def test_package_cycle_finder_finds_a_circle_of_packages_without_one_of_modules(tmp_path):
    """kernels.a -> nn.b -> methods.c -> kernels.d: no module imports itself back, but the packages go round."""
    package = _synthetic_package(tmp_path, {
        "__init__.py": "", "kernels/__init__.py": "", "nn/__init__.py": "", "methods/__init__.py": "",
        "kernels/a.py": "from bayesx.nn import b\n",
        "nn/b.py": "def f():\n    from bayesx.methods.c import g\n",
        "methods/c.py": "import bayesx.kernels.d\n",
        "kernels/d.py": "import os\n",
    })
    graph = import_graph(modules(package))
    assert find_cycle(graph) is None
    cycle = find_cycle(package_graph(graph))
    assert cycle is not None and set(cycle) == {"kernels", "nn", "methods"}


def test_top_level_count_and_mlflow_rule_see_a_violation(tmp_path):
    files = {f"m{i}.py": "" for i in range(MAX_TOP_LEVEL + 1)}
    files.update({"store/__init__.py": "", "store/ok.py": "import mlflow\n",
                  "runner_like.py": "def f():\n    from mlflow.tracking import MlflowClient\n"})
    package = _synthetic_package(tmp_path, files)
    assert len(top_level_modules(package)) > MAX_TOP_LEVEL
    assert mlflow_importers(modules(package)) == ["bayesx.runner_like"]


# -- the checks on bayesx itself ------------------------------------------------------------------------------------

def test_no_import_circle_among_bayesx_modules():
    graph = import_graph(modules())
    assert len(graph) > 100 and sum(map(len, graph.values())) > 200  # the graph was really read
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_import_circle_among_bayesx_packages():
    """The packages form layers (a package imports only those below it), function-level imports included."""
    packages = package_graph(import_graph(modules()))
    assert {"kernels", "methods", "store", "cli", "runner"} <= set(packages)  # the graph was really read
    cycle = find_cycle(packages)
    assert cycle is None, "import circle between packages: " + " -> ".join(cycle)


def test_at_most_eight_top_level_modules():
    names = top_level_modules()
    assert len(names) <= MAX_TOP_LEVEL, f"{len(names)} top-level modules in bayesx/: {', '.join(names)}"


def test_only_store_and_serve_import_mlflow():
    known = modules()
    assert any(name.startswith("bayesx.store") for name in known)
    assert mlflow_importers(known) == [], "import mlflow outside bayesx/store and bayesx/serve"


def test_experiment_scripts_reach_mlflow_through_the_store():
    scripts = sorted((ROOT / "experiments").glob("*.py"))
    direct = [p.name for p in scripts
              if any(n == "mlflow" or n.startswith("mlflow.") for n in imported_names(p.read_text(), p.stem, False))]
    assert direct == [], f"experiment scripts importing mlflow directly (use bayesx.store): {direct}"
