"""Startup memory model: the feasibility boundary, vLLM's failure messages, one code path."""

from __future__ import annotations

import json

import pytest

from autotune.deploy import NOMINAL, get_gpu, resolve_deployment
from autotune.deploy import model as model_mod
from autotune.errors import UserError
from autotune.results import FailureClass, TrialStatus
from autotune.sim import known_gpus, known_models, predict_startup, resolve_model, simulate_trial
from tests.sim.conftest import A100, GRAPHS_OUTSIDE, QWEN72B, chat_workload, qwen_flags

GiB = 2**30


def test_bundled_models_and_gpus_are_listed():
    assert {"Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-8B-Instruct"} <= set(known_models())
    assert {"A100-40GB", "A100-80GB", "H100-80GB", "H200", "L40S"} <= set(known_gpus())


def test_qwen72b_parameter_count_and_weights_per_gpu():
    arch = resolve_model(QWEN72B)
    assert 72.0e9 < arch.total_params < 73.5e9  # Qwen reports 72.7B
    # bf16 at TP 2: ~67.7 GiB per GPU, the "~68 GiB" of the brief.
    assert 67.0 < arch.weight_bytes_per_gpu("bf16", 2) / GiB < 68.5
    assert arch.weight_bytes_per_gpu("int4", 2) < 0.3 * arch.weight_bytes_per_gpu("bf16", 2) + 2 * GiB
    # 80 layers x 8 KV heads / TP 2 x 128 x K,V x 2 B = 160 KiB per token per GPU.
    assert arch.kv_bytes_per_token(2, 2.0) == 160 * 1024


@pytest.mark.parametrize("gmu", [0.80, 0.84, 0.85, 0.86])
def test_cannot_start_when_utilization_leaves_less_than_the_weights(gmu):
    pred = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=gmu))
    assert not pred.ok
    assert pred.failure_class == FailureClass.STARTUP_OOM
    assert pred.failure_reason.startswith("No available memory for the cache blocks.")
    assert gmu * get_gpu(A100).mem_total_gib < pred.mem.weights + pred.mem.non_torch + pred.mem.activation_peak


def test_feasibility_boundary_is_where_the_budget_covers_weights_plus_one_request():
    """Sweep gmu: startup succeeds exactly when the KV left over holds one max_model_len request."""
    total = get_gpu(A100).mem_total_gib
    seen_ok = False
    for i in range(80, 99):
        gmu = i / 100
        pred = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=gmu, enforce_eager=True))
        m = pred.mem
        kv_left = gmu * total - m.weights - m.non_torch - m.activation_peak
        need = 8192 * 160 * 1024 / GiB
        if kv_left * 0.999 > need + 0.01:
            assert pred.ok, (gmu, pred.failure_reason)
            seen_ok = True
        elif kv_left < need:
            assert not pred.ok, gmu
    assert seen_ok
    assert not predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.88)).ok
    assert predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.90)).ok


def test_kv_too_small_for_max_model_len_uses_vllms_message():
    pred = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.9, max_model_len=32768))
    assert not pred.ok
    assert pred.failure_reason.startswith("To serve at least one request with the model's max seq len (32768)")
    assert "estimated maximum model length is" in pred.failure_reason


def test_cuda_graph_capture_oom_and_enforce_eager_avoids_it():
    cg = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.98), GRAPHS_OUTSIDE)
    eager = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.98, enforce_eager=True), GRAPHS_OUTSIDE)
    assert not cg.ok and "capturing CUDA graphs" in cg.failure_reason
    assert cg.failure_reason.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert eager.ok and eager.mem.cuda_graphs == 0


def test_utilization_above_free_memory_is_refused():
    pred = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.999, enforce_eager=True))
    assert not pred.ok and pred.failure_reason.startswith("Free memory on device")


def test_invalid_flags_are_invalid_config():
    pred = predict_startup(QWEN72B, A100, qwen_flags(tensor_parallel_size=3))
    assert pred.failure_class == FailureClass.INVALID_CONFIG
    assert "must be divisible by tensor parallel size (3)" in pred.failure_reason
    # Both given: vLLM lowers a defaulted max_num_seqs to the token budget instead.
    pred = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95, max_num_batched_tokens=64,
                                                     max_num_seqs=256))
    assert pred.failure_class == FailureClass.INVALID_CONFIG


def test_larger_token_budget_profiles_more_activation_memory():
    peaks, kv = [], []
    for mnbt in (512, 1024, 2048, 4096, 8192, 16384):
        p = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95, max_num_batched_tokens=mnbt))
        peaks.append(p.mem.activation_peak)
        kv.append(p.kv_cache_tokens)
    assert all(a <= b for a, b in zip(peaks, peaks[1:], strict=False))
    assert peaks[-1] > peaks[0]
    assert all(a >= b for a, b in zip(kv, kv[1:], strict=False))


