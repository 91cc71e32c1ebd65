"""The run-length state machine (bayesx.methods.mcmc.run_length) on its own: every transition, its boundaries, the
evidence each one reads, and every walk through a grid of rule settings and outcomes. Pure: no sampler runs."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from bayesx.diagnostics import convergence
from bayesx.methods.mcmc.run_length import (
    MIN_DIVERGENT,
    PROBE_DRAWS,
    RHAT_LIMIT,
    Convergence,
    Phase,
    ProbeCount,
    RunLength,
    Stage,
)

PASSING = Convergence(draws=0, rhat_max=1.0, ess_bulk_min=10_000.0)


def passing(n: int) -> Convergence:
    return Convergence(n, 1.0, 10_000.0)


def failing(n: int, rhat: float | None = 1.2, ess: float = 10.0) -> Convergence:
    return Convergence(n, rhat, ess)


# --- warm-up and resume -------------------------------------------------------------------------------------
def test_warmup_goes_to_the_probe_with_a_ladder_and_to_drawing_without():
    with_ladder = RunLength(num_draws=1000, ladder=(0.95, 0.99))
    stage = with_ladder.warmup(0.8)
    assert stage == Stage(Phase.WARMUP, 0.8, (0.95, 0.99), 1000)
    assert with_ladder.next(stage) == Stage(Phase.PROBE, 0.8, (0.95, 0.99), 1000, until=PROBE_DRAWS)
    fixed = RunLength(num_draws=1000)
    assert fixed.next(fixed.warmup(0.8)) == Stage(Phase.DRAW, 0.8, (), 1000, until=1000)


def test_targets_not_above_the_current_one_are_never_climbed_to():
    rules = RunLength(num_draws=100, ladder=(0.9, 0.95))
    assert rules.warmup(0.9).ladder == (0.95,)
    assert rules.next(rules.warmup(0.95)).phase is Phase.DRAW  # nothing left to climb to: no probe


def test_a_short_run_probes_all_its_draws():
    rules = RunLength(num_draws=50, ladder=(0.9,))
    assert rules.next(rules.warmup(0.8)).until == 50


def test_resume_probes_only_a_run_without_draws():
    rules = RunLength(num_draws=100, max_draws=400, ladder=(0.9, 0.95))
    assert rules.resume(0.8, 0, 100).phase is Phase.PROBE
    # checkpoints are written after the probe: a run with draws goes on to the length it had planned
    assert rules.resume(0.9, 60, 300) == Stage(Phase.DRAW, 0.9, (0.95,), 300, until=300)
    assert rules.resume(0.95, 0, 100) == Stage(Phase.DRAW, 0.95, (), 100, until=100)


# --- the probe ------------------------------------------------------------------------------------------------
def test_a_divergent_probe_raises_the_target_and_a_quiet_one_draws_on():
    rules = RunLength(num_draws=1000, ladder=(0.95, 0.99), divergence_limit=0.002)
    probe = rules.next(rules.warmup(0.8))
    raised = rules.next(probe, ProbeCount(divergent=5, transitions=2000))
    assert raised == Stage(Phase.RETUNE, 0.95, (0.99,), 1000, until=0,
                           why="0.8 -> 0.95 (5 of 2000 probe transitions divergent)")
    kept = rules.next(probe, ProbeCount(divergent=4, transitions=2000))  # 0.2% of 2000 is 4: not above the limit
    assert kept == Stage(Phase.DRAW, 0.8, (0.95, 0.99), 1000, until=1000)  # the probe's draws count


@pytest.mark.parametrize("divergent, transitions, raised", [
    (MIN_DIVERGENT - 1, MIN_DIVERGENT, False),  # every transition diverged, but too few to tell from noise
    (MIN_DIVERGENT, MIN_DIVERGENT, True),
    (MIN_DIVERGENT, 10_000, False),  # 0.03%: below the limit
    (20, 10_000, False),  # exactly the limit
    (21, 10_000, True),
    (0, 0, False),
])
def test_the_probe_boundaries(divergent, transitions, raised):
    rules = RunLength(num_draws=100, ladder=(0.9,), divergence_limit=0.002)
    after = rules.next(rules.resume(0.8, 0, 100), ProbeCount(divergent, transitions))
    assert after.phase is (Phase.RETUNE if raised else Phase.DRAW)


def test_a_retune_probes_again_while_targets_are_left_and_then_draws_from_scratch():
    rules = RunLength(num_draws=300, ladder=(0.9, 0.95))
    retune = rules.next(rules.resume(0.8, 0, 300), ProbeCount(100, 1000))
    again = rules.next(retune)
    assert again == Stage(Phase.PROBE, 0.9, (0.95,), 300, until=300)
    last = rules.next(rules.next(again, ProbeCount(100, 1000)))
    assert last == Stage(Phase.DRAW, 0.95, (), 300, until=300)  # the top of the ladder: no probe, every draw new


# --- drawing and extending ------------------------------------------------------------------------------------
def test_a_fixed_run_stops_without_reading_its_draws():
    rules = RunLength(num_draws=100)
    draw = rules.resume(0.8, 0, 100)
    assert not rules.needs_convergence(draw)
    assert rules.next(draw).phase is Phase.STOP


def test_chains_that_fall_short_draw_on_and_stop_at_the_first_pass():
    rules = RunLength(num_draws=100, max_draws=1000, min_ess=400)
    draw = rules.resume(0.8, 0, 100)
    assert rules.needs_convergence(draw)
    extend = rules.next(draw, failing(100))
    assert extend.phase is Phase.EXTEND and (extend.planned, extend.until) == (200, 200)
    assert extend.why == "rhat_max 1.2000 > 1.01 and ess_bulk_min 10 < 400 after 100 draws"
    assert rules.next(extend, failing(200, rhat=1.0)).why == "ess_bulk_min 10 < 400 after 200 draws"
    assert rules.next(extend, failing(200, ess=500.0)).why == "rhat_max 1.2000 > 1.01 after 200 draws"
    assert rules.next(extend, failing(200, rhat=None, ess=500.0)).phase is Phase.STOP  # one chain: no R-hat
    assert rules.next(extend, passing(200)).phase is Phase.STOP


def test_extensions_end_at_max_draws():
    rules = RunLength(num_draws=400, max_draws=1000)
    stage = rules.resume(0.8, 0, 400)
    ends = []
    while stage.phase is not Phase.STOP:
        ends.append(stage.until)
        stage = rules.next(stage, failing(stage.until) if rules.needs_convergence(stage) else None)
    assert ends == [400, 800, 1000]  # the last batch is cut to max_draws, which is never read


def test_num_draws_at_or_above_max_draws_is_a_fixed_run():
    for max_draws in (50, 100):
        rules = RunLength(num_draws=100, max_draws=max_draws)
        assert not rules.needs_convergence(rules.resume(0.8, 0, 100))


def test_the_rhat_limit_is_the_diagnostics():
    assert RHAT_LIMIT == convergence.RHAT_LIMIT


# --- evidence and ends ----------------------------------------------------------------------------------------
def test_each_stage_reads_only_its_own_evidence():
    rules = RunLength(num_draws=100, max_draws=300, ladder=(0.9,))
    with pytest.raises(TypeError, match="ProbeCount"):
        rules.next(rules.resume(0.8, 0, 100), passing(100))
    with pytest.raises(TypeError, match="Convergence"):
        rules.next(rules.resume(0.9, 50, 100), ProbeCount(0, 100))
    with pytest.raises(ValueError, match="stopped"):
        rules.next(Stage(Phase.STOP, 0.8, (), 100))


def test_the_module_imports_nothing_numerical():
    code = "import sys, bayesx.methods.mcmc.run_length; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# --- every walk -------------------------------------------------------------------------------------------------
LADDERS = [(), (0.9,), (0.9, 0.95), (0.8, 0.9)]  # the last one's 0.8 is not above the start's target


@pytest.mark.parametrize("ladder, max_draws", list(itertools.product(LADDERS, (None, 100, 250, 1000))))
def test_every_walk_ends_and_keeps_its_promises(ladder, max_draws):
    """Every sequence of probe outcomes (divergent or not) and of convergence checks (passing or not) over a grid of
    rules: the walk ends, the target only climbs the ladder, each raise follows a divergent probe and precedes a
    re-tune, draws end at num_draws or in whole batches up to max_draws, and the machine asks for no evidence it
    does not use."""
    rules = RunLength(num_draws=100, max_draws=max_draws, ladder=ladder)
    cap = max(100, max_draws or 0)
    for outcomes in itertools.product((True, False), repeat=8):
        answers = iter(outcomes)
        stage, phases = rules.warmup(0.8), []
        while stage.phase is not Phase.STOP:
            phases.append(stage.phase)
            assert len(phases) < 30
            if stage.phase is Phase.PROBE:
                seen = ProbeCount(50, 400) if next(answers, False) else ProbeCount(0, 400)
            elif rules.needs_convergence(stage):
                seen = failing(stage.until) if next(answers, False) else passing(stage.until)
            else:
                seen = None
            after = rules.next(stage, seen)
            assert after.target_accept >= stage.target_accept and after.ladder == tuple(
                t for t in ladder if t > after.target_accept)
            if after.target_accept > stage.target_accept:
                assert stage.phase is Phase.PROBE and after.phase is Phase.RETUNE and after.why
            if after.phase is Phase.EXTEND:
                assert after.until - stage.until == min(100, max_draws - stage.until) and after.until <= cap
            stage = after
        climbed = [t for t in ladder if t > 0.8]
        assert stage.target_accept in (0.8, *climbed) and phases.count(Phase.RETUNE) <= len(climbed)
        assert phases[0] is Phase.WARMUP and (phases.count(Phase.PROBE) > 0) == bool(climbed)
        assert stage.until in (100, *range(200, cap + 1, 100), cap)
