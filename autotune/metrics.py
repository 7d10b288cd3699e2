"""The metric registry: every number a trial reports, declared once.

A metric's declaration says what it measures and in which unit, which way is better, where
it comes from (the trial's request records, vLLM's ``/metrics``, or facts of the engine),
the value it takes when a trial could not measure it, whether the early-stop rule can bound
it before the benchmark ends, and how it is printed. Objectives, SLOs and constraints may
name any registered metric; the aggregates every backend reports are computed here from the
declarations (:func:`compute_metrics`), so the simulator and real vLLM can never disagree on
what "p95 TTFT" means, and a new metric is one declaration.

Latency percentiles follow ``vllm bench serve``: numpy's linear-interpolated percentile over
the successful requests; TPOT is per request and per sequence, ``(e2e - ttft) / (tokens - 1)``.
Per-token inter-token latency (ITL) is what vLLM's ``/metrics`` histogram measures; it is
registered as the server metric ``server_itl_p99_s`` (and p50, mean), reported by real vLLM only.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

import numpy as np

from autotune.formatting import number

if TYPE_CHECKING:
    from autotune.results import TrialResult

Direction = Literal["minimize", "maximize"]


class Source(StrEnum):
    REQUESTS = "requests"  # aggregated over the trial's request records, alike on every backend
    SERVER = "server"  # scraped from vLLM's /metrics (the simulator reports those it models)
    ENGINE = "engine"  # facts the backend reports about the engine: crashes, startup, memory


class Penalty(StrEnum):
    """What a metric is worth when the trial did not measure it: the worst it can be, finite
    (Optuna cannot rank NaN). A timeout is the workload's request timeout."""

    PER_1K = "per_1k"  # a rate per 1000 requests: 1000
    ZERO = "zero"  # higher is better: 0
    TIMEOUT = "timeout"  # a latency: the request timeout
    LARGE = "large"  # a count or size with no natural worst: 1e9


@dataclass(frozen=True)
class QuantileBound:
    """The early-stop rule can bound this latency quantile from below before the benchmark
    ends: a percentile is a rank statistic, so once enough successful requests took at least
    ``v``, the final value is at least ``v`` whatever the rest do
    (autotune.early_stop.quantile_rank_bound).
    It is a single run's latency, partly luck, so a front point must beat it by the rule's margin."""

    series: Literal["e2e", "ttft", "tpot"]
    q: float
    noisy: bool = True


@dataclass(frozen=True)
class CountBound:
    """A rate per 1000 requests of a failure status: failures already counted cannot be
    undone, so the final rate is at least ``1000 * count / total``. Counted, not noisy."""

    status: Literal["oom", "error"]
    noisy: bool = False


Bound = QuantileBound | CountBound


@dataclass(frozen=True)
class Metric:
    """One registered metric. ``unit`` is how a reader reads it ("s", "per 1k requests");
    ``simulated`` says whether the simulator reports it (a server metric it does not model is
    NaN there, so a simulated study cannot optimise it)."""

    name: str
    unit: str
    direction: Direction
    source: Source
    help: str
    penalty: Penalty
    bound: Bound | None = None
    simulated: bool = True
    digits: int = 4

    def display(self, value: float | None) -> str:
        """The value as status, the export header and the MLflow views print it: with its unit."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return number(value)
        shown = number(float(value), self.digits)
        return f"{shown} {self.unit}" if self.unit else shown

    @property
    def label(self) -> str:
        """The name with its unit, as a column header: ``p95_ttft_s [s]``."""
        return f"{self.name} [{self.unit}]" if self.unit else self.name

    def penalty_value(self, request_timeout_s: float) -> float:
        return {Penalty.PER_1K: 1000.0, Penalty.ZERO: 0.0, Penalty.TIMEOUT: float(request_timeout_s),
                Penalty.LARGE: 1e9}[self.penalty]


# --- the declarations --------------------------------------------------------------------

# Latency percentiles offered for every latency series: what vLLM's benchmarks, AIPerf and
# the SLO literature quote. A new percentile is one more number here.
PERCENTILES: tuple[float, ...] = (50, 75, 90, 95, 99, 99.9)
LATENCY_SERIES: dict[str, str] = {
    "e2e": "end-to-end latency of a successful request",
    "ttft": "time to first token of a successful streamed request",
    "tpot": "time per output token after the first, per request and sequence (vllm bench's TPOT)",
}


def percentile_name(series: str, q: float) -> str:
    """``p95_ttft_s``, ``p99.9_e2e_s``: the percentile as vLLM's benchmarks print it."""
    return f"p{q:g}_{series}_s"


