"""Progress where standard error is not a terminal (bayesx.methods.common.progress): a long loop writes a plain line about every
10 s, read from the bar's clock (a fake one here), instead of a redrawn bar or nothing; a short loop writes none."""

from __future__ import annotations

import io

from bayesx.methods.common import progress
from bayesx.methods.common.progress import ChainProgress, ProgressLines, progress_bar


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines_of(out: io.StringIO) -> list[str]:
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text  # plain lines for a log file, no redrawing
    return text.splitlines()


def test_a_long_loop_writes_a_line_every_interval_and_a_last_one():
    clock, out = Clock(), io.StringIO()
    bar = ProgressLines(total=120, desc="nuts sampling", unit="it", leave=False, interval_s=10, clock=clock, file=out)
    for i in range(120):  # 0.5 s per iteration: 60 s in all
        clock.now += 0.5
        bar.update(1)
        bar.set_postfix(accept="0.80")  # a refresh on every call: still at most one line per interval
    bar.close()
    lines = lines_of(out)
    assert len(lines) == 7, lines  # at 10, 20, ..., 60 s, and the last
    assert lines[0] == "nuts sampling: 20/120 (17%), 00:10 elapsed, 00:50 to go, accept=0.80"
    assert lines[-1].startswith("nuts sampling: 120/120 (100%), 01:00 elapsed") and lines[-1].endswith(", done")


def test_a_loop_shorter_than_the_interval_writes_nothing():
    clock, out = Clock(), io.StringIO()
    bar = ProgressLines(total=50, desc="vi", leave=False, interval_s=10, clock=clock, file=out)
    for _ in range(50):
        clock.now += 0.1
        bar.update(1)
    bar.close()
    assert out.getvalue() == ""


def test_a_loop_of_unknown_length_says_how_far_it_got():
    clock, out = Clock(), io.StringIO()
    bar = ProgressLines(total=None, desc="smc stages", unit="stage", leave=False, interval_s=10, clock=clock, file=out)
    for _ in range(25):
        clock.now += 1
        bar.update(1)
    bar.close()
    assert lines_of(out) == ["smc stages: 10, 00:10 elapsed", "smc stages: 20, 00:20 elapsed",
                             "smc stages: 25, 00:25 elapsed, done"]


def test_without_a_terminal_a_bar_writes_lines_and_progress_false_writes_nothing(monkeypatch):
    """Control: the same loop with progress=false writes nothing, and on a terminal the bar is tqdm's own."""
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")  # every update may write a line
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    bar = ChainProgress(3, "nuts", None)
    assert isinstance(bar.bar, ProgressLines)
    for it in range(3):
        bar.bar.update(1)
    bar.close()
    lines = lines_of(err)
    assert [ln.split(" (")[0] for ln in lines] == ["nuts warmup: 1/3", "nuts warmup: 2/3", "nuts warmup: 3/3",
                                                   "nuts warmup: 3/3"] and lines[-1].endswith(", done")

    quiet = io.StringIO()
    monkeypatch.setattr("sys.stderr", quiet)
    off = progress_bar(3, "vi", False)
    off.update(3)
    off.close()
    assert quiet.getvalue() == "" and not isinstance(off, ProgressLines)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    assert not isinstance(progress_bar(3, "vi", None), ProgressLines)


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(progress.INTERVAL_ENV, raising=False)
    assert progress.interval_s() == progress.INTERVAL_S == 10.0
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.25")
    assert progress.interval_s() == 0.25
    monkeypatch.setenv(progress.INTERVAL_ENV, "soon")
    assert progress.interval_s() == 10.0
