"""SimProfile: one object of the simulator's uncertain constants, drawn, saved, read back, used."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.deploy import NOMINAL, SimProfile, VllmEnv, predict_startup
from autotune.deploy.profile import constants
from autotune.errors import UserError
from autotune.sim import simulate_trial
from autotune.workload import LengthDist, WorkloadSpec

QWEN = "Qwen/Qwen2.5-72B-Instruct"
FLAGS = {"tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.93}
SMALL = WorkloadSpec(num_requests=40, concurrency=8, prompt_len=LengthDist(dist="fixed", mean=300),
                     output_len=LengthDist(dist="fixed", mean=40))


def test_every_constant_has_a_range_around_its_nominal_value():
    assert len(constants()) >= 30
    for f in constants():
        low, high = f.metadata["range"]
        assert 0 < low <= getattr(NOMINAL, f.name) <= high and f.metadata["doc"]


def test_perturbed_draws_within_the_ranges_deterministically():
    a, b = NOMINAL.perturbed(1), NOMINAL.perturbed(2)
    assert a == NOMINAL.perturbed(1) and a != b
    for f in constants():
        low, high = f.metadata["range"]
        assert low <= getattr(a, f.name) <= high
    assert a.noise and not NOMINAL.without_noise().perturbed(1).noise  # noise is a switch, not drawn
    # Log-uniform over many truths: about half of each constant's draws below its range's
    # geometric midpoint.
    draws = [NOMINAL.perturbed(s) for s in range(200)]
    for f in constants()[:5]:
        low, high = f.metadata["range"]
        below = sum(getattr(d, f.name) < (low * high) ** 0.5 for d in draws)
        assert 70 < below < 130, (f.name, below)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip_through_a_file(tmp_path, suffix):
    truth = NOMINAL.perturbed(5).without_noise()
    path = tmp_path / f"p{suffix}"
    truth.save(path)
    assert SimProfile.load(path) == truth


def test_a_partial_file_keeps_the_rest_nominal(tmp_path):
    (tmp_path / "p.yaml").write_text("compute_eff: 0.6\nnoise: false\n")
    p = SimProfile.load(tmp_path / "p.yaml")
    assert p == dataclasses.replace(NOMINAL, compute_eff=0.6, noise=False)


@pytest.mark.parametrize("text,needle", [
    ("compute_eff: fast\n", "compute_eff must be a positive number"),
    ("compute_eff: -1\n", "compute_eff must be a positive number"),
    ("warp_speed: 2\n", "unknown SimProfile constant 'warp_speed'"),
    ("noise: 1\n", "noise must be true or false"),
    ("- 1\n", "expected a mapping"),
    ("a: [\n", "malformed profile file"),
])
def test_bad_profile_files_are_one_line_errors(tmp_path, text, needle):
    (tmp_path / "p.yaml").write_text(text)
    with pytest.raises(UserError, match=needle) as e:
        SimProfile.load(tmp_path / "p.yaml")
    assert str(tmp_path / "p.yaml") in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="no such profile file"):
        SimProfile.load(tmp_path / "missing.yaml")


def test_the_startup_model_and_the_simulator_use_the_same_profile():
    """predict_startup takes a profile (nominal by default) and agrees with the simulator's
    startup under any truth: one code path."""
    assert predict_startup(QWEN, "A100-80GB", FLAGS) == predict_startup(QWEN, "A100-80GB", FLAGS, profile=NOMINAL)
    for seed in range(3):
        truth = NOMINAL.perturbed(seed).without_noise()
        pred = predict_startup(QWEN, "A100-80GB", FLAGS, profile=truth)
        res = simulate_trial(QWEN, "A100-80GB", FLAGS, SMALL, profile=truth)
        assert res.kv_cache_tokens == pred.kv_cache_tokens and res.startup_s == pytest.approx(pred.startup_s)
        assert res.extra["mem_gib"] == pred.mem.as_dict() if pred.ok else res.failure_reason == pred.failure_reason


def test_constants_move_what_they_name():
    more_context = dataclasses.replace(NOMINAL, cuda_context_gib=0.8)
    base, ctx = predict_startup(QWEN, "A100-80GB", FLAGS), predict_startup(QWEN, "A100-80GB", FLAGS, profile=more_context)
    assert ctx.mem.headroom == pytest.approx(base.mem.headroom - 0.3, abs=1e-6)
    slow = dataclasses.replace(NOMINAL, compute_eff=0.55, hbm_eff=0.75, noise=False)
    fast = simulate_trial(QWEN, "A100-80GB", FLAGS, SMALL, profile=NOMINAL.without_noise())
    assert simulate_trial(QWEN, "A100-80GB", FLAGS, SMALL, profile=slow).metrics()["mean_tpot_s"] > \
        fast.metrics()["mean_tpot_s"]


def test_vllm_env_is_read_as_vllm_reads_it():
    assert VllmEnv.from_env(None) == VllmEnv("v2", True)
    assert VllmEnv.from_env({"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}) == \
        VllmEnv("v1", False)
    assert VllmEnv.from_env({"VLLM_USE_V2_MODEL_RUNNER": "2", "HF_TOKEN": "x"}) == VllmEnv("v2", True)
    with pytest.raises(UserError, match="engine.env.VLLM_USE_V2_MODEL_RUNNER: 'yes' is not an integer"):
        VllmEnv.from_env({"VLLM_USE_V2_MODEL_RUNNER": "yes"})
    with pytest.raises(UserError):
        simulate_trial(QWEN, "A100-80GB", FLAGS, SMALL, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "on"})
