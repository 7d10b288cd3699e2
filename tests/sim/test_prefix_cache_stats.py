"""The simulator's prefix-cache counters follow vLLM's: tokens queried and tokens found cached.

vLLM 0.32 (``KVCacheManager.record_prefix_cache_stats``, called at admission) adds a new
request's prompt tokens to ``vllm:prefix_cache_queries`` and its cached tokens (whole
blocks, at most prompt - 1 tokens) to ``vllm:prefix_cache_hits``; with prefix caching off
nothing is looked up.
"""

from __future__ import annotations

import json

import pytest

from autotune.sim import simulate_trial
from autotune.workload import LengthDist, WorkloadSpec
from tests.sim.conftest import chat_workload

LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"


def _one_at_a_time(n: int) -> WorkloadSpec:
    """Every prompt: the same 128-token prefix, then 64 tokens of its own; one request at a time."""
    return WorkloadSpec(num_requests=n, concurrency=1, prompt_len=LengthDist(dist="fixed", mean=64),
                        output_len=LengthDist(dist="fixed", mean=8), shared_prefix_fraction=1.0,
                        shared_prefix_len=128)


@pytest.mark.parametrize("block_size", [16, 32])
def test_hit_rate_on_a_workload_computed_by_hand(block_size):
    # 10 prompts of 192 tokens are queried; the first finds nothing, each later one finds the
    # 128 prefix tokens (8 blocks of 16, or 4 of 32) cached: 9 x 128 / (10 x 192) = 0.6.
    res = simulate_trial(LLAMA8B, "H100-80GB", {"max_model_len": 4096, "block_size": block_size},
                         _one_at_a_time(10))
    m = res.server_metrics
    assert (m["prefix_cache_queries"], m["prefix_cache_hits"]) == (10 * 192, 9 * 128)
    assert m["prefix_cache_hit_rate"] == pytest.approx(0.6)


def test_no_lookups_without_prefix_caching():
    res = simulate_trial(LLAMA8B, "H100-80GB", {"max_model_len": 4096, "enable_prefix_caching": False},
                         _one_at_a_time(5))
    m = res.server_metrics
    assert m["prefix_cache_queries"] == m["prefix_cache_hits"] == 0
    # As vLLM reports it (CachingMetrics.hit_rate over no queries) and so the vllm backend.
    assert m["prefix_cache_hit_rate"] == 0.0


def test_chat_workload_rate_counts_all_prompt_tokens():
    """80 % of prompts share a 1024-token prefix: hits are about that share of the tokens, not
    the near-100 % of shared-prefix blocks that hit."""
    res = simulate_trial("Qwen/Qwen2.5-72B-Instruct", "A100-80GB",
                         {"tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.93},
                         chat_workload(200))
    m = res.server_metrics
    assert m["prefix_cache_hit_rate"] == pytest.approx(m["prefix_cache_hits"] / m["prefix_cache_queries"])
    assert 0.5 < m["prefix_cache_hit_rate"] < 0.85


def test_trace_hash_ids_share_exactly_the_blocks_they_name(tmp_path):
    """Blocks are identified by their whole history of hash IDs, not by position: F's first
    block (ID 9) must not hit A's first block (ID 1), and G hits F's because both start with 9.
    One request at a time, 512-token blocks of 16-token KV blocks:
    A [1,2,3] nothing; B [1,2,4] 1024; F [9,10] nothing; G [9,11] 512; C [5,8] nothing."""
    rows = [(0.0, [1, 2, 3]), (1.0, [1, 2, 4]), (2.0, [9, 10]), (3.0, [9, 11]), (4.0, [5, 8])]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": t, "prompt_tokens": 1600, "output_tokens": 8, "hash_ids": ids})
                             + "\n" for t, ids in rows))
    wl = WorkloadSpec(num_requests=5, concurrency=1, trace={"path": str(trace)}).loaded()
    m = simulate_trial(LLAMA8B, "H100-80GB", {"max_model_len": 4096}, wl).server_metrics
    assert (m["prefix_cache_queries"], m["prefix_cache_hits"]) == (5 * 1600, 1024 + 512)
