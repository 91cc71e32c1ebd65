"""The seeds' reproductions that run in minutes, as regression tests against their published or exact numbers, so
that a default changed for one posterior cannot silently break another (flowvi's Gaussian frame, chosen for
posteriordb's diamonds, had moved the journal's U1 ELBO 0.70 nats below log Z). Each runs through the CLI with the
method's defaults, as a user would (the elliptic forward model through its target); each has a control showing the
check can fail. GAP on t(1) within 3% of the Hellinger optimum 3.771 with the defaults lives in tests/test_gap.py
(test_t1_with_the_defaults_reaches_the_optimum_within_three_percent_on_every_seed), also in `make test-slow`.

Published numbers: ../shared/SPEC.md (Deep MCMC Table 1 and sec. 4.2; the journal's U1; the notes' AIS example)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_helpers import all_runs, call, isolated_store, run_ok

from bayesx.methods.vi.flowvi import ELBO_GAP_WARN
from bayesx.targets.elliptic import EllipticInverse, problem
from bayesx.targets.elliptic.fem import P2Space

U1_LOG_Z = 1.8775  # the journal's U1 energy's log normalizer (quadrature; the target's exact log Z)
AIS_TOY_LOG_Z = 1.2655  # log sqrt(4 pi): the advanced-VI notes' AIS example

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with isolated_store(tmp_path_factory, "reproductions") as (root, uri):
        yield root, uri


QUIET = ["progress=false", "plots.n_coords=0"]


U1_FLOW = ["run", "method=flowvi", "method.flow=planar", "method.n_layers=16", "model=density", "model.name=u1",
           *QUIET]


U1_SEEDS = (0, 1, 2)
GAP_WARNING = "nats below its importance-sampled evidence"


@pytest.fixture(scope="module")
def u1_default_fits(store):
    """The issue's command with flowvi's defaults on three seeds (a minute on the idle 2-core machine): each one's
    printed summary and run. One seed is not enough: the fit is chaotic (the last bits of a reduction differ between
    CPUs), and on this machine's CPU seed 0 ends 0.21 nats below its evidence where the CPU of 2026-11-28 had 0.06."""
    _, uri = store
    fits = []
    for seed in U1_SEEDS:
        argv = [*U1_FLOW, f"seed={seed}"]
        code, out, err = call(argv)
        assert code == 0, f"bayesx {' '.join(argv)} failed:\n{err}"
        run = next(r for r in all_runs(uri) if r.info.run_id in out)
        assert run.info.status == "FINISHED"
        fits.append((out, run))
    return fits


def test_u1_with_sixteen_planar_layers_and_the_defaults_reaches_log_z(u1_default_fits):
    """The journal's Figure 33: K = 16 planar layers close the gap log Z - ELBO on U1, with flowvi's defaults
    (frame=auto leaves a 2-D target unframed). Over three seeds the median ELBO is within 0.15 of the exact log Z
    (1.771 on 2026-12-02: 1.654, 1.771, 1.803) and every seed's importance-sampled evidence within 0.1 of it (q covers
    both lobes). Control: the Gaussian frame (frame=gaussian, the default of three or more dimensions) pins the flow
    to one of U1's two lobes, and the run says so (its evidence is log 2 below the exact log Z)."""
    metrics = [run.data.metrics for _, run in u1_default_fits]
    assert float(np.median([m["elbo_final"] for m in metrics])) == pytest.approx(U1_LOG_Z, abs=0.15), metrics
    assert all(m["log_evidence"] == pytest.approx(U1_LOG_Z, abs=0.1) for m in metrics), metrics
    assert all(run.data.tags["flow_frame"].startswith("none (frame=auto") for _, run in u1_default_fits)
    code, out, _ = call([*U1_FLOW, "method.frame=gaussian"])
    assert code == 0 and "q misses part of the posterior" in out
    assert abs(float(out.split("elbo_final")[1].split()[0]) - U1_LOG_Z) > 0.5


def test_a_flow_whose_elbo_stalls_below_its_evidence_warns(u1_default_fits):
    """A flow stopped early (100 iterations) ends far below its importance-sampled evidence: the gap is KL(q||p)
    and the run warns; of the fits with the defaults, the one that got closest (the highest ELBO) does not carry the
    warning, and each seed warns exactly where its own gap is over the rule's 0.1 nats (or 3 standard errors)."""
    code, out, _ = call([*U1_FLOW, "method.iterations=100"])
    assert code == 0 and GAP_WARNING in out
    best_out, _ = max(u1_default_fits, key=lambda fit: fit[1].data.metrics["elbo_final"])
    assert GAP_WARNING not in best_out
    for out, run in u1_default_fits:
        m = run.data.metrics
        over = m["log_evidence"] - m["elbo_final"] > max(ELBO_GAP_WARN, 3.0 * m["log_evidence_se"])
        assert (GAP_WARNING in out) == over, (m, out)


def test_ais_toy_evidence_within_five_hundredths_of_log_z(store):
    """The notes' AIS example (sec. 2.7.3): 1000 samples, 100 temperatures of 10 MH steps, log Z within 0.05 of
    log sqrt(4 pi). Control: two temperatures of one step are biased low by more (Jensen's gap of a poor path)."""
    _, uri = store
    preset = ["method=ais", "model=density", "model.name=ais_toy", "method.kernel=mh", "method.step_size=1.0",
              "method.base_scale=1.0", "method.n_samples=1000", *QUIET]
    run = run_ok(uri, ["run", *preset, "method.n_temps=100", "method.n_steps=10"])
    assert run.data.metrics["log_evidence"] == pytest.approx(AIS_TOY_LOG_Z, abs=0.05)
    poor = run_ok(uri, ["run", *preset, "method.n_temps=2", "method.n_steps=1"])
    assert abs(poor.data.metrics["log_evidence"] - AIS_TOY_LOG_Z) > 0.05


