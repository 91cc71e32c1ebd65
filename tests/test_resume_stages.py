"""Samplers resume with their whole state (bayesx.store.checkpoint): AE-HMC's pre-samples and trained
auto-encoder, and DA-pCN's error model learned in warm-up, are checkpointed, so that a run killed during its last
stage goes on with the same draws, without pre-sampling or training again; pCN's noise drawn ahead is part of the
kernel state the checkpoint keeps. Each with its control: the stored network perturbed, the stored error model or
kernel state left out, and the draws after the cut differ."""

from __future__ import annotations

import shutil

import numpy as np
import torch
from test_dapcn import CoarseLevels

from bayesx.methods.base import RunInputs
from bayesx.methods.mcmc.aehmc import AEHMC
from bayesx.methods.mcmc.dapcn import DAPCN
from bayesx.methods.mcmc.pcn import PCN
from bayesx.store.checkpoint import RunCheckpoint, load_resume
from bayesx.targets.gaussian import Gaussian


def run(method, target, seed=1, n_chains=4, **inputs):
    gen = torch.Generator().manual_seed(seed)
    return method.sample(target, RunInputs(target.initial_point(n_chains, gen), gen, progress=False, **inputs))


def checkpointed(method, target, folder, **options):
    """The whole run, checkpointed every 20 draws into ``folder``."""
    folder.mkdir()
    return run(method, target, checkpoint=RunCheckpoint(20, lambda path: shutil.copy(path, folder), folder.parent),
               **options)


def cut(folder, keep: int) -> None:
    """Leave the draws' checkpoint files up to draw ``keep``, as a run killed soon after would (stage files stay)."""
    for path in folder.iterdir():
        if not path.name.startswith("stage_") and int(path.stem.split("_")[-1].split("-")[-1]) > keep:
            path.unlink()


def aehmc():
    return AEHMC(num_warmup=30, num_draws=60, latent_dim=2, presample={"num_warmup": 30, "num_draws": 200},
                 train={"max_epochs": 30})


def test_aehmc_killed_while_sampling_its_latent_space_resumes_with_the_same_draws(tmp_path):
    target = Gaussian(dim=6)
    whole = checkpointed(aehmc(), target, tmp_path / "saved")
    assert whole.draws.shape[1] == 60 and not whole.interrupted
    cut(tmp_path / "saved", 20)
    resume = load_resume(tmp_path / "saved")
    assert resume.draws.shape[1] == 20 and set(resume.stages) == {"training"} and resume.where() == "draw 20"
    resumed = run(aehmc(), target, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())
    assert resumed.metrics["recon_err"] == whole.metrics["recon_err"]
    assert resumed.timings["train_time_s"] == whole.timings["train_time_s"]  # the stage's, not trained again

    resume.stages["training"]["state_dict"] = {k: v * 1.1 for k, v in resume.stages["training"]["state_dict"].items()}
    other = run(aehmc(), target, resume=resume)  # control: another network moves the chains elsewhere
    assert not np.array_equal(other.draws[:, 20:].numpy(), whole.draws[:, 20:].numpy())


def test_aehmc_killed_before_its_first_latent_draw_was_saved_samples_as_the_whole_run_did(tmp_path):
    """Only the stage file: the latent sampler starts again from the stage's generator state, so its draws are the
    uninterrupted run's. Control: the generator state left where the resumed process has it, the draws differ."""
    target = Gaussian(dim=6)
    whole = checkpointed(aehmc(), target, tmp_path / "saved")
    cut(tmp_path / "saved", 0)
    resume = load_resume(tmp_path / "saved")
    assert resume.draws is None and resume.where() == "the end of its training"
    resumed = run(aehmc(), target, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())
    assert resumed.tags["resumed_at_draw"] == "0"
    del resume.stages["training"]["gen_state"]
    try:
        run(aehmc(), target, resume=resume)
    except KeyError as exc:  # the state is what the restore reads: without it there is nothing to resume from
        assert "gen_state" in str(exc)
    else:
        raise AssertionError("a stage without its generator state was resumed")


def dapcn():
    return DAPCN(num_warmup=100, num_draws=60, coarse_mesh=2, subchain_length=3)


def test_dapcn_resumes_with_the_error_model_its_warm_up_learned(tmp_path):
    target = CoarseLevels()
    whole = checkpointed(dapcn(), target, tmp_path / "saved", n_chains=8)
    assert whole.metrics["error_model_pairs"] > 0
    cut(tmp_path / "saved", 20)
    resume = load_resume(tmp_path / "saved")
    assert resume.state["tuned"]["error_model"]["count"] == whole.metrics["error_model_pairs"]
    resumed = run(dapcn(), target, n_chains=8, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())
    del resume.state["tuned"]["error_model"]
    plain = run(dapcn(), target, n_chains=8, resume=resume)  # control: the coarse level uncorrected
    assert not np.array_equal(plain.draws[:, 20:].numpy(), whole.draws[:, 20:].numpy())


def test_pcn_resumes_with_the_prior_noise_it_had_drawn_ahead(tmp_path):
    """pCN draws its prior noise 64 iterations at a time into its kernel state, which the checkpoint keeps whole:
    resumed mid-block, it uses the rest of that block as the whole run did. Control: the state rebuilt from the
    positions alone (an older checkpoint) draws a new block, and the draws after the cut differ."""
    target = CoarseLevels()
    whole = checkpointed(PCN(num_warmup=50, num_draws=60), target, tmp_path / "saved")
    cut(tmp_path / "saved", 20)
    resume = load_resume(tmp_path / "saved")
    resumed = run(PCN(num_warmup=50, num_draws=60), target, resume=resume)
    np.testing.assert_array_equal(resumed.draws.numpy(), whole.draws.numpy())
    del resume.state["kernel_state"]
    rebuilt = run(PCN(num_warmup=50, num_draws=60), target, resume=resume)
    assert not np.array_equal(rebuilt.draws[:, 20:].numpy(), whole.draws[:, 20:].numpy())
