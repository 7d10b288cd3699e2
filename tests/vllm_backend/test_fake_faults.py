"""Fault handling of the vLLM backend, against a FAKE vLLM server (tests/fakes/fake_vllm_server.py).

Why a fake: real vLLM's CPU build cannot run out of CUDA memory, and making it hang or start
slowly on demand is not possible. The fake prints vLLM's real messages and speaks the same
HTTP, and it is started through the backend's real code path (argument list, own process
group, /health, streaming, log classification). Real-vLLM behaviour is in tests/integration.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from autotune.backends.vllm import VllmBackend
from autotune.early_stop import EarlyStopRule
from autotune.results import SERVER_LOG_CAP_CHARS, FailureClass, RequestStatus, TrialStatus
from autotune.workload import generate_trace
from tests.fakes.helpers import fake_request, fake_requests, fake_starts, group_gone, small_workload


@pytest.fixture
def backend():
    events: list[tuple[str, dict]] = []
    b = VllmBackend(hang_timeout_s=2.0, stop_grace_s=5.0, watch_interval_s=0.2, metrics_interval_s=0.2,
                    events=lambda name, info: events.append((name, info)))
    b.recorded = events  # type: ignore[attr-defined]
    yield b
    b.close()


def _statuses(result) -> dict[RequestStatus, int]:
    out: dict[RequestStatus, int] = {}
    for r in result.records:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def test_ok_trial_sends_exact_trace_and_reads_metrics(tmp_path, backend):
    # Fake because: a deterministic preemption counter and KV size to check the /metrics and log plumbing.
    req = fake_request(tmp_path, preempt_every=5, kv_tokens=12345)
    res = backend.run_trial(req)
    assert res.status == TrialStatus.OK and res.failure_class == FailureClass.NONE
    assert len(res.records) == 20 and all(r.status == RequestStatus.OK for r in res.records)
    assert res.preemptions == 4 and res.server_metrics["preemptions"] == 4
    assert res.kv_cache_tokens == 12345
    assert res.server_metrics["e2e_count"] == 20
    assert res.server_metrics["prefix_cache_queries"] > 0
    assert res.crashes == 0 and res.startup_s > 0 and res.gpu_time_s >= res.duration_s > 0
    # No NVML here: unavailable is recorded, never numbers.
    assert res.peak_mem_gib == [] and res.extra["nvml"]["available"] is False
    # The exact trace went out: token-ID prompts, exact output lengths, ignore_eos, streaming.
    trace = generate_trace(req.workload)
    sent = {tuple(r["prompt"]): r for r in fake_requests(tmp_path)}
    for t in trace:
        r = sent[tuple(t.prompt_token_ids(req.workload, token_id_high=None))]
        assert r["max_tokens"] == r["min_tokens"] == t.output_len
        assert r["ignore_eos"] is True and r["stream"] is True and r["temperature"] == 0
    by_index = {r.index: r for r in res.records}
    assert all(by_index[t.index].output_tokens == t.output_len for t in trace)
    assert res.extra["output_token_mismatches"] == 0
    # The whole process group is gone once the trial returns.
    started = [i for n, i in backend.recorded if n == "server_started"]
    assert started and all(group_gone(i["pid"]) for i in started)
    assert res.artifacts.server_log.count("GPU KV cache size") == 1


def test_runtime_oom_fails_in_flight_requests_and_restarts(tmp_path, backend):
    # Fake because: a CUDA OOM while serving cannot happen on vLLM's CPU build.
    req = fake_request(tmp_path, scenario="runtime_oom", fail_after=6, fail_starts=1, token_delay_s=0.01)
    res = backend.run_trial(req)
    assert res.status == TrialStatus.OK
    assert res.failure_class == FailureClass.RUNTIME_OOM and res.crashes == 1
    assert any("CUDA out of memory" in line for line in res.failure_evidence)
    st = _statuses(res)
    # Requests in flight at the crash are OOMs (up to the concurrency); everything else was served after the restart.
    assert 1 <= st[RequestStatus.OOM] <= 4
    assert st[RequestStatus.OK] + st[RequestStatus.OOM] == 20 and RequestStatus.NOT_RUN not in st
    assert fake_starts(tmp_path) == 2 and res.extra["restarts"] == 1
    assert res.metrics()["oom_per_1k"] == 1000 * st[RequestStatus.OOM] / 20
    # The restart's startup counts in GPU time.
    assert res.gpu_time_s > res.duration_s


def test_runtime_oom_every_start_exhausts_restarts(tmp_path, backend):
    # Fake because: repeated CUDA OOMs; checks the bounded-restart semantics shared with the simulator.
    req = fake_request(tmp_path, workload=small_workload(num_requests=40, max_restarts=1),
                       scenario="runtime_oom", fail_after=3)
    res = backend.run_trial(req)
    assert res.crashes == 2 and fake_starts(tmp_path) == 2
    st = _statuses(res)
    assert RequestStatus.NOT_RUN not in st and RequestStatus.ERROR not in st
    # Unsent requests after the last allowed restart count as OOM, like the in-flight ones.
    assert st[RequestStatus.OK] + st[RequestStatus.OOM] == 40
    assert st[RequestStatus.OK] >= 6
    left = [r for r in res.records if r.error.startswith("not sent")]
    assert left and all(r.status == RequestStatus.OOM for r in left)


def test_non_oom_crash_is_a_crash_with_error_requests(tmp_path, backend):
    # Fake because: an engine death on demand at a known point of the benchmark.
    req = fake_request(tmp_path, scenario="crash", fail_after=5, fail_starts=1, token_delay_s=0.01)
    res = backend.run_trial(req)
    assert res.failure_class == FailureClass.CRASH and res.crashes == 1
    st = _statuses(res)
    assert RequestStatus.OOM not in st and 1 <= st[RequestStatus.ERROR] <= 4
    assert st[RequestStatus.OK] + st[RequestStatus.ERROR] == 20


def test_hang_is_detected_killed_and_restarted(tmp_path, backend):
    # Fake because: real vLLM cannot be made to stop producing tokens while /health stays 200.
    req = fake_request(tmp_path, scenario="hang", fail_after=5, fail_starts=1)
    res = backend.run_trial(req)
    assert res.failure_class == FailureClass.HANG and res.crashes == 1
    assert "no token for" in res.failure_reason
    st = _statuses(res)
    assert st[RequestStatus.ERROR] >= 1 and st[RequestStatus.OK] + st[RequestStatus.ERROR] == 20
    assert fake_starts(tmp_path) == 2


@pytest.mark.parametrize("scenario,needle", [
    ("startup_oom_kv", "No available memory for the cache blocks"),
    ("startup_oom_len", "larger than the available KV cache memory"),
    ("startup_cuda_oom", "CUDA out of memory"),
])
def test_startup_oom(tmp_path, backend, scenario, needle):
    # Fake because: vLLM's CPU build sizes its KV cache from VLLM_CPU_KVCACHE_SPACE and has no CUDA to run out of.
    res = backend.run_trial(fake_request(tmp_path, scenario=scenario))
    assert res.status == TrialStatus.STARTUP_FAILED
    assert res.failure_class == FailureClass.STARTUP_OOM
    assert any(needle in line for line in res.failure_evidence)
    assert all(r.status == RequestStatus.OOM for r in res.records) and len(res.records) == 20
    assert res.metrics()["oom_per_1k"] == 1000


def test_server_never_ready_is_a_startup_hang_and_is_killed(tmp_path, backend):
    # Fake because: a server stuck in startup (e.g. CUDA graph capture) on demand.
    res = backend.run_trial(fake_request(tmp_path, scenario="never_ready", startup_timeout_s=3.0))
    assert res.status == TrialStatus.STARTUP_FAILED and res.failure_class == FailureClass.HANG
    assert "not healthy after 3s" in res.failure_reason
    started = [i for n, i in backend.recorded if n == "server_started"]
    assert started and group_gone(started[0]["pid"])


def test_slow_start_is_waited_for(tmp_path, backend):
    # Fake because: a startup of a known length; the backend must wait, not fail.
    res = backend.run_trial(fake_request(tmp_path, startup_delay_s=2.0, startup_timeout_s=60.0))
    assert res.status == TrialStatus.OK and res.failure_class == FailureClass.NONE
    assert res.startup_s >= 2.0  # the fake sleeps 2 s before binding: a lower bound, not a timing claim


def test_argument_error_is_invalid_config(tmp_path, backend):
    # The fake uses argparse with vLLM's block-size choices; real vLLM is in tests/integration.
    res = backend.run_trial(fake_request(tmp_path, flags={"block_size": 7}))
    assert res.failure_class == FailureClass.INVALID_CONFIG
    assert any("argument --block-size: invalid choice" in line for line in res.failure_evidence)
    assert res.extra["exit_code"] == 2


def test_early_stop_stops_sending_and_marks_the_rest_not_run(tmp_path, backend):
    # Fake because: a fast, deterministic server. The front point (0 OOMs, ~0 s p99) dominates any trial.
    rule = EarlyStopRule(front=((0.0, 1e-6),), min_requests=3)
    res = backend.run_trial(fake_request(tmp_path, early_stop=rule))
    assert res.early_stopped and res.crashes == 0
    st = _statuses(res)
    assert st[RequestStatus.NOT_RUN] > 0 and RequestStatus.ERROR not in st
    # Like the simulator: requests never sent are not "issued".
    assert res.requests_issued == st[RequestStatus.OK] == 20 - st[RequestStatus.NOT_RUN]


def test_early_stop_after_an_oom_skips_the_restart(tmp_path, backend):
    # Fake because: needs a runtime OOM. The front point (10 OOMs/1k, ~0 s p99) dominates this trial only
    # once it has an OOM (1 of 20 requests = 50 per 1k); then it stops instead of restarting.
    rule = EarlyStopRule(front=((10.0, 1e-6),), min_requests=3)
    req = fake_request(tmp_path, scenario="runtime_oom", fail_after=5, fail_starts=1, early_stop=rule,
                       token_delay_s=0.01)
    res = backend.run_trial(req)
    assert res.early_stopped and res.crashes == 1
    st = _statuses(res)
    assert st[RequestStatus.OOM] >= 1 and st[RequestStatus.NOT_RUN] > 0 and fake_starts(tmp_path) == 1


def test_secrets_in_env_are_masked_in_the_log(tmp_path, backend):
    req = fake_request(tmp_path, env={"HF_TOKEN": "hf_sekrit_value", "MY_API_KEY": "k-sekrit"})
    log = backend.run_trial(req).artifacts.server_log
    assert "sekrit" not in log and '"HF_TOKEN": "***"' in log


def test_artifacts_carry_every_starts_log_and_no_file_stays_behind(tmp_path):
    # Fake because: a runtime OOM on the first start only, so the trial has two server starts.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    b = VllmBackend(hang_timeout_s=2.0, stop_grace_s=5.0, watch_interval_s=0.2, metrics_interval_s=0.2,
                    scratch_root=str(scratch))
    try:
        res = b.run_trial(fake_request(tmp_path, scenario="runtime_oom", fail_after=6, fail_starts=1,
                                       token_delay_s=0.01))
    finally:
        b.close()
    assert res.crashes == 1 and res.extra["restarts"] == 1
    log = res.artifacts.server_log
    # The real text of both starts, each after its own header, in order.
    first, second = log.index("server start 0\n"), log.index("server start 1 (restart)\n")
    assert first < log.index("torch.OutOfMemoryError: CUDA out of memory") < second
    assert log.count("Starting vLLM server on") == 2 and log.count("GPU KV cache size") == 2
    assert list(scratch.iterdir()) == []  # the scratch directory is gone, nothing else was written
    # /metrics snapshots from both starts, in time order, with the counters the summary uses.
    snaps = res.artifacts.metrics_snapshots
    assert {s["start"] for s in snaps} == {0, 1}
    assert [s["t_s"] for s in snaps] == sorted(s["t_s"] for s in snaps)
    assert all({"t_s", "prompt_tokens", "prefix_cache_queries", "num_requests_running"} <= set(s) for s in snaps)
    assert max(s["prompt_tokens"] for s in snaps if s["start"] == 1) > 0
    assert res.artifacts.gpu_timeline == []  # no NVML here: no timeline, never invented points


def test_the_log_cap_keeps_the_head_and_the_tail(tmp_path, backend):
    # Fake because: a server that writes more than the cap (2 MB) before it dies at runtime.
    req = fake_request(tmp_path, scenario="crash", fail_after=3, fail_starts=1, log_filler_kib=2500,
                       token_delay_s=0.01)
    log = backend.run_trial(req).artifacts.server_log
    assert len(log) <= SERVER_LOG_CAP_CHARS + 100
    assert "characters elided" in log
    assert log.startswith("# autotune: trial 0 server start 0\n")  # the head: the launch
    assert "NCCL error: unhandled system error" in log  # the death, after the filler
    assert "server start 1 (restart)" in log[-5000:]  # the tail: the restart's whole output


def test_planted_secrets_masked_in_the_log_header_and_settings_kept(tmp_path, backend):
    req = fake_request(tmp_path, env={"HF_AUTH": "hfauthSEKRIT", "DATABASE_URL": "postgresql://u:pgSEKRIT@h/db"},
                       flags={"max_num_seqs": 8, "max_num_batched_tokens": 8192})
    log = backend.run_trial(req).artifacts.server_log
    assert "SEKRIT" not in log
    assert '"HF_AUTH": "***"' in log and '"DATABASE_URL": "postgresql://u:***@h/db"' in log
    assert '"--max-num-batched-tokens", "8192"' in log  # a setting whose name holds "tokens": not a secret


def test_a_python_that_does_not_exist_is_a_startup_crash(tmp_path, backend):
    scratch_before = set(Path(tempfile.gettempdir()).glob("autotune-trial-0-*"))
    req = fake_request(tmp_path)
    req.server = replace(req.server, python=str(tmp_path / "no-such-venv" / "bin" / "python"))
    res = backend.run_trial(req)
    assert res.status == TrialStatus.STARTUP_FAILED and res.failure_class == FailureClass.CRASH
    assert "cannot start the server: FileNotFoundError" in res.failure_reason
    assert "cannot start the server" in res.artifacts.server_log
    assert res.metrics()["error_per_1k"] == 1000 and len(res.records) == req.workload.num_requests
    assert set(Path(tempfile.gettempdir()).glob("autotune-trial-0-*")) == scratch_before


def test_a_python_without_vllm_is_a_startup_crash_that_says_so(tmp_path, backend):
    # The interpreter exists but cannot import vLLM (what a venv path resolved through its symlink does).
    req = fake_request(tmp_path)
    req.server = replace(req.server, env={k: v for k, v in req.server.env.items() if k != "PYTHONPATH"})
    res = backend.run_trial(req)
    assert res.status == TrialStatus.STARTUP_FAILED and res.failure_class == FailureClass.CRASH
    assert "cannot import vLLM" in res.failure_reason and "No module named 'vllm" in res.failure_evidence[0]