def deep_mcmc_row(uri: str, row: str, data: str):
    """One row of Deep MCMC Table 1 as the preset runs it (conf/experiment/rows/deep_mcmc_table1/), without the
    NUTS reference (the speed-up and the accuracy need none), shortened (300 warm-up and 500 draws per chain; the
    ratio of sampling times per iteration does not depend on the length), on one thread: with two OpenMP threads on
    a machine shared with other work the latent chain's small parallel regions wait on descheduled threads (at load
    15 its sampling took 100 s against HMC's 75 s, 2026-11-28), so the ratio measured the load, not the method."""
    lengths = (["method.presample.num_warmup=300", "method.num_draws=500"] if row.startswith("aehmc")
               else ["method.num_warmup=300", "method.num_draws=500"])
    return run_ok(uri, ["run", "model=logreg", f"data={data}", f"+experiment/rows/deep_mcmc_table1={row}", *lengths,
                        "reference.enabled=false", "device.dtype=float64", "device.num_threads=1", *QUIET])


@pytest.mark.timed  # a ratio of wall times: alone on the machine (make test-slow), not beside a parallel worker
def test_deep_mcmc_table1_synthetic_speed_up_at_least_the_papers(store):
    """Deep MCMC Table 1, synthetic (D = 500 -> d = 50): AE-HMC's sampling stage is at least the paper's 3.2 times
    faster than HMC's for the same iterations (5.1-7.0 in results/archive/, two threads on an idle machine; 4.9 in
    this test's runs, one thread at load 15, 2026-11-28), at HMC's test accuracy
    (AE-HMC minus HMC averaged -0.2 percentage points, sd 1.8, over 12 runs: 6 points, 9 of 150 test points, is 3.3 sd).
    Both run on one thread one after the other, so a load steady over the two cancels in the ratio. Control: on
    digits (64 -> 6), where an HMC leapfrog step costs only 3-4 latent ones, the same ratio stays below the paper's
    5.9 (1.4-2.5 in the archived tables, 2.4 in this test's run)."""
    _, uri = store
    hmc, ae = deep_mcmc_row(uri, "hmc", "synthetic"), deep_mcmc_row(uri, "aehmc", "synthetic")
    speed_up = hmc.data.metrics["sampling_time_s"] / ae.data.metrics["sampling_time_s"]
    assert speed_up >= 3.2, (hmc.data.metrics["sampling_time_s"], ae.data.metrics["sampling_time_s"])
    assert abs(ae.data.metrics["test_accuracy"] - hmc.data.metrics["test_accuracy"]) <= 0.06
    assert ae.data.metrics["latent_dim"] == 50
    hmc, ae = deep_mcmc_row(uri, "hmc", "digits"), deep_mcmc_row(uri, "aehmc", "digits")
    assert hmc.data.metrics["sampling_time_s"] / ae.data.metrics["sampling_time_s"] < 5.9


def test_elliptic_forward_model_has_the_published_setup_and_a_negligible_model_error(store):  # its data dir
    """Deep MCMC sec. 4.2 as SPEC.md condenses it: P2 elements give 441, 1681 and 6561 unknowns on the 10, 20 and 40
    meshes; 25 sensors on {0.2, ..., 0.6}^2; noise sd max|u0| / SNR = 0.1; data made on the mesh twice as fine. The
    Neumann problem is solvable only if the source integrates to zero: the plumes' weights 2, -3, 3, -2 sum to 0.
    On the paper's 20 x 20 mesh the model error at the sensors (against the 40 x 40 data mesh) is under 5% of the
    noise sd, and falls as the mesh is refined, so -2 l(u0) is the noise's chi-square(25) (the sum of squares of the
    seeded standard normal draws, up to that model error). Control: on a 5 x 5 mesh the model error is 18% of the
    noise sd, and the check of 5% would fail."""
    assert [P2Space(n).n_dofs for n in (10, 20, 40)] == [441, 1681, 6561]
    grid = np.linspace(0.2, 0.6, 5)
    np.testing.assert_allclose(problem.sensor_points(), np.stack(np.meshgrid(grid, grid), -1).reshape(-1, 2))
    x, y = np.meshgrid(*(np.linspace(0.0, 1.0, 801),) * 2)
    assert abs(np.trapezoid(np.trapezoid(problem.source(x, y), dx=1 / 800), dx=1 / 800)) < 1e-6
    assert problem.source(0.3, 0.3) == pytest.approx(2.0 / (np.sqrt(2 * np.pi) * 0.05), rel=1e-6)

    def model_error(mesh: int) -> np.ndarray:
        model = EllipticInverse(mesh=mesh)  # data_mesh_factor 2: the clean data of the mesh twice as fine
        return (model.clean - model.forward(model.true_u)) / model.noise_sd

    errors = {mesh: float(np.abs(model_error(mesh)).max()) for mesh in (5, 10, 20)}
    assert errors[20] < 0.05 < errors[5] and errors[20] < errors[10] < errors[5], errors
    paper = EllipticInverse(mesh=20)
    assert paper.dim == 1681 and paper.noise_sd == pytest.approx(0.1)
    noise = (paper.observations - paper.clean) / paper.noise_sd
    chi2 = -2.0 * float(paper.log_likelihood(torch.as_tensor(paper.true_u)[None]))
    bound = 5.0 * errors[20]  # |model error / sd| over the 25 sensors: |r + z|^2 - |z|^2 <= 2 |r| |z| + |r|^2
    assert chi2 == pytest.approx(float(noise @ noise), abs=2 * bound * float(np.linalg.norm(noise)) + bound**2)
    assert 8.65 < chi2 < 52.62  # chi-square(25)'s central 99.8%