def _latency_metrics() -> list[Metric]:
    out = []
    for series, what in LATENCY_SERIES.items():
        for q in PERCENTILES:
            out.append(Metric(percentile_name(series, q), "s", "minimize", Source.REQUESTS,
                              f"p{q:g} of the {what}", Penalty.TIMEOUT,
                              QuantileBound(series, q)))  # type: ignore[arg-type]
        out.append(Metric(f"mean_{series}_s", "s", "minimize", Source.REQUESTS, f"mean {what}",
                          Penalty.TIMEOUT))
    return out


def _m(name: str, unit: str, direction: Direction, source: Source, help: str, penalty: Penalty,
       bound: Bound | None = None, simulated: bool = True) -> Metric:
    return Metric(name, unit, direction, source, help, penalty, bound, simulated)


_REQUESTS, _SERVER, _ENGINE = Source.REQUESTS, Source.SERVER, Source.ENGINE
_MIN: Direction = "minimize"
_MAX: Direction = "maximize"

_COUNTS = [
    _m("requests", "requests", _MAX, _REQUESTS, "requests issued", Penalty.ZERO),
    _m("requests_ok", "requests", _MAX, _REQUESTS, "requests that succeeded", Penalty.ZERO),
    _m("requests_oom", "requests", _MIN, _REQUESTS, "requests lost to an OOM", Penalty.LARGE),
    _m("requests_error", "requests", _MIN, _REQUESTS, "requests failed otherwise", Penalty.LARGE),
    _m("requests_not_run", "requests", _MIN, _REQUESTS, "requests not sent: the trial stopped early",
       Penalty.LARGE),
    _m("oom_per_1k", "per 1k requests", _MIN, _REQUESTS,
       "requests lost to an out-of-memory error, per 1000 issued", Penalty.PER_1K, CountBound("oom")),
    _m("error_per_1k", "per 1k requests", _MIN, _REQUESTS,
       "requests failed for another reason (crash, hang, HTTP error), per 1000 issued", Penalty.PER_1K,
       CountBound("error")),
]
_RATES = [
    _m("output_tok_per_s", "tokens/s", _MAX, _REQUESTS, "output tokens of successful requests per second",
       Penalty.ZERO),
    _m("goodput_rps_per_gpu", "requests/s/GPU", _MAX, _REQUESTS,
       "requests meeting workload.goodput_slo per second per GPU (DistServe)", Penalty.ZERO),
    _m("slo_attainment", "ratio", _MAX, _REQUESTS, "share of issued requests meeting workload.goodput_slo",
       Penalty.ZERO),
]
_ENGINE_FACTS = [
    _m("crashes", "deaths", _MIN, _ENGINE, "engine deaths during the benchmark (OOM or not)", Penalty.LARGE),
    _m("preemptions", "preemptions", _MIN, _SERVER,
       "requests preempted for KV blocks (vllm:num_preemptions_total over the trial)", Penalty.LARGE),
    _m("kv_cache_tokens", "tokens", _MAX, _ENGINE, "KV cache size the engine allocated", Penalty.ZERO),
    _m("startup_s", "s", _MIN, _ENGINE, "engine start to ready, first start", Penalty.LARGE),
    _m("duration_s", "s", _MIN, _ENGINE, "benchmark wall time (simulated time on the simulator)",
       Penalty.LARGE),
    _m("gpu_time_s", "s", _MIN, _ENGINE, "time the GPUs were held: startups, restarts, benchmark",
       Penalty.LARGE),
    _m("peak_mem_gib_max", "GiB", _MIN, _ENGINE, "peak memory of the most loaded GPU", Penalty.LARGE),
]

