"""Stopping a benchmark that can no longer reach the Pareto front: the rule and its tally.

One implementation for every backend. The simulator and the real vLLM backend feed the
same :class:`StopTally` one finished request at a time and ask it whether to stop, so a
trial stops after the same request on either backend given the same outcomes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.results import RequestStatus


def p99_rank_bound(total: int) -> int:
    """m such that, whatever the final number N <= total of successful requests, numpy's
    linear-interpolated p99 is >= the m-th largest latency already observed: p99 >= x_i
    with i = floor(0.99 (N - 1)), and x_i >= v once N - i values are >= v. At least 1."""
    if total <= 0:
        return 1
    return max(n - math.floor(0.99 * (n - 1)) for n in range(1, total + 1))


def p99_lower_bound(ok_latencies: Sequence[float], total: int) -> float:
    """A lower bound on a trial's final p99 from the successful latencies seen so far.

    Percentiles cover successful requests only and p99 is a rank statistic: once ``m`` values
    are at least ``v``, the final p99 is at least ``v`` however many more succeed or fail.
    """
    m = p99_rank_bound(total)
    return float(sorted(ok_latencies)[-m]) if len(ok_latencies) >= m else 0.0


@dataclass(frozen=True)
class EarlyStopRule:
    """Stop a benchmark once the trial is dominated by the current Pareto front.

    ``front`` holds (oom_per_1k, p99_e2e_s) points already achieved. After at least
    ``min_requests`` finished requests, the backend asks :meth:`should_stop` with the partial
    OOM count and a lower bound on the final p99; the trial stops when a front point is at
    least as good on OOMs (``f_oom <= oom floor``) and better on p99 by ``margin``
    (``f_p99 * margin <= p99 lower bound``). Both bounds hold whatever the unsent requests
    do: OOMs already counted cannot be undone (floor = ooms / total), and the p99 lower
    bound is a rank statistic of latencies already observed. So a stopped trial is truly
    dominated, and the values it reports (OOMs over the requests issued, p99 over those
    finished; both >= the bounds) keep it dominated: they are conservative.
    """

    front: tuple[tuple[float, float], ...]
    min_requests: int = 100
    margin: float = 1.05

    def should_stop(self, done: int, total: int, ooms: int, p99_lower_bound_s: float) -> bool:
        if done < self.min_requests or not self.front or total <= 0:
            return False
        # Every future request could succeed: the final OOM rate is at least this.
        oom_floor = 1000.0 * ooms / total
        for f_oom, f_p99 in self.front:
            if math.isnan(f_p99) or math.isnan(f_oom):
                continue
            if f_oom <= oom_floor and f_p99 * self.margin <= p99_lower_bound_s:
                return True
        return False


@dataclass
class StopTally:
    """Running totals of one trial for its early-stop rule, over every engine life.

    ``add`` takes each request as it finishes (ok, OOM or error); ``should_stop`` asks the
    rule with the OOMs so far and the rank bound on p99 over the successful latencies.
    """

    rule: EarlyStopRule | None
    total: int
    done: int = 0
    ooms: int = 0
    ok_e2e: list[float] = field(default_factory=list)  # kept sorted
    rank: int = field(init=False)

    def __post_init__(self) -> None:
        self.rank = p99_rank_bound(self.total)

    def add(self, status: RequestStatus, e2e_s: float | None) -> None:
        self.done += 1
        if status == RequestStatus.OOM:
            self.ooms += 1
        elif status == RequestStatus.OK and e2e_s is not None:
            bisect.insort(self.ok_e2e, e2e_s)

    def p99_lower_bound(self) -> float:
        """:func:`p99_lower_bound` over the sorted successes kept here (no re-sort per request)."""
        return self.ok_e2e[-self.rank] if len(self.ok_e2e) >= self.rank else 0.0

    def should_stop(self) -> bool:
        if self.rule is None:
            return False
        return self.rule.should_stop(self.done, self.total, self.ooms, self.p99_lower_bound())
