"""Calibration recovers a perturbed truth's identifiable constants and predicts held-out trials better.

The truth is ``SimProfile.perturbed(seed)`` with its measurement noise on, given to the sim
backend only; the study itself (pruning included) runs on autotune's nominal model. Truth 1
is one whose speed constants put the nominal simulator about 10 % off on p99. SIMULATED.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.calibrate import calibrate
from autotune.calibrate import observations as obs
from autotune.calibrate.model import ShortBenchmark, simulate
from autotune.calibrate.stages import SPEED_CONSTANTS
from autotune.deploy import NOMINAL, plan_startup, resolve_deployment
from autotune.errors import UserError
from autotune.study.trials.record import State, TrialRecord
from tests.calibrate.conftest import qwen_space, run_against

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

TRUTH = NOMINAL.perturbed(1)


@pytest.fixture(scope="module")
def study():
    space = qwen_space()
    return space, run_against(space, TRUTH, trials=40, seed=0)


@pytest.fixture(scope="module")
def calibration(study):
    space, recs = study
    return calibrate(recs, space)


def test_held_out_trials_are_whole_configs_the_fit_never_saw(study, calibration):
    _, recs = study
    fitted = {repr(sorted(r.flags.items())) for r in recs if r.number in calibration.fitted_trials}
    held = {repr(sorted(r.flags.items())) for r in recs if r.number in calibration.held_out_trials}
    assert calibration.held_out_trials and not fitted & held
    assert set(calibration.fitted_trials) | set(calibration.held_out_trials) == {r.number for r in obs.launched(recs)}


def test_memory_constants_the_kv_sizes_show_are_recovered(calibration):
    p = calibration.profile
    # At one TP size non_torch_gib and nccl_gib only ever appear as their sum.
    assert p.non_torch_gib + p.nccl_gib == pytest.approx(TRUTH.non_torch_gib + TRUTH.nccl_gib, abs=0.05)
    assert p.activation_scale == pytest.approx(TRUTH.activation_scale, rel=0.03)
    assert p.sampler_copies == pytest.approx(TRUTH.sampler_copies, rel=0.05)
    memory = next(s for s in calibration.stages if s.name == "memory")
    assert {"activation_scale", "sampler_copies"} <= set(memory.determined)


def test_kv_cache_of_held_out_configs_is_predicted_to_the_block(calibration):
    kv = calibration.error("kv_cache_tokens")
    assert kv is not None and kv.trials >= 5
    assert kv.after <= 0.005 < kv.before


def test_held_out_p99_error_meets_the_goal_and_beats_nominal(calibration):
    p99, tpot = calibration.error("p99_e2e_s"), calibration.error("mean_tpot_s")
    assert p99 is not None and p99.trials >= 5
    assert p99.after <= 0.05
    assert p99.after < p99.before
    assert tpot is not None and tpot.after < tpot.before


def test_speed_constants_move_toward_the_truth(calibration):
    """The per-token speed is mostly HBM bandwidth for a 72B model at concurrency 16: the
    fitted hbm_eff lands closer to the truth's than nominal; constants that nothing in
    the study moves (NCCL latency without disable_custom_all_reduce) stay nominal."""
    p = calibration.profile
    assert abs(math.log(p.hbm_eff / TRUTH.hbm_eff)) < abs(math.log(NOMINAL.hbm_eff / TRUTH.hbm_eff))
    speed = next(s for s in calibration.stages if s.name == "speed")
    assert "nccl_latency_us" in speed.undetermined and p.nccl_latency_us == NOMINAL.nccl_latency_us
    assert set(speed.determined) <= set(SPEED_CONSTANTS)


def test_oom_constants_are_not_fitted_and_the_report_says_why(calibration):
    oom = next(s for s in calibration.stages if s.name == "oom")
    assert oom.determined == () and "not fitted" in oom.note
    for name in oom.undetermined:
        assert getattr(calibration.profile, name) == getattr(NOMINAL, name)


def test_the_calibrated_profile_runs_the_simulator(study, calibration):
    space, recs = study
    r = next(r for r in recs if r.number in calibration.held_out_trials and obs.latencies(r))
    dep = resolve_deployment(space.engine.model, space.engine.gpu, r.flags, space.engine.env)
    assert plan_startup(dep, calibration.profile).kv_cache_tokens == r.metrics["kv_cache_tokens"]
    assert simulate(space, r.flags, calibration.profile)["p99_e2e_s"] > 0


def test_a_short_benchmark_with_its_control_variate_predicts_the_full_one():
    """The fit simulates 300 of the 1000 requests and scales by full/short under a reference
    profile; under another profile that stays within 1 % of simulating all 1000."""
    space = qwen_space()
    flags = {**space.fixed_flags(), "gpu_memory_utilization": 0.93, "max_num_seqs": 64}
    bench = ShortBenchmark(space, flags, NOMINAL, 300, 0, ("p99_e2e_s", "mean_tpot_s"))
    other = NOMINAL.perturbed(3)
    full = simulate(space, flags, other)
    pred = bench.predict(other)
    for k in ("p99_e2e_s", "mean_tpot_s"):
        assert pred[k] == pytest.approx(full[k], rel=0.01)


def _record(number: int, flags: dict, started: bool = True, **metrics: float) -> TrialRecord:
    return TrialRecord(number, State.COMPLETE, flags=flags, started=started, metrics=dict(metrics))


def test_too_few_measured_trials_is_one_clear_error():
    space = qwen_space()
    recs = [_record(i, {**space.fixed_flags(), "gpu_memory_utilization": 0.9 + i / 100}, kv_cache_tokens=1e4)
            for i in range(3)]
    with pytest.raises(UserError, match="too few measured trials to calibrate: 3 engines started"):
        calibrate(recs, space)
    with pytest.raises(UserError, match="no measured trial"):
        calibrate([], space)


def test_the_split_holds_out_every_nth_config_with_its_repeats():
    flags = [{"gpu_memory_utilization": g} for g in (0.9, 0.91, 0.92, 0.93)]
    recs = [_record(0, flags[0]), _record(1, flags[1]), _record(2, flags[2]), _record(3, flags[2]),
            _record(4, flags[3])]
    sp = obs.split(recs, 3)
    assert [r.number for r in sp.held_out] == [2, 3]
    assert [r.number for r in sp.fit] == [0, 1, 4]


def test_latencies_are_compared_only_where_they_mean_the_same():
    full = {"p99_e2e_s": 20.0, "p50_e2e_s": 7.0, "mean_tpot_s": 0.05, "p50_ttft_s": 0.2, "crashes": 0.0,
            "requests_oom": 0.0}
    assert set(obs.latencies(_record(0, {}, **full))) == set(obs.LATENCY_SPREAD)
    stopped = _record(1, {}, **full)
    stopped.early_stopped = True
    assert set(obs.latencies(stopped)) == {"mean_tpot_s"}
    assert obs.latencies(_record(2, {}, **{**full, "crashes": 1.0})) == {}
    assert obs.latencies(_record(3, {}, started=False, **full)) == {}
    assert np.isnan(obs.startup_s(_record(4, {}, started=False, startup_s=50.0)))


def test_the_measurement_spread_comes_from_the_studys_repeats():
    """Issue 18: calibration weighs residuals by the spread the study's own repeats show,
    not by the simulator's assumed 3 %, once it has two degrees of freedom."""
    base = {"p99_e2e_s": 10.0, "p50_e2e_s": 5.0, "mean_tpot_s": 0.05, "p50_ttft_s": 0.5}
    one = [_record(0, {"max_num_seqs": 8}, **base)]
    assert obs.latency_spread(one) == obs.LATENCY_SPREAD
    runs = [_record(i, {"max_num_seqs": 8}, **{**base, "p99_e2e_s": v}) for i, v in enumerate((9.0, 10.0, 11.0))]
    spread = obs.latency_spread(runs)
    assert spread["p99_e2e_s"] == pytest.approx(float(np.std(np.log([9.0, 10.0, 11.0]), ddof=1)))
    assert spread["p50_e2e_s"] == obs.MIN_SPREAD  # identical repeats: floored, never zero
