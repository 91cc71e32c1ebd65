"""How long a sampler runs after warm-up (bayesx.methods.mcmc.run_length): the divergence probe that raises the
target acceptance, and drawing on until R-hat and the ESS pass; each with the fixed run as its control."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from bayesx.store.checkpoint import Resume, RunCheckpoint, load_resume
from bayesx.diagnostics.convergence import summarize
from bayesx.errors import BayesxError
from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.chees import Chees
from bayesx.methods.mcmc.mams import MAMS
from bayesx.methods.mcmc.nuts import NUTS
from bayesx.methods.mcmc.collect import KeptDraws
from bayesx.methods.mcmc.run_length import PROBE_DRAWS, Convergence, RunLength
from bayesx.targets.gaussian import Gaussian
from bayesx.targets.posteriordb.target import PosteriorDB


def run(method, target, seed=0, n_chains=4, **inputs):
    gen = torch.Generator().manual_seed(seed)
    return method.sample(target, RunInputs(target.initial_point(n_chains, gen), gen, progress=False, **inputs))


def test_the_divergence_rule_needs_both_the_share_and_a_few_divergences():
    rule = RunLength(num_draws=1000, ladder=(0.95,), divergence_limit=0.002)
    assert not rule.too_divergent(4, 2000) and rule.too_divergent(5, 2000)  # 0.2% of 2000 is 4
    assert not rule.too_divergent(2, 100)  # 2% of a short probe, but two divergences are noise
    assert rule.probe_draws() == PROBE_DRAWS and RunLength(num_draws=1000).probe_draws() == 0
    assert RunLength(num_draws=50, ladder=(0.9,)).probe_draws() == 50


def seen(draws: np.ndarray) -> Convergence:
    """What the driver hands the rules of draws (chains, n, dim)."""
    kept = KeptDraws(1, Resume(draws, {}, {}))
    return kept.convergence()


def test_more_draws_for_chains_that_disagree_and_none_for_chains_that_agree():
    rng = np.random.default_rng(0)
    rule = RunLength(num_draws=1000, max_draws=3000)
    agree = rng.normal(size=(4, 1000, 3))
    assert rule.more_draws(seen(agree)) == (0, "")
    apart = agree + np.arange(4)[:, None, None]  # each chain in its own place
    more, why = rule.more_draws(seen(apart))
    assert more == 1000 and why.startswith("rhat_max") and "after 1000 draws" in why
    assert rule.more_draws(seen(rng.normal(size=(4, 2500, 3)) + np.arange(4)[:, None, None]))[0] == 500  # max_draws
    assert RunLength(num_draws=1000).more_draws(seen(apart)) == (0, "")  # no max_draws: a fixed run
    short = RunLength(num_draws=50, max_draws=400).more_draws(seen(rng.normal(size=(4, 50, 3))))
    assert short[0] == 50 and "ess_bulk_min" in short[1]
    one_chain = seen(rng.normal(size=(1, 50, 3)))  # R-hat needs two chains: only the ESS is read
    assert one_chain.rhat_max is None and "rhat" not in RunLength(num_draws=50, max_draws=400).more_draws(one_chain)[1]


def test_a_posterior_that_diverges_raises_the_target_and_the_control_does_not(tmp_path, monkeypatch):
    """posteriordb's gp_pois_regr with a dense metric diverges on ~0.5-1.4% of its transitions at target 0.8: the
    probe's draws are dropped, the target goes to 0.95, and the kept draws are exactly num_draws from it, with
    fewer divergences per transition. The control, without a ladder, stays at 0.8.

    The divergences of one seed are too few to compare (2,000 transitions; on plain C, seeds 0-5 gave 14, 0, 1,
    18, 14, 0 divergences raised against 27, 13, 10, 22, 24, 12 fixed), so four seeds are pooled: the control must
    diverge (at least 20 in all; one seed alone can give 5, as seed 0 did once the Laplace start's small Hessian
    became one backward pass a row, a rounding-level change of the start), and the raised runs' share of all
    divergences must be below one half by a one-sided binomial test at 1% (seeds 0-3: 33 of 105, p ~ 1e-4)."""
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BAYESX_COMPILE", "always")  # its density as plain C (a second): the PyTorch path takes minutes
    gp = PosteriorDB(name="gp_pois_regr")
    options = dict(num_warmup=300, num_draws=500, mass="dense", init="laplace")
    raised = run(NUTS(**options, raise_target_accept=(0.95,)), gp)
    fixed = run(NUTS(**options), gp)
    assert raised.metrics["target_accept_final"] == 0.95 and "0.8 -> 0.95" in raised.tags["raised_target_accept"]
    assert "target_accept_final" not in fixed.metrics and "raised_target_accept" not in fixed.tags
    assert raised.draws.shape == fixed.draws.shape == (4, 500, 13)
    counts = {"raised": int(raised.sample_stats["divergent"].sum()), "fixed": int(fixed.sample_stats["divergent"].sum())}
    for seed in (1, 2, 3):
        counts["raised"] += int(run(NUTS(**options, raise_target_accept=(0.95,)), gp, seed=seed).sample_stats["divergent"].sum())
        counts["fixed"] += int(run(NUTS(**options), gp, seed=seed).sample_stats["divergent"].sum())
    total = counts["raised"] + counts["fixed"]
    p_value = sum(math.comb(total, k) for k in range(counts["raised"] + 1)) / 2**total
    assert counts["fixed"] >= 20 and p_value < 0.01, (counts, p_value)  # the control diverges; the ladder divides that
    # what the dropped probe cost is warm-up: more warm-up gradients than the fixed run's
    assert raised.metrics["n_grad_evals_warmup"] > fixed.metrics["n_grad_evals_warmup"]


def test_a_gaussian_that_never_diverges_keeps_its_target():
    target = Gaussian(dim=5, kind="scaled", condition=10.0)
    out = run(NUTS(num_warmup=200, num_draws=300, init="prior", raise_target_accept=(0.95,)), target)
    assert out.metrics["target_accept_final"] == 0.8 and "raised_target_accept" not in out.tags
    assert out.draws.shape == (4, 300, 5)


def test_short_chains_draw_on_until_the_ess_passes_and_a_fixed_run_does_not():
    target = Gaussian(dim=3)
    options = dict(num_warmup=100, num_draws=40, init="prior")
    extended = run(NUTS(**options, max_draws=2000, min_ess=400), target)
    fixed = run(NUTS(**options), target)
    assert fixed.draws.shape[1] == 40
    n = extended.draws.shape[1]
    assert 40 < n < 2000 and n % 40 == 0 and "ess_bulk_min" in extended.tags["extended"]
    assert extended.tags["extended"].startswith(f"{n // 40 - 1} times: ") and extended.metrics["draws_per_chain"] == n
    summary = summarize(extended.draws.numpy())
    assert summary["ess_bulk_min"] >= 400 and summary["rhat_max"] <= 1.01
    rule = RunLength(num_draws=40, max_draws=2000)
    assert rule.more_draws(seen(extended.draws[:, :n - 40].numpy()))[0] == 40  # it stopped at the first pass


def test_a_resumed_run_goes_on_to_the_draws_its_rule_had_planned(tmp_path):
    """A run checkpointed every 20 draws while it extends itself; cut back to an early checkpoint (as a kill
    leaves it) and resumed, it ends with the same draws as without the cut."""
    saved = tmp_path / "saved"
    saved.mkdir()
    target = Gaussian(dim=3)
    method = NUTS(num_warmup=100, num_draws=40, init="prior", max_draws=2000, min_ess=400)
    checkpoint = RunCheckpoint(20, lambda path: shutil.copy(path, saved), tmp_path)
    whole = run(method, target, seed=1, checkpoint=checkpoint)
    assert whole.draws.shape[1] > 80
    for path in saved.iterdir():  # keep the first 60 draws' checkpoint, as a run killed at draw 70 would
        end = int(path.stem.split("_")[-1].split("-")[-1])  # draws_<first>-<end>, stats_..., state_<end>
        if end > 60:
            path.unlink()
    resume = load_resume(saved)
    assert resume.draws.shape[1] == 60 and resume.state["planned_draws"] == 80
    resumed = run(method, target, seed=1, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())


@pytest.mark.parametrize("make", [lambda: Chees(num_warmup=60, num_draws=60, max_leapfrog_steps=16, init_trajectory_length=3.0),
                                  lambda: MAMS(num_warmup=60, num_draws=60, max_steps=16)], ids=["chees", "mams"])
def test_a_sampler_with_a_tuned_trajectory_length_resumes_with_the_same_draws(tmp_path, make):
    """ChEES's T and MAMS's L are tuned in warm-up and stored in the checkpoint (``tuned``): a run cut back to its
    first checkpoint (as a kill leaves it) and resumed by a fresh method object, as a new process would, ends
    with the same draws as without the cut. Control: resumed without the stored length (an older checkpoint), the
    sampler falls back to its untuned length and the draws after the cut differ."""
    saved = tmp_path / "saved"
    saved.mkdir()
    target = Gaussian(dim=3)
    checkpoint = RunCheckpoint(20, lambda path: shutil.copy(path, saved), tmp_path)
    whole = run(make(), target, seed=1, checkpoint=checkpoint)
    assert whole.draws.shape[1] == 60 and whole.metrics["trajectory_length"] > 0
    for path in saved.iterdir():  # keep the first 20 draws' checkpoint, as a run killed at draw 30 would
        if int(path.stem.split("_")[-1].split("-")[-1]) > 20:
            path.unlink()
    resume = load_resume(saved)
    assert resume.state["tuned"] == {"trajectory_length": whole.metrics["trajectory_length"]}
    resumed = run(make(), target, seed=1, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())
    assert resumed.metrics["trajectory_length"] == whole.metrics["trajectory_length"]
    del resume.state["tuned"]
    untuned = run(make(), target, seed=1, resume=resume)
    assert not np.array_equal(untuned.draws[:, 20:].numpy(), whole.draws[:, 20:].numpy())


def test_num_draws_above_max_draws_is_a_fixed_run():
    out = run(NUTS(num_warmup=50, num_draws=30, max_draws=20, init="prior"), Gaussian(dim=2))
    assert out.draws.shape[1] == 30 and "extended" not in out.tags


def test_a_ladder_that_does_not_climb_is_a_one_line_error():
    with pytest.raises(BayesxError, match="raise_target_accept") as info:
        NUTS(raise_target_accept=(0.99, 0.95))
    assert "\n" not in str(info.value)


def test_targets_not_above_target_accept_are_skipped():
    """A user who sets target_accept=0.99 keeps the default ladder [0.95, 0.99] without an error: nothing is left to
    climb to, so no probe runs."""
    assert RunLength.from_settings(NUTS(target_accept=0.99, raise_target_accept=(0.95, 0.99)).settings).ladder == ()
    assert RunLength.from_settings(NUTS(target_accept=0.9, raise_target_accept=(0.95, 0.99)).settings).ladder == (0.95,
                                                                                                                0.99)
    gp = Gaussian(dim=3)
    out = run(NUTS(num_warmup=100, num_draws=50, init="prior", target_accept=0.99, raise_target_accept=(0.95, 0.99)), gp)
    assert out.metrics["target_accept_final"] == 0.99 and out.draws.shape[1] == 50


def test_a_ctrl_c_on_any_line_of_an_add_leaves_draws_and_statistics_that_agree():
    """A Ctrl-C between the appends of the list-based KeptDraws.add left the positions a draw longer than the
    divergences; ArviZ then aligned them with NaN and the trace plot failed (CI, stop 54). A KeyboardInterrupt is
    raised on each line of ``add`` in turn (as a signal lands between any two bytecodes): the draws kept are
    always the three whole ones before, or the fourth as well when the add had counted it."""
    import sys
    from collections import namedtuple

    Info = namedtuple("Info", "accept divergent")

    def info(i):
        return Info(torch.full((2,), float(i)), torch.zeros(2, dtype=torch.bool))

    lines = sorted({line for _, _, line in KeptDraws.add.__code__.co_lines() if line is not None})
    interrupted = 0
    for line in lines[1:]:  # the first is the def itself
        kept = KeptDraws(1)
        kept.reserve(3)  # the fourth add grows the buffers: their lines are interrupted too
        for i in range(3):
            kept.add(torch.full((2, 4), float(i)), info(i))

        def trace(frame, event, arg, line=line):
            if frame.f_code is KeptDraws.add.__code__:
                if event == "line" and frame.f_lineno == line:
                    raise KeyboardInterrupt
                return trace
            return None

        sys.settrace(trace)
        try:
            kept.add(torch.full((2, 4), 3.0), info(3))
        except KeyboardInterrupt:
            interrupted += 1
        finally:
            sys.settrace(None)
        n = len(kept)
        assert n in (3, 4)
        assert kept.draws().shape == (2, n, 4)
        assert {k: v.shape for k, v in kept.sample_stats().items()} == {"accept": (2, n), "divergent": (2, n)}
        np.testing.assert_array_equal(kept.sample_stats()["accept"][0], np.arange(n))
        np.testing.assert_array_equal(kept.draws()[0, :, 0].numpy(), np.arange(n))
    assert interrupted >= 8  # the control: the interrupt did land, on every line of the body that ran