# Server metrics: vLLM's /metrics, summarised over the trial by the vLLM backend
# (autotune.backends.vllm.metrics), under ``server_`` + the summary's key. ``simulated``
# marks those the simulator reports too.
_SERVER_SUMMARY: list[tuple[str, str, Direction, str, Penalty, bool]] = [
    ("prefix_cache_hit_rate", "ratio", _MAX, "prefix-cache hit tokens over queried prompt tokens (vLLM's "
     "CachingMetrics.hit_rate)", Penalty.ZERO, True),
    ("prefix_cache_hits", "tokens", _MAX, "prompt tokens served from the prefix cache", Penalty.ZERO, True),
    ("kv_cache_usage_max", "ratio", _MIN, "peak share of KV blocks in use (vllm:kv_cache_usage_perc)",
     Penalty.LARGE, False),
    ("num_requests_waiting_max", "requests", _MIN, "peak queue length (vllm:num_requests_waiting)",
     Penalty.LARGE, False),
    ("num_requests_running_max", "requests", _MAX, "peak running batch (vllm:num_requests_running)",
     Penalty.ZERO, False),
    ("queue_mean_s", "s", _MIN, "mean time a request waited in the scheduler's queue", Penalty.TIMEOUT, False),
    ("queue_p99_s", "s", _MIN, "p99 of the scheduler queue time (histogram)", Penalty.TIMEOUT, False),
    ("itl_mean_s", "s", _MIN, "mean inter-token latency (vllm:inter_token_latency_seconds)", Penalty.TIMEOUT,
     False),
    ("itl_p50_s", "s", _MIN, "p50 inter-token latency (histogram)", Penalty.TIMEOUT, False),
    ("itl_p99_s", "s", _MIN, "p99 inter-token latency (histogram)", Penalty.TIMEOUT, False),
    ("prefill_mean_s", "s", _MIN, "mean time in prefill (vllm:request_prefill_time_seconds)", Penalty.TIMEOUT,
     False),
    ("decode_mean_s", "s", _MIN, "mean time in decode (vllm:request_decode_time_seconds)", Penalty.TIMEOUT,
     False),
]
SERVER_PREFIX = "server_"
_SERVER_METRICS = [_m(SERVER_PREFIX + key, unit, d, _SERVER, help, pen, None, sim)
                   for key, unit, d, help, pen, sim in _SERVER_SUMMARY]

REGISTRY: dict[str, Metric] = {m.name: m for m in [*_COUNTS, *_latency_metrics(), *_RATES, *_ENGINE_FACTS,
                                                      *_SERVER_METRICS]}
# One per GPU, numbered by the engine: not enumerable ahead of the trial.
PER_GPU_PREFIX = "peak_mem_gib_gpu"


def get(name: str) -> Metric:
    """The declaration of ``name`` (``peak_mem_gib_gpu<i>`` included); KeyError if unregistered."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name.startswith(PER_GPU_PREFIX) and name[len(PER_GPU_PREFIX):].isdigit():
        base = REGISTRY["peak_mem_gib_max"]
        return Metric(name, base.unit, base.direction, base.source, f"peak memory of GPU {name[len(PER_GPU_PREFIX):]}",
                      base.penalty)
    raise KeyError(name)


def is_registered(name: str) -> bool:
    try:
        get(name)
    except KeyError:
        return False
    return True


def unknown_metric_message(name: str) -> str:
    """One line naming the unknown metric, the nearest registered names and where all are listed."""
    close = difflib.get_close_matches(name, list(REGISTRY), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return (f"unknown metric {name!r}; {hint}any of {', '.join(list(REGISTRY)[:6])}, ... "
            "(all are listed by `autotune metrics` and in docs/metrics.md)")


def check_name(name: str) -> str:
    """``name`` if it is registered, else ValueError with :func:`unknown_metric_message`."""
    if not is_registered(name):
        raise ValueError(unknown_metric_message(name))
    return name


def names() -> frozenset[str]:
    """Every registered metric; peak memory adds one ``peak_mem_gib_gpu<i>`` per GPU, and
    ``peak_mem_gib_*`` are reported only where the backend knows the GPUs' memory."""
    return frozenset(REGISTRY)


