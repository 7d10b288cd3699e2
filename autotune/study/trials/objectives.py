"""What Optuna is told about a trial: objective values and constraint values.

A trial that served nothing still gets finite values (Optuna cannot rank NaN): the
worst OOM rate (1000) or the request timeout as its latency. Constraints carry the
feasibility signal separately, so such penalties never reach the Pareto front.

A trial whose engine never served gets the penalty for EVERY metric, whatever the
backend counted: the simulator counts a startup OOM's requests as OOMs, real vLLM counts
a startup crash's as errors (oom_per_1k 0), and a dead server must measure the same on
every backend, and never look good (with feasibility constraints off, 0 OOMs would put
it on the front).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.metrics import get as get_metric
from autotune.space.schema import SearchSpace

# Constraint keys autotune sets. Feasible when <= 0, as Optuna defines it.
STARTUP_CONSTRAINT = "startup_ok"
# The engine stayed up: it did not die more often than the benchmark restarts it
# (workload.max_restarts). A crash loop serves a handful of requests fast and fails the rest,
# so its p99 is meaningless; as a constraint it never reaches the front, and the sampler
# learns where the runtime-OOM cliff is. Occasional OOMs stay in the oom_per_1k objective.
SERVING_CONSTRAINT = "serving_ok"


def penalty(metric: str, space: SearchSpace) -> float:
    """The value a metric takes when the trial produced no measurement of it: the worst it
    can be, as the metric registry declares it (autotune.metrics.Penalty)."""
    return get_metric(metric).penalty_value(space.workload.request_timeout_s)


def measured(metric: str, metrics: Mapping[str, float], started: bool, space: SearchSpace) -> float:
    """A metric as Optuna is told it: the penalty when the engine never served or the
    metric was not measured."""
    v = metrics.get(metric, math.nan) if started else math.nan
    if v is None or math.isnan(v):
        return penalty(metric, space)
    return float(v)


def objective_values(metrics: Mapping[str, float], started: bool, space: SearchSpace) -> list[float]:
    """The objectives as measured. For a benchmark stopped early (``requests_not_run`` > 0)
    they are conservative estimates: oom_per_1k counts OOMs over the requests issued (at
    least the final rate's floor, OOMs over all requests) and p99 is over the requests
    finished, which is at least the rank bound the early-stop rule proved dominated
    (autotune.early_stop.EarlyStopRule). So a stopped trial stays dominated."""
    return [measured(obj.metric, metrics, started, space) for obj in space.objectives]


@dataclass(frozen=True)
class ConstraintValues:
    values: dict[str, float]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.values.values())


def constraint_values(metrics: Mapping[str, float], started: bool, space: SearchSpace) -> ConstraintValues:
    """SLO limits, and (if enabled) whether the engine started at all.

    The keys depend only on the space, never on the result, so every trial of a study
    carries the same constraints (samplers require that).
    """
    out: dict[str, float] = {}
    if space.study.strategy.feasibility_constraints:
        out[STARTUP_CONSTRAINT] = -1.0 if started else 1.0
        crashes = metrics.get("crashes", math.nan)
        if not started or crashes is None or math.isnan(crashes):
            out[SERVING_CONSTRAINT] = 1.0
        else:
            over = crashes - space.workload.max_restarts
            out[SERVING_CONSTRAINT] = float(over) if over > 0 else -1.0
    for metric, lim in space.slo.items():
        v = measured(metric, metrics, started, space)
        out[f"slo:{metric}"] = (v - lim.max) if lim.max is not None else (lim.min - v)  # type: ignore[operator]
    return ConstraintValues(out)
