"""Stopping a benchmark that can no longer reach the Pareto front: the rule and its tally.

Any objective the metric registry (autotune.metrics) can bound from below before the
benchmark ends takes part: failure rates per 1000 requests and every latency percentile.

One implementation for every backend. The simulator and the real vLLM backend feed the
same :class:`StopTally` one finished request at a time and ask it whether to stop, so a
trial stops after the same request on either backend given the same outcomes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.metrics import Bound, CountBound, QuantileBound, bound_of
from autotune.metrics import get as get_metric
from autotune.results import RequestRecord, RequestStatus


def quantile_rank_bound(total: int, q: float) -> int:
    """m such that, whatever the final number N <= total of successful requests, numpy's
    linear-interpolated q-th percentile is >= the m-th largest value already observed: it is
    >= x_i with i = floor(q/100 (N - 1)), and x_i >= v once N - i values are >= v. At least 1."""
    if total <= 0:
        return 1
    return max(n - math.floor(q / 100.0 * (n - 1)) for n in range(1, total + 1))


def p99_rank_bound(total: int) -> int:
    """:func:`quantile_rank_bound` of p99, the flagship objective's."""
    return quantile_rank_bound(total, 99)


def p99_lower_bound(ok_latencies: Sequence[float], total: int, q: float = 99) -> float:
    """A lower bound on a trial's final q-th percentile from the successful latencies seen so far.

    Percentiles cover successful requests only and are rank statistics: once ``m`` values
    are at least ``v``, the final percentile is at least ``v`` however many more succeed or fail.
    """
    m = quantile_rank_bound(total, q)
    return float(sorted(ok_latencies)[-m]) if len(ok_latencies) >= m else 0.0


DEFAULT_OBJECTIVES = ("oom_per_1k", "p99_e2e_s")


def unboundable(objectives: Sequence[str], directions: Sequence[str]) -> list[str]:
    """The objectives the rule cannot bound before the benchmark ends ([] when it can bound
    them all, which it needs: a trial is dominated only when every objective is shown worse)."""
    return [name for name, d in zip(objectives, directions, strict=True) if bound_of(name, d) is None]  # type: ignore[arg-type]


@dataclass(frozen=True)
class EarlyStopRule:
    """Stop a benchmark once the trial is dominated by the current Pareto front.

    ``front`` holds points already achieved, one value per name in ``objectives`` (all
    minimised, each one the metric registry can bound: :func:`unboundable` is empty). After at least
    ``min_requests`` finished requests, the backend's :class:`StopTally` bounds each
    objective's final value from what it has seen and asks :meth:`dominated`: the trial stops
    when a front point is at least as good on every objective, and better by ``margin`` on the
    noisy ones (latency quantiles; a front point is a single run too). The bounds hold whatever
    the unsent requests do: failures already counted cannot be undone (floor = count / total),
    and a latency percentile's lower bound is a rank statistic of latencies already observed.
    So a stopped trial is truly dominated, and the values it reports (rates over the requests
    issued, percentiles over those finished; both >= the bounds) keep it dominated.
    """

    front: tuple[tuple[float, ...], ...]
    min_requests: int = 100
    margin: float = 1.05
    objectives: tuple[str, ...] = DEFAULT_OBJECTIVES

    def dominated(self, done: int, total: int, bounds: Sequence[float]) -> bool:
        """Whether a trial with these lower ``bounds`` on its objectives is beaten by a front point."""
        if done < self.min_requests or not self.front or total <= 0:
            return False
        noisy = [get_metric(name).bound.noisy for name in self.objectives]  # type: ignore[union-attr]
        for point in self.front:
            if any(math.isnan(f) for f in point):
                continue
            if all((f * self.margin if n else f) <= b for f, b, n in zip(point, bounds, noisy, strict=True)):
                return True
        return False


@dataclass
class StopTally:
    """Running totals of one trial for its early-stop rule, over every engine life.

    ``add`` takes each request's record as it finishes (ok, OOM or error); ``should_stop``
    asks the rule with a lower bound on each objective: failure counts over the total, and
    the rank bound of each latency quantile over the successful requests so far.
    """

    rule: EarlyStopRule | None
    total: int
    done: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"oom": 0, "error": 0})
    ok: dict[str, list[float]] = field(default_factory=dict)  # per latency series, kept sorted
    _bounds: list[Bound] = field(init=False, default_factory=list)
    _ranks: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.rule is not None:
            self._bounds = [get_metric(n).bound for n in self.rule.objectives]  # type: ignore[misc]
        self._ranks = [quantile_rank_bound(self.total, b.q) if isinstance(b, QuantileBound) else 0
                       for b in self._bounds]
        for b in self._bounds:
            if isinstance(b, QuantileBound):
                self.ok.setdefault(b.series, [])

    @property
    def ooms(self) -> int:
        return self.counts["oom"]

    def add(self, record: RequestRecord) -> None:
        self.done += 1
        if record.status == RequestStatus.OOM:
            self.counts["oom"] += 1
        elif record.status == RequestStatus.ERROR:
            self.counts["error"] += 1
        elif record.status == RequestStatus.OK:
            for series, values in self.ok.items():
                v = _series_value(record, series)
                if v is not None:
                    bisect.insort(values, v)

    def bounds(self) -> list[float]:
        """A lower bound on each of the rule's objectives' final value."""
        out = []
        for b, rank in zip(self._bounds, self._ranks, strict=True):
            if isinstance(b, CountBound):
                out.append(1000.0 * self.counts[b.status] / self.total if self.total > 0 else 0.0)
            else:
                values = self.ok[b.series]
                out.append(values[-rank] if len(values) >= rank else 0.0)
        return out

    def should_stop(self) -> bool:
        if self.rule is None:
            return False
        return self.rule.dominated(self.done, self.total, self.bounds())


def _series_value(record: RequestRecord, series: str) -> float | None:
    if series == "e2e":
        return record.e2e_s
    if series == "ttft":
        return record.ttft_s
    return record.tpot_s
