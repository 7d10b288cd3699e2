"""What a study measured, as calibration reads it, and which trials it fits and which it holds out.

Every backend reports the same fields (autotune.results): the KV cache size the engine
sized at startup, the startup time, latency percentiles, TPOT and OOM counts. A latency is
compared with a simulated benchmark only where the two mean the same thing: an engine that
served the whole benchmark without dying. A benchmark stopped early reports the requests it
finished, which the full benchmark's percentiles are not; only its TPOT (a per-token step
time) is kept. A benchmark with an engine death or an OOM measures a restart and a random
crash, not the speed the constants set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.study.analysis import pooled_log_sd
from autotune.study.trials import State, TrialRecord

# Latency metrics fitted and their log-space spread per measurement before a study has
# repeats to measure it (latency_spread): the simulator's per-start speed noise (about 3 %,
# docs/simulator.md "Noise") for end-to-end times and TPOT; TTFT adds the API server's jitter.
LATENCY_SPREAD = {"p99_e2e_s": 0.03, "p50_e2e_s": 0.03, "mean_tpot_s": 0.03, "p50_ttft_s": 0.10}
MIN_SPREAD = 0.01  # no measurement is trusted beyond 1 %
SPREAD_DF = 2  # degrees of freedom before a measured spread replaces the assumed one
EARLY_STOP_SAFE = ("mean_tpot_s",)


def launched(recs: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Trials measured on an engine (started or not), by trial number."""
    return sorted((r for r in recs if r.state == State.COMPLETE), key=lambda r: r.number)


def started(r: TrialRecord) -> bool:
    return r.state == State.COMPLETE and r.started


def latencies(r: TrialRecord) -> dict[str, float]:
    """The latency metrics of ``r`` a full simulated benchmark can be compared with."""
    if not started(r) or _positive(r.metrics.get("crashes")) or _positive(r.metrics.get("requests_oom")):
        return {}
    names = EARLY_STOP_SAFE if r.early_stopped else tuple(LATENCY_SPREAD)
    return {k: r.metrics[k] for k in names if _positive(r.metrics.get(k))}


def latency_spread(recs: Sequence[TrialRecord]) -> dict[str, float]:
    """Each latency metric's log-space spread of one measurement, from the study's own
    repeats (configs measured in full more than once, pooled), where it has at least
    ``SPREAD_DF`` degrees of freedom; else the assumed ``LATENCY_SPREAD``. A real engine's
    runs differ by what they differ by, not by what the simulator's noise model says."""
    groups: dict[str, list[dict[str, float]]] = {}
    for r in recs:
        if not r.early_stopped and (m := latencies(r)):
            groups.setdefault(repr(sorted(r.flags.items())), []).append(m)
    out = {}
    for k, assumed in LATENCY_SPREAD.items():
        sd, df = pooled_log_sd([[m[k] for m in runs if k in m] for runs in groups.values()])
        out[k] = max(sd, MIN_SPREAD) if df >= SPREAD_DF else assumed
    return out


def startup_s(r: TrialRecord) -> float:
    """The engine's first startup time (NaN when it did not start or did not say)."""
    v = r.metrics.get("startup_s", math.nan)
    return v if started(r) and _positive(v) else math.nan


def kv_cache_tokens(r: TrialRecord) -> int:
    v = r.metrics.get("kv_cache_tokens", math.nan)
    return int(v) if started(r) and _positive(v) else 0


def _positive(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


@dataclass(frozen=True)
class Split:
    fit: list[TrialRecord]
    held_out: list[TrialRecord]


def split(recs: Sequence[TrialRecord], every: int) -> Split:
    """Launched trials into those fitted and those held out: configs in the order of their
    first trial, every ``every``-th config held out with all its runs (a config measured
    again by a confirmation run must not be on both sides)."""
    configs: dict[str, int] = {}
    fit: list[TrialRecord] = []
    held: list[TrialRecord] = []
    for r in launched(recs):
        key = repr(sorted(r.flags.items()))
        index = configs.setdefault(key, len(configs))
        (held if every > 0 and index % every == every - 1 else fit).append(r)
    return Split(fit, held)
