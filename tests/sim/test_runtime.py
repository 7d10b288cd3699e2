"""The simulated benchmark: determinism, accounting, the monotonic properties, OOM semantics."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autotune.backends import ServerSpec, TrialRequest, get_backend
from autotune.deploy import NOMINAL, plan_startup, resolve_deployment
from autotune.early_stop import EarlyStopRule, p99_rank_bound
from autotune.results import FailureClass, RequestStatus, TrialStatus
from autotune.sim import simulate_trial
from autotune.sim.hazard import Hazard
from autotune.workload import generate_trace
from tests.sim.conftest import A100, GRAPHS_OUTSIDE, QWEN72B, chat_workload, qwen_flags

OK = RequestStatus.OK


def run(workload, seed=0, early_stop=None, model=QWEN72B, gpu=A100, env=None, profile=NOMINAL, **over):
    return simulate_trial(model, gpu, qwen_flags(**over) if model == QWEN72B else over, workload, seed, early_stop,
                          env=env, profile=profile)


def test_same_seed_same_result_other_seed_other_noise(workload):
    a = run(workload, seed=3, gpu_memory_utilization=0.92)
    b = run(workload, seed=3, gpu_memory_utilization=0.92)
    c = run(workload, seed=4, gpu_memory_utilization=0.92)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict() != c.to_dict()
    # The benchmark itself (the trace) is the workload's, identical across trial seeds.
    assert [r.output_tokens for r in a.records] == [r.output_tokens for r in c.records]


def test_per_request_accounting_adds_up(workload):
    res = run(workload, gpu_memory_utilization=0.9, enable_prefix_caching=False)
    trace = generate_trace(workload, 8192)
    assert res.status == TrialStatus.OK
    assert [r.index for r in res.records] == list(range(workload.num_requests))
    m = res.metrics()
    assert m["requests_ok"] + m["requests_oom"] + m["requests_error"] + m["requests_not_run"] == workload.num_requests
    assert res.requests_issued == workload.num_requests
    for rec, tr in zip(res.records, trace, strict=True):
        assert rec.status == OK
        assert rec.output_tokens == tr.output_len and rec.prompt_tokens == tr.prompt_len
        assert 0 < rec.ttft_s <= rec.e2e_s
        assert rec.send_s + rec.e2e_s <= res.duration_s + 1e-9
    assert res.gpu_time_s == pytest.approx(res.startup_s + res.duration_s)
    assert m["output_tok_per_s"] == pytest.approx(sum(r.output_tokens for r in res.records) / res.duration_s)
    # Closed loop: never more than `concurrency` requests in flight.
    # (an end and the next send happen at the same instant: count the end first)
    events = sorted([(round(r.send_s, 9), 1) for r in res.records]
                    + [(round(r.send_s + r.e2e_s, 9), -1) for r in res.records])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak <= workload.concurrency
    assert res.extra["simulated"] is True


def _mean_preemptions(wl, seeds=range(4), **over) -> float:
    return sum(run(wl, seed=s, enable_prefix_caching=False, env=GRAPHS_OUTSIDE, **over).preemptions
               for s in seeds) / len(seeds)


def test_more_kv_memory_never_gives_more_preemptions():
    """Averaged over the simulator's noise (single traces are chaotic, as in vLLM: a preempted
    request re-admitted a step earlier or later changes the later count by a few). Starts
    at 1.8x one max_model_len request: right at the feasibility edge the tiny cache also
    throttles admission, which can lower the count (see docs/simulator.md)."""
    wl = chat_workload(300)
    by_bytes = [_mean_preemptions(wl, kv_cache_memory_bytes=int(gib * 2**30)) for gib in (1.5, 1.75, 2.0, 2.5, 3.0, 4.5, 6.0)]
    assert by_bytes[0] > 50, "the smallest cache must preempt for this test to mean anything"
    assert all(a >= b for a, b in zip(by_bytes, by_bytes[1:], strict=False)), by_bytes
    by_gmu = [_mean_preemptions(wl, gpu_memory_utilization=g) for g in (0.895, 0.9, 0.905, 0.91, 0.92, 0.95)]
    assert all(a >= b for a, b in zip(by_gmu, by_gmu[1:], strict=False)), by_gmu
    assert by_gmu[-1] == 0


def test_enforce_eager_raises_tpot(workload):
    graphs = run(workload, gpu_memory_utilization=0.93).metrics()
    eager = run(workload, gpu_memory_utilization=0.93, enforce_eager=True).metrics()
    assert eager["mean_tpot_s"] > graphs["mean_tpot_s"]
    assert eager["p50_tpot_s"] > graphs["p50_tpot_s"]


def test_enforce_eager_lowers_oom_hazard():
    for gmu in (0.95, 0.97, 0.975):
        g = plan_startup(resolve_deployment(QWEN72B, A100, qwen_flags(gpu_memory_utilization=gmu), GRAPHS_OUTSIDE))
        e = plan_startup(resolve_deployment(QWEN72B, A100, qwen_flags(gpu_memory_utilization=gmu, enforce_eager=True),
                                            GRAPHS_OUTSIDE))
        assert e.mem.headroom > g.mem.headroom
        for act in (2**24, 2**28, 2**30):
            assert Hazard.from_profile(e.mem.headroom * 2**30, NOMINAL).p_step(act) <= \
                Hazard.from_profile(g.mem.headroom * 2**30, NOMINAL).p_step(act)
    # And in a whole trial at the edge of the feasible region.
    wl = chat_workload(300)  # 1024-token shared prompt, recomputed: prefill is most of the work
    cg = run(wl, gpu_memory_utilization=0.975, enable_prefix_caching=False, env=GRAPHS_OUTSIDE)
    ee = run(wl, gpu_memory_utilization=0.975, enable_prefix_caching=False, enforce_eager=True, env=GRAPHS_OUTSIDE)
    assert cg.metrics()["oom_per_1k"] > ee.metrics()["oom_per_1k"]


def test_prefix_caching_lowers_ttft_when_prompts_share_a_prefix(workload):
    off = run(workload, gpu_memory_utilization=0.93, enable_prefix_caching=False).metrics()
    on = run(workload, gpu_memory_utilization=0.93, enable_prefix_caching=True)
    assert on.metrics()["p50_ttft_s"] < off["p50_ttft_s"]
    assert on.metrics()["p99_ttft_s"] < off["p99_ttft_s"]
    # Nearly every shared-prefix block hits (the rate itself is over all prompt tokens, as vLLM's).
    shared = sum(tr.prefix_len // 16 * 16 for tr in generate_trace(workload, 8192) if tr.shares_prefix)
    assert on.server_metrics["prefix_cache_hits"] > 0.9 * shared


def test_prefix_caching_does_nothing_without_a_shared_prefix():
    wl = chat_workload(200, shared_prefix_fraction=0.0)
    off = run(wl, gpu_memory_utilization=0.93, enable_prefix_caching=False)
    on = run(wl, gpu_memory_utilization=0.93, enable_prefix_caching=True)
    assert on.metrics()["p50_ttft_s"] == pytest.approx(off.metrics()["p50_ttft_s"], rel=0.02)
    assert on.server_metrics["prefix_cache_hit_rate"] == 0.0


def test_runtime_oom_semantics():
    """Noise off, so that every restart takes the first start's time."""
    wl = chat_workload(400, max_restarts=2)
    res = run(wl, gpu_memory_utilization=0.975, enable_prefix_caching=False, env=GRAPHS_OUTSIDE,
              profile=NOMINAL.without_noise())
    assert res.status == TrialStatus.OK
    assert res.crashes >= 1 and res.failure_class == FailureClass.RUNTIME_OOM
    assert res.failure_reason.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    ooms = [r for r in res.records if r.status == RequestStatus.OOM]
    assert ooms and all(r.e2e_s is None for r in ooms)
    assert res.metrics()["oom_per_1k"] == pytest.approx(1000 * len(ooms) / res.requests_issued)
    assert res.crashes <= wl.max_restarts + 1
    restarts = min(res.crashes, wl.max_restarts)
    assert res.extra["restart_s"] == pytest.approx(restarts * res.startup_s)
    assert res.gpu_time_s >= res.startup_s * (1 + restarts)
    if res.crashes > wl.max_restarts:
        # Everything not finished by the last crash counts as oom.
        last_ok = max((r.send_s + r.e2e_s for r in res.records if r.status == OK), default=0.0)
        assert all(r.status == RequestStatus.OOM for r in res.records if r.send_s > last_ok)