def test_cuda_graph_memory_grows_with_max_num_seqs():
    small = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95, max_num_seqs=32))
    big = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95, max_num_seqs=256))
    assert 0 < small.mem.cuda_graphs < big.mem.cuda_graphs
    assert 0.3 < big.mem.cuda_graphs < 3.0  # vLLM: "CUDA graphs can take additional 1~3 GiB"


def test_kv_cache_memory_bytes_overrides_utilization():
    pred = predict_startup(QWEN72B, A100, qwen_flags(kv_cache_memory_bytes=4 * GiB, enforce_eager=True))
    assert pred.ok
    assert pred.kv_cache_tokens == (4 * GiB // (16 * 160 * 1024)) * 16
    over = predict_startup(QWEN72B, A100, qwen_flags(kv_cache_memory_bytes=20 * GiB, enforce_eager=True))
    assert not over.ok and "allocating the KV cache" in over.failure_reason


def test_gpu_specific_defaults_follow_vllm():
    a100 = resolve_deployment(QWEN72B, "A100-80GB", qwen_flags())
    h100 = resolve_deployment(QWEN72B, "H100-80GB", qwen_flags())
    l40s = resolve_deployment("Qwen/Qwen2.5-7B-Instruct", "L40S", {"max_model_len": 8192})
    def batch(dep):
        return dep.config.scheduler.max_num_batched_tokens, dep.config.scheduler.max_num_seqs

    assert batch(a100) == (2048, 256)
    assert batch(h100) == (8192, 1024)
    assert batch(l40s) == (2048, 256)


def test_quantized_variants_shrink_weights_and_fp8_kv_doubles_tokens():
    bf16 = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.9))
    awq = predict_startup(QWEN72B + "-AWQ", A100, qwen_flags(gpu_memory_utilization=0.85))
    fp8kv = predict_startup(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.9, kv_cache_dtype="fp8"))
    assert awq.ok and awq.mem.weights < 0.35 * bf16.mem.weights
    assert fp8kv.kv_cache_tokens == pytest.approx(2 * bf16.kv_cache_tokens, rel=0.01)


def test_unknown_model_or_gpu_is_a_user_error():
    with pytest.raises(UserError, match="unknown model 'nope/Model'"):
        predict_startup("nope/Model", A100, {})
    with pytest.raises(UserError, match="unknown GPU 'V100'"):
        predict_startup(QWEN72B, "V100", {})
    with pytest.raises(UserError):
        simulate_trial(QWEN72B, "TPUv5", {}, chat_workload(10))


def test_model_from_a_config_path_or_directory(tmp_path):
    cfg = json.loads((model_mod._CONFIG_DIR / "Llama-3.1-8B-Instruct.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    by_dir = resolve_model(str(tmp_path))
    by_file = resolve_model(str(tmp_path / "config.json"))
    assert by_dir.total_params == by_file.total_params == resolve_model("meta-llama/Llama-3.1-8B-Instruct").total_params
    with pytest.raises(UserError):
        resolve_model(str(tmp_path / "missing" / "config.json"))


@pytest.mark.parametrize("env", [None, GRAPHS_OUTSIDE])
@pytest.mark.parametrize("over", [
    dict(gpu_memory_utilization=0.85),
    dict(gpu_memory_utilization=0.9),
    dict(gpu_memory_utilization=0.93, block_size=32, max_num_seqs=64),
    dict(gpu_memory_utilization=0.9, max_model_len=32768),
    dict(gpu_memory_utilization=0.98),
    dict(gpu_memory_utilization=0.98, enforce_eager=True),
    dict(tensor_parallel_size=3),
])
def test_predict_startup_agrees_with_the_simulators_startup(over, env):
    """Noise off: a noisy server start takes a drawn time around the predicted one."""
    flags = qwen_flags(**over)
    pred = predict_startup(QWEN72B, A100, flags, env)
    res = simulate_trial(QWEN72B, A100, flags, chat_workload(20), env=env, profile=NOMINAL.without_noise())
    assert (res.status == TrialStatus.OK) == pred.ok
    assert res.kv_cache_tokens == pred.kv_cache_tokens
    assert res.failure_reason == pred.failure_reason or (pred.ok and res.crashes > 0)
    assert res.startup_s == pytest.approx(pred.startup_s)
    if not pred.ok:
        assert res.failure_class == pred.failure_class
