"""What a trial produced, identical in shape for every backend.

A backend fills per-request records and a few engine facts; the aggregates (the
objectives among them) are declared and computed once, in the metric registry
(autotune.metrics), so the simulator and real vLLM can never disagree on what "p99" or
"OOMs per 1000 requests" mean.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass


class RequestStatus(StrEnum):
    OK = "ok"
    OOM = "oom"  # in flight when the engine died of OOM, or left over after max_restarts
    ERROR = "error"  # any other failure: crash, hang, HTTP error, timeout
    NOT_RUN = "not_run"  # never sent because the benchmark was stopped early


class TrialStatus(StrEnum):
    OK = "ok"  # the server started and the benchmark ran (requests may still have failed)
    STARTUP_FAILED = "startup_failed"  # the engine never served a request


class FailureClass(StrEnum):
    """Why a trial, or the engine during it, failed. Shared taxonomy for all backends."""

    NONE = "none"
    STARTUP_OOM = "startup_oom"  # no memory for KV blocks, KV cache < max_model_len, OOM loading/capturing
    RUNTIME_OOM = "runtime_oom"  # CUDA OOM while serving; the engine died
    CRASH = "crash"  # the engine died for another reason
    HANG = "hang"  # no progress within the time limit
    INVALID_CONFIG = "invalid_config"  # vLLM rejected a flag or value
    REJECTED = "rejected"  # autotune's memory model predicted startup failure; nothing launched


@dataclass
class RequestRecord:
    """One benchmark request. Times are seconds; ``send_s`` is relative to benchmark start.

    The request options it carried are recorded as sent (``None``: not sent). With
    ``n > 1`` the request generates ``n`` sequences side by side: ``output_tokens`` counts
    the tokens of all of them (what the server's usage reports), ``ttft_s`` is the time to
    the first token of any of them, and :attr:`tpot_s` is per sequence (the decode step
    time a user of one sequence sees). A request that could not stream (vLLM refuses
    ``prompt_logprobs > 0`` with ``stream=True``) has ``streamed`` False and no TTFT.
    """

    index: int
    send_s: float
    ttft_s: float | None
    e2e_s: float | None
    prompt_tokens: int
    output_tokens: int
    status: RequestStatus = RequestStatus.OK
    error: str = ""
    prompt_logprobs: int | None = None
    logprobs: int | None = None
    n: int = 1
    streamed: bool = True

    @property
    def tokens_per_sequence(self) -> float:
        return self.output_tokens / self.n

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, as vLLM's benchmarks define it (per sequence)."""
        if self.ttft_s is None or self.e2e_s is None or self.tokens_per_sequence <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.tokens_per_sequence - 1)


@pydantic_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class GoodputSLO:
    """Per-request service-level objectives for goodput (DistServe, OSDI '24).

    A request is *good* if it succeeded, its TTFT is at most ``ttft_s`` and its TPOT at
    most ``tpot_s``. A request with a single output token per sequence has no TPOT and is
    judged on TTFT alone (as ``vllm bench serve --goodput`` does). A request that could not
    stream has no TTFT or TPOT; it is good if it finished within the latest time a request
    meeting both could: ``e2e_s <= ttft_s + tpot_s * (tokens per sequence - 1)``.
    """

    ttft_s: float = Field(gt=0)
    tpot_s: float = Field(gt=0)

    def met_by(self, r: RequestRecord) -> bool:
        if r.status != RequestStatus.OK or r.e2e_s is None:
            return False
        if r.ttft_s is None:
            return r.e2e_s <= self.ttft_s + self.tpot_s * max(r.tokens_per_sequence - 1, 0)
        tpot = r.tpot_s
        return r.ttft_s <= self.ttft_s and (tpot is None or tpot <= self.tpot_s)


SERVER_LOG_CAP_CHARS = 2_000_000