def test_early_stop_marks_unsent_not_run_and_stops_the_clock(workload):
    # The rule stops only trials worse on both objectives, so this one must have OOMs.
    over = dict(gpu_memory_utilization=0.975, enable_prefix_caching=False, env=GRAPHS_OUTSIDE)
    full = run(workload, **over)
    assert full.metrics()["oom_per_1k"] > 0
    rule = EarlyStopRule(front=((0.0, 0.5),), min_requests=50)
    res = run(workload, early_stop=rule, **over)
    assert res.early_stopped
    not_run = [r for r in res.records if r.status == RequestStatus.NOT_RUN]
    assert not_run and len(res.records) == workload.num_requests
    assert res.requests_issued == workload.num_requests - len(not_run)
    assert res.duration_s < full.duration_s


def test_no_early_stop_against_a_worse_front(workload):
    rule = EarlyStopRule(front=((0.0, 1e6),), min_requests=50)
    res = run(workload, gpu_memory_utilization=0.93, early_stop=rule)
    assert not res.early_stopped and res.metrics()["requests_not_run"] == 0


def test_p99_lower_bound_is_a_lower_bound():
    """For every final count N <= total, the m-th largest observed latency <= numpy's p99."""
    rng = random.Random(0)
    for total in (1, 7, 100, 101, 250, 1000):
        m = p99_rank_bound(total)
        for _ in range(30):
            n_final = rng.randint(1, total)
            final = [rng.expovariate(1.0) for _ in range(n_final)]
            seen = rng.sample(final, rng.randint(0, n_final))
            if len(seen) >= m:
                assert sorted(seen)[-m] <= np.percentile(final, 99) + 1e-12
    assert p99_rank_bound(1000) <= 13  # tight enough to be useful


