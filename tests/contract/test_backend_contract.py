"""The backend contract: what every backend's TrialResult means, asserted once for all of them.

The simulator, the fake vLLM server and (``-m integration``) real vLLM's CPU build each run
the same scenarios through an adapter (adapters.py). The study compares trials from any
backend with one objective function, so a startup failure, an engine death, an early stop,
the metric names and units and the prefix-cache hit rate must mean the same everywhere.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from autotune.early_stop import EarlyStopRule, p99_rank_bound, quantile_rank_bound
from autotune.metrics import names as metric_names
from autotune.results import FailureClass, RequestStatus, TrialStatus, startup_failure
from autotune.workload import generate_trace
from tests.contract.adapters import STARTUP_FAILURES, Adapter, Run
from tests.fakes.prefix_cache import PrefixCacheAccounting

# A front no trial can be worse than on p99 (it never stops a trial), and one every trial is (it always does).
NEVER_STOP = EarlyStopRule(front=((0.0, 1e9),), min_requests=1)
ALWAYS_STOP = EarlyStopRule(front=((0.0, 1e-9),), min_requests=5)
# The same on another registered objective: p95 TTFT instead of p99 e2e.
TTFT_STOP = EarlyStopRule(front=((0.0, 1e-9),), min_requests=5, objectives=("oom_per_1k", "p95_ttft_s"))
# Keys of TrialResult.server_metrics every backend reports, in vLLM's units (tokens, a ratio).
COMMON_SERVER_METRICS = {"prefix_cache_hits", "prefix_cache_queries", "prefix_cache_hit_rate"}
PEAK_MEM = "peak_mem_gib"  # per-GPU keys: present only where the GPUs' memory is known


def _healthy(case: Adapter) -> Run:
    return case.healthy(prefix_caching=True, early_stop=NEVER_STOP)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


# --- startup failures -------------------------------------------------------------------

EXPECTED_STARTUP = {
    # kind: (failure class, what every request counts as, a line of vLLM's message)
    "kv_too_small": (FailureClass.STARTUP_OOM, RequestStatus.OOM, "larger than the available KV cache memory"),
    "invalid_value": (FailureClass.INVALID_CONFIG, RequestStatus.ERROR, "fp7"),
}


@pytest.mark.parametrize("kind", STARTUP_FAILURES)
def test_a_startup_failure_records_the_same_on_every_backend(case, kind):
    run = case.startup_failure(kind)
    res, n = run.result, run.request.workload.num_requests
    failure_class, counted_as, needle = EXPECTED_STARTUP[kind]
    assert res.status == TrialStatus.STARTUP_FAILED and res.failure_class == failure_class, res.failure_reason
    assert any(needle in line for line in res.failure_evidence), res.failure_evidence
    # Every request of the benchmark is counted, as failed, and nothing was measured.
    assert res.requests_issued == n and [r.index for r in res.records] == list(range(n))
    assert all(r.status == counted_as and r.e2e_s is None and r.ttft_s is None for r in res.records)
    assert res.crashes == 0 and not res.early_stopped and res.server_metrics == {}
    assert res.gpu_time_s == res.startup_s >= 0 and res.duration_s == 0
    # The same metric values as the one definition of a startup failure (time to fail aside).
    reference = startup_failure(res.backend, failure_class, res.failure_reason, [], n).metrics()
    got = res.metrics()
    timing = {"startup_s", "gpu_time_s"}
    differ = {k: (got.get(k), v) for k, v in reference.items()
              if k not in timing and not _same(got.get(k, math.nan), v)}
    assert not differ, differ


# --- an engine death mid-run --------------------------------------------------------------

def test_an_engine_death_fails_the_requests_in_flight_and_restarts_up_to_max_restarts(case):
    run = case.engine_death()
    res, wl = run.result, run.request.workload
    lost = RequestStatus.OOM if case.death_class == FailureClass.RUNTIME_OOM else RequestStatus.ERROR
    assert res.status == TrialStatus.OK and res.failure_class == case.death_class, res.failure_reason
    # Every start died: the engine was restarted max_restarts times, and not once more.
    assert res.crashes == wl.max_restarts + 1
    assert [r.index for r in res.records] == list(range(wl.num_requests)) and res.requests_issued == wl.num_requests
    statuses = Counter(r.status for r in res.records)
    assert set(statuses) <= {RequestStatus.OK, lost} and statuses[RequestStatus.OK] > 0, statuses
    # Each death took the requests in flight with it; they and the ones never sent count as lost.
    failed = [r for r in res.records if r.status == lost]
    assert len(failed) >= res.crashes and all(r.e2e_s is None for r in failed)
    m = res.metrics()
    assert m["requests_ok"] + m["requests_oom"] + m["requests_error"] == wl.num_requests
    per_1k = "oom_per_1k" if lost == RequestStatus.OOM else "error_per_1k"
    assert m[per_1k] == pytest.approx(1000 * len(failed) / wl.num_requests)
    assert res.gpu_time_s >= res.startup_s + res.duration_s  # restarts hold the GPUs too


# --- early stop ---------------------------------------------------------------------------

def test_early_stop_stops_sending_after_the_shared_rule_says_so(case):
    run = case.healthy(prefix_caching=False, early_stop=ALWAYS_STOP)
    res, wl = run.result, run.request.workload
    assert res.status == TrialStatus.OK and res.early_stopped and res.crashes == 0
    not_run = [r for r in res.records if r.status == RequestStatus.NOT_RUN]
    assert not_run and len(res.records) == wl.num_requests
    # Requests never sent are not issued; those issued all finished (requests in flight at the
    # stop may finish or be dropped, never fail).
    assert res.requests_issued == wl.num_requests - len(not_run)
    assert all(r.status == RequestStatus.OK for r in res.records if r.status != RequestStatus.NOT_RUN)
    # The stop comes from autotune.early_stop.StopTally: once min_requests are done and the
    # p99 rank bound has enough successes; at most the requests then in flight finish after it.
    stop_at = max(ALWAYS_STOP.min_requests, p99_rank_bound(wl.num_requests))
    assert stop_at <= res.requests_issued <= stop_at + (wl.concurrency or 1) - 1
    m = res.metrics()
    assert m["requests_not_run"] == len(not_run) and m["oom_per_1k"] == 0


def test_early_stop_bounds_any_latency_percentile_objective(case):
    """The rule bounds each objective the metric registry can bound, here p95 TTFT: the trial
    stops once min_requests are done and the p95 rank bound has enough TTFTs."""
    run = case.healthy(prefix_caching=False, early_stop=TTFT_STOP)
    res, wl = run.result, run.request.workload
    assert res.status == TrialStatus.OK and res.early_stopped and res.crashes == 0
    stop_at = max(TTFT_STOP.min_requests, quantile_rank_bound(wl.num_requests, 95))
    assert stop_at <= res.requests_issued <= stop_at + (wl.concurrency or 1) - 1
    assert res.metrics()["requests_not_run"] == wl.num_requests - res.requests_issued > 0


def test_a_front_the_trial_can_beat_never_stops_it(case):
    res = _healthy(case).result
    assert res.status == TrialStatus.OK and not res.early_stopped
    assert RequestStatus.NOT_RUN not in {r.status for r in res.records}


# --- metric names and units ----------------------------------------------------------------

def test_metric_names_are_the_same_on_every_backend(case):
    res = _healthy(case).result
    names = set(res.metrics())
    expected = {k for k in metric_names() if not k.startswith(PEAK_MEM)}
    assert expected <= names and all(k.startswith(PEAK_MEM) for k in names - expected), names ^ expected
    assert COMMON_SERVER_METRICS <= set(res.server_metrics)


def test_metric_units_are_seconds_and_tokens_on_every_backend(case):
    run = _healthy(case)
    res, wl = run.result, run.request.workload
    trace = generate_trace(wl, max_model_len=case.max_model_len(run.request))
    m = res.metrics()
    # Tokens: each request's prompt and output are the trace's, counted in tokens.
    assert [(r.prompt_tokens, r.output_tokens) for r in res.records] == [(t.prompt_len, t.output_len) for t in trace]
    assert m["requests"] == m["requests_ok"] == wl.num_requests
    assert res.kv_cache_tokens >= case.max_model_len(run.request)  # vLLM refuses to start below one request
    # Seconds: per request ttft <= e2e, within the request timeout; aggregates consistent.
    assert all(0 < r.ttft_s <= r.e2e_s <= wl.request_timeout_s for r in res.records)
    assert 0 < m["p50_e2e_s"] <= m["p90_e2e_s"] <= m["p99_e2e_s"] <= max(r.e2e_s for r in res.records)
    assert 0 < m["p50_ttft_s"] <= m["p50_e2e_s"] and 0 < m["p50_tpot_s"] < m["p50_e2e_s"]
    assert m["output_tok_per_s"] == pytest.approx(sum(r.output_tokens for r in res.records) / res.duration_s)
    assert res.startup_s > 0 and res.duration_s >= max(r.send_s + r.e2e_s for r in res.records) * 0.999
    assert res.gpu_time_s >= res.startup_s + res.duration_s * 0.999


# --- prefix-cache hit rate as vLLM defines it ----------------------------------------------

def test_prefix_cache_hit_rate_is_hit_tokens_over_queried_prompt_tokens(case):
    run = _healthy(case)
    wl = run.request.workload
    sm = run.result.server_metrics
    # Queries: every request looked up its whole prompt once, at admission.
    assert sm["prefix_cache_queries"] == sum(r.prompt_tokens for r in run.result.records)
    # Hits: full blocks of earlier prompts, as vLLM's block hashes find them (tests/fakes/prefix_cache.py).
    # vLLM caches a block when it allocates it, so even requests admitted in the same step hit
    # (the upper bound); an engine caching only computed blocks may miss within the first
    # wave of `concurrency` requests sent together (the lower bound).
    trace = generate_trace(wl, max_model_len=case.max_model_len(run.request))
    prompts = [t.prompt_token_ids(wl) for t in trace]
    eager = PrefixCacheAccounting(case.block_size)
    for p in prompts:
        eager.admit(p)
    first_wave = wl.concurrency or 1
    lazy = PrefixCacheAccounting(case.block_size)
    for p in prompts[:first_wave]:
        lazy.insert(p)
    for p in prompts[first_wave:]:
        lazy.admit(p)
    assert 0 < lazy.hits <= sm["prefix_cache_hits"] <= eager.hits < eager.queries
    assert sm["prefix_cache_hit_rate"] == pytest.approx(sm["prefix_cache_hits"] / sm["prefix_cache_queries"])


def test_without_prefix_caching_nothing_is_queried_and_the_hit_rate_is_zero(case):
    # vLLM records no lookup with prefix caching off, and its hit rate over no queries is 0.0
    # (vllm/v1/metrics/stats.py, CachingMetrics.hit_rate).
    sm = case.healthy(prefix_caching=False, early_stop=ALWAYS_STOP).result.server_metrics
    assert sm["prefix_cache_queries"] == sm["prefix_cache_hits"] == 0
    assert sm["prefix_cache_hit_rate"] == 0.0