def cap_log(text: str, cap: int = SERVER_LOG_CAP_CHARS) -> str:
    """``text`` cut to about ``cap`` characters: the head (the launch, vLLM's config and
    startup) and the tail (where a death is explained) are kept, the middle is elided."""
    if len(text) <= cap:
        return text
    head = cap // 4
    tail = cap - head
    skipped = len(text) - head - tail
    return f"{text[:head]}\n[... autotune: {skipped} characters elided ...]\n{text[-tail:]}"


@dataclass
class TrialArtifacts:
    """What a trial produced besides its numbers, shipped back inside the result.

    Workers may run on another node than the driver, so nothing travels as a path: the
    server log is text (capped by :func:`cap_log`), the GPU timeline and the /metrics
    snapshots are plain lists. The driver alone writes them to the run directory and MLflow.
    """

    server_log: str = ""
    gpu_timeline: list[dict[str, Any]] = field(default_factory=list)
    metrics_snapshots: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class TrialResult:
    """Everything a backend reports for one trial. ``metrics()`` gives the aggregates."""

    status: TrialStatus
    backend: str
    records: list[RequestRecord] = field(default_factory=list)
    failure_class: FailureClass = FailureClass.NONE
    failure_reason: str = ""
    # Log lines (or simulator messages) that decided the failure class.
    failure_evidence: list[str] = field(default_factory=list)
    requests_issued: int = 0
    kv_cache_tokens: int = 0
    crashes: int = 0  # engine deaths during the benchmark (OOM or not)
    preemptions: int = 0
    peak_mem_gib: list[float] = field(default_factory=list)  # per GPU; empty when unknown
    startup_s: float = 0.0  # engine start to ready, first start only, download excluded
    duration_s: float = 0.0  # benchmark wall time (simulated time for the simulator)
    gpu_time_s: float = 0.0  # time the GPUs were held: startups, restarts and benchmark
    early_stopped: bool = False
    # GPUs the engine held (tensor x pipeline parallel size); goodput is per GPU.
    gpus: int = 0
    # The workload's goodput SLOs, carried so the aggregates can judge each request.
    goodput_slo: GoodputSLO | None = None
    server_metrics: dict[str, float] = field(default_factory=dict)
    # Things a user must know when reading this trial's numbers (e.g. a flag the simulator
    # does not model was set); the driver records them with the trial.
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    artifacts: TrialArtifacts = field(default_factory=TrialArtifacts)

    def metrics(self) -> dict[str, float]:
        """Every registered aggregate (autotune.metrics). Latency percentiles cover successful
        requests only."""
        from autotune.metrics import compute_metrics  # the registry builds on these records

        return compute_metrics(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def goodput(result: TrialResult, issued: int) -> tuple[float, float]:
    """(good requests per second per GPU, share of issued requests that were good).

    NaN when the trial has no SLO, and goodput NaN when the GPU count or duration is unknown:
    a number that cannot be computed is never reported as 0.
    """
    slo = result.goodput_slo
    if slo is None:
        return math.nan, math.nan
    good = sum(slo.met_by(r) for r in result.records)
    attainment = good / issued if issued else math.nan
    if good == 0:
        return 0.0, attainment
    if result.gpus <= 0 or result.duration_s <= 0:
        return math.nan, attainment
    return good / result.duration_s / result.gpus, attainment


def startup_failure(backend: str, failure_class: FailureClass, reason: str, evidence: list[str],
                    requests: int, startup_s: float = 0.0) -> TrialResult:
    """A trial whose engine never served: every request of the benchmark counts as failed.

    A startup OOM counts each request as ``oom`` (the engine could not hold the load at
    all), so ``oom_per_1k`` is 1000; other startup failures count them as ``error``.
    """
    status = RequestStatus.OOM if failure_class == FailureClass.STARTUP_OOM else RequestStatus.ERROR
    records = [RequestRecord(i, 0.0, None, None, 0, 0, status, reason[:200]) for i in range(requests)]
    return TrialResult(
        status=TrialStatus.STARTUP_FAILED,
        backend=backend,
        records=records,
        failure_class=failure_class,
        failure_reason=reason,
        failure_evidence=evidence,
        requests_issued=requests,
        startup_s=startup_s,
        gpu_time_s=startup_s,
    )