def test_open_loop_poisson_arrivals_are_sent_on_time():
    wl = chat_workload(150, concurrency=None, request_rate=1.0)
    res = run(wl, gpu_memory_utilization=0.93)
    trace = generate_trace(wl, 8192)
    assert res.status == TrialStatus.OK and res.metrics()["requests_ok"] == 150
    for rec, tr in zip(res.records, trace, strict=True):
        assert rec.send_s == pytest.approx(tr.arrival_s)


def test_chunked_prefill_off_still_serves(workload):
    res = run(workload, gpu_memory_utilization=0.93, enable_chunked_prefill=False)
    assert res.status == TrialStatus.OK and res.metrics()["requests_ok"] == workload.num_requests


@pytest.mark.parametrize("model,gpu,flags", [
    ("meta-llama/Llama-3.1-8B-Instruct", "L40S", {"max_model_len": 8192}),
    ("Qwen/Qwen2.5-7B-Instruct", "H100-80GB", {"max_model_len": 16384}),
    ("meta-llama/Llama-3.1-70B-Instruct", "H200", {"tensor_parallel_size": 2, "max_model_len": 16384, "quantization": "fp8"}),
    ("Qwen/Qwen2.5-72B-Instruct-AWQ", "A100-40GB", {"tensor_parallel_size": 2, "max_model_len": 8192}),
])
def test_other_models_and_gpus_run(model, gpu, flags):
    res = simulate_trial(model, gpu, flags, chat_workload(100))
    assert res.status == TrialStatus.OK, res.failure_reason
    m = res.metrics()
    assert m["requests_ok"] == 100 and not math.isnan(m["p99_e2e_s"])


def test_faster_gpu_gives_lower_tpot(workload):
    a100 = simulate_trial(QWEN72B, "A100-80GB", qwen_flags(gpu_memory_utilization=0.93), workload)
    h100 = simulate_trial(QWEN72B, "H100-80GB", qwen_flags(gpu_memory_utilization=0.93), workload)
    assert h100.metrics()["mean_tpot_s"] < 0.8 * a100.metrics()["mean_tpot_s"]


def test_sim_backend_through_the_registry(tmp_path, workload):
    backend = get_backend("sim")
    req = TrialRequest(trial_number=0, server=ServerSpec(model=QWEN72B, gpu=A100),
                       flags=qwen_flags(gpu_memory_utilization=0.92, max_num_seqs=None), workload=workload,
                       seed=1)
    res = backend.run_trial(req)
    backend.close()
    assert backend.name == "sim" and res.backend == "sim" and res.status == TrialStatus.OK
    assert res.kv_cache_tokens > 0 and len(res.peak_mem_gib) == 2
    failed = backend.run_trial(TrialRequest(0, ServerSpec(model=QWEN72B, gpu=A100),
                                            qwen_flags(gpu_memory_utilization=0.85), workload))
    assert failed.status == TrialStatus.STARTUP_FAILED and failed.metrics()["oom_per_1k"] == 1000.0


def test_sim_backend_reads_the_servers_env_and_takes_a_profile(workload):
    quiet = get_backend("sim", profile=NOMINAL.without_noise())
    server = ServerSpec(model=QWEN72B, gpu=A100, env={"VLLM_USE_V2_MODEL_RUNNER": "0", "HF_TOKEN": "x"})
    a, b = (quiet.run_trial(TrialRequest(0, server, qwen_flags(), workload, seed=s)) for s in (1, 2))
    assert a.extra["model_runner"] == "v1" and a.extra["speed_factors"] == [1.0]
    assert [r.e2e_s for r in a.records] == [r.e2e_s for r in b.records]
    assert get_backend("sim").run_trial(TrialRequest(0, ServerSpec(model=QWEN72B, gpu=A100), qwen_flags(),
                                                     workload)).extra["model_runner"] == "v2"
