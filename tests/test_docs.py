"""The user documentation: README.md is a quickstart (at most 200 lines, none over 300 characters, no issue
numbers or dates), and every relative link in README.md and docs/*.md points to a file that exists."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
OWN_DOCS = [p for p in DOCS if p.name != "server.md"]  # docs/server.md is written with the server's code

MAX_LINES = 200
MAX_LINE_CHARS = 300
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
ISSUE = re.compile(r"\bissues?\s+#?\d+|\(#\d|\bsessions?\s+\d", re.IGNORECASE)  # "issue 4", "(#12)", "session 3"
DATE = re.compile(r"\b20\d\d-\d\d(-\d\d)?\b")


def anchored_links(text: str) -> list[tuple[str, str]]:
    """(path, anchor) of the markdown links and images in ``text`` that stay in this repository (no scheme); path
    "" for a link to an anchor of the same page, anchor "" for none. Links inside code spans and fenced blocks are
    not links."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    found = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        found.append((unquote(path), anchor))
    return found


def relative_links(text: str) -> list[str]:
    """The paths of the links in ``text`` that are files of this repository, without their #anchor."""
    return [path for path, _ in anchored_links(text) if path]


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors of a markdown page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, flags=re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


def test_link_finder_sees_links_and_images_and_skips_urls_and_code():
    text = ("[a](docs/cli.md) ![shot](results/ui/run_table.png \"title\") [b](docs/config.md#model) "
            "[c](https://example.org/x) [d](#top) `[e](not/a/link.md)`\n```\n[f](nor/this.md)\n```\n")
    assert relative_links(text) == ["docs/cli.md", "results/ui/run_table.png", "docs/config.md"]


def test_readme_is_a_quickstart():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES} (reference goes to docs/)"
    long = [(i + 1, len(line)) for i, line in enumerate(lines) if len(line) > MAX_LINE_CHARS]
    assert not long, f"README.md lines over {MAX_LINE_CHARS} characters (line, length): {long}"


@pytest.mark.parametrize("page", [README, *OWN_DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_or_dates(page):
    text = page.read_text(encoding="utf-8")
    issues = sorted({m.group(0) for m in ISSUE.finditer(text)})
    if page == README:  # the README has no in-page anchors, so any "(#" is an issue reference
        issues += ["(#"] * ("(#" in text)
    dates = sorted({m.group(0) for m in DATE.finditer(text)})
    assert not issues, f"{page.name} refers to issues or sessions: {issues}"
    assert not dates, f"{page.name} has dates: {dates}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(page):
    missing = [t for t in relative_links(page.read_text(encoding="utf-8")) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_anchors_point_to_headings(page):
    broken = []
    for path, anchor in anchored_links(page.read_text(encoding="utf-8")):
        target = page.parent / path if path else page
        if anchor and target.suffix == ".md" and target.is_file():
            if anchor not in heading_anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{path}#{anchor}")
    assert not broken, f"{page.relative_to(ROOT)} links to headings that do not exist: {broken}"


def test_heading_anchors_follow_github():
    assert heading_anchors("# Tracking: stores\n## The compiled path (`device.compile`)\n### hydra/launcher and x\n") == {
        "tracking-stores", "the-compiled-path-devicecompile", "hydralauncher-and-x"}


def test_every_docs_page_is_reachable_from_the_readme():
    """Every docs page is linked from the README, or from a page the README links (directly or not)."""
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen or not page.is_file() or page.suffix != ".md":
            continue
        seen.add(page)
        todo += [(page.parent / t).resolve() for t in relative_links(page.read_text(encoding="utf-8"))]
    unreachable = [p.name for p in DOCS if p.resolve() not in seen]
    assert not unreachable, f"docs pages no link from the README leads to: {unreachable}"



def test_issue_and_date_patterns():
    for text in ("see issue 4", "Issues 36, 37", "fixed (#12)", "in session 3", "measured 2026-11-24"):
        assert ISSUE.search(text) or DATE.search(text), text
    for text in ("[run](#bayesx-run)", "a session lent a GPU", "10,000 draws", "mnist10k", "k-hat 0.7"):
        assert not (ISSUE.search(text) or DATE.search(text)), text


def test_readme_own_model_example_is_the_file_and_runs():
    """The README's own-model function is examples/eight_schools_constrained.py's noncentered, and it loads with the
    README's declaration: batched over chains, finite with a gradient at the start, reported by the declared names."""
    import torch

    from bayesx.targets.custom import CustomModel

    example = (ROOT / "examples" / "eight_schools_constrained.py").read_text(encoding="utf-8")
    function = example[example.index("def noncentered"):example.index("def centered")].strip()
    readme = README.read_text(encoding="utf-8")
    assert function.replace('    """p.mu (...,), p.tau (...,) > 0, p.eta (..., 8) -> log p(mu, tau, eta | y) up to a '
                            'constant."""\n', "").split("\n", 1)[1] in readme, \
        "the README's noncentered differs from the example file's"
    assert "'model.params={mu: real, tau: positive, eta: \"real[8]\"}'" in readme
    model = CustomModel(log_density=f"{ROOT}/examples/eight_schools_constrained.py:noncentered",
                        params={"mu": "real", "tau": "positive", "eta": "real[8]"})
    assert model.reported_names()[:3] == ["mu", "tau", "eta[0]"]
    q = torch.zeros(3, 10, dtype=model.dtype, requires_grad=True)
    value = model.log_prob(q)
    assert value.shape == (3,) and torch.isfinite(value).all()
    (grad,) = torch.autograd.grad(value.sum(), q)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def _method_table_names(text: str) -> set[str]:
    """The method names of docs/methods.md's tables: a row's first cell, `name` (with an optional "(default)")."""
    return {m.group(1) for m in re.finditer(r"^\| `([a-z_]+)`", text, re.MULTILINE)}


def test_every_method_config_has_a_row_in_the_methods_page():
    """Each conf/method/NAME.yaml is a `bayesx run method=NAME` a user can pick: docs/methods.md has a row for it.
    Control: a name no config has is not found, and a page without the row would be caught."""
    from bayesx.methods.registry import method_choices

    names = set(method_choices())
    page = (ROOT / "docs" / "methods.md").read_text()
    documented = _method_table_names(page)
    assert names - documented == set(), f"methods without a row in docs/methods.md: {sorted(names - documented)}"
    assert "mams" in documented and "mams" not in _method_table_names(page.replace("| `mams` |", "| mams |"))