def label(name: str) -> str:
    """``name [unit]`` for a registered metric, the bare name otherwise."""
    return get(name).label if is_registered(name) else name


def display(name: str, value: float | None) -> str:
    return get(name).display(value) if is_registered(name) else number(value)


def bound_of(name: str, direction: Direction) -> Bound | None:
    """How the early-stop rule can bound ``name`` when it is optimised in ``direction``: the
    rule proves a trial dominated, so it needs a bound on the side a trial could still win on
    (a lower bound for a metric minimised). None when no such bound exists (throughput's final
    value depends on requests not yet sent)."""
    m = get(name)
    return m.bound if m.bound is not None and direction == m.direction == "minimize" else None


# --- aggregation -------------------------------------------------------------------------

def _percentiles(values: list[float]) -> list[float]:
    if not values:
        return [math.nan] * len(PERCENTILES)
    return [float(v) for v in np.percentile(values, PERCENTILES)]


def _latency_aggregates(series: Mapping[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in LATENCY_SERIES:
        vals = series[s]
        for q, v in zip(PERCENTILES, _percentiles(vals), strict=True):
            out[percentile_name(s, q)] = v
        out[f"mean_{s}_s"] = float(np.mean(vals)) if vals else math.nan
    return out


def compute_metrics(result: TrialResult) -> dict[str, float]:
    """Every registered aggregate of ``result``. Latency percentiles cover successful requests
    only; a server metric the backend did not report is NaN (never 0: it was not measured)."""
    from autotune.results import RequestStatus, goodput

    ok = [r for r in result.records if r.status == RequestStatus.OK]
    series = {
        "e2e": [r.e2e_s for r in ok if r.e2e_s is not None],
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [t for r in ok if (t := r.tpot_s) is not None],
    }
    issued = result.requests_issued or len(result.records)
    n_oom = sum(r.status == RequestStatus.OOM for r in result.records)
    n_err = sum(r.status == RequestStatus.ERROR for r in result.records)
    out_tokens = sum(r.output_tokens for r in ok)
    good, attainment = goodput(result, issued)
    m: dict[str, float] = {
        "requests": float(issued),
        "requests_ok": float(len(ok)),
        "requests_oom": float(n_oom),
        "requests_error": float(n_err),
        "requests_not_run": float(sum(r.status == RequestStatus.NOT_RUN for r in result.records)),
        "oom_per_1k": 1000.0 * n_oom / issued if issued else 0.0,
        "error_per_1k": 1000.0 * n_err / issued if issued else 0.0,
        **_latency_aggregates(series),
        "output_tok_per_s": out_tokens / result.duration_s if result.duration_s > 0 else 0.0,
        "goodput_rps_per_gpu": good,
        "slo_attainment": attainment,
        "crashes": float(result.crashes),
        "preemptions": float(result.preemptions),
        "kv_cache_tokens": float(result.kv_cache_tokens),
        "startup_s": float(result.startup_s),
        "duration_s": float(result.duration_s),
        "gpu_time_s": float(result.gpu_time_s),
    }
    for key, *_ in _SERVER_SUMMARY:
        v = result.server_metrics.get(key)
        m[SERVER_PREFIX + key] = math.nan if v is None else float(v)
    if result.peak_mem_gib:
        m["peak_mem_gib_max"] = float(max(result.peak_mem_gib))
        for i, v in enumerate(result.peak_mem_gib):
            m[f"{PER_GPU_PREFIX}{i}"] = float(v)
    return m


def table(metrics: Iterable[Metric] | None = None) -> list[dict[str, str]]:
    """The registry as rows (name, unit, direction, source, early stop, simulated, help), for
    ``autotune metrics`` and docs/metrics.md."""
    rows = []
    for m in metrics if metrics is not None else REGISTRY.values():
        can = m.bound is not None and m.direction == "minimize"
        rows.append({"name": m.name, "unit": m.unit, "direction": m.direction, "source": str(m.source),
                     "early_stop": "yes" if can else "no", "simulated": "yes" if m.simulated else "no",
                     "help": m.help})
    return rows

