"""The Pareto front of a study, and the rule that picks one config to deploy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.study.seeding import ROLE_REJECTED


def _launched(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and t.user_attrs.get("role") != ROLE_REJECTED


def feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())


def pareto_trials(study: optuna.Study, space: SearchSpace) -> list[FrozenTrial]:
    """Non-dominated launched trials; feasible ones only when the study has constraints."""
    if not study.trials or not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    best = study.best_trials if len(space.objectives) > 1 else [study.best_trial]
    return sorted((t for t in best if _launched(t)), key=lambda t: t.number)


def pareto_numbers(study: optuna.Study, space: SearchSpace) -> list[int]:
    try:
        return [t.number for t in pareto_trials(study, space)]
    except ValueError:  # single objective with no feasible trial yet
        return []


def front_points(front: list[FrozenTrial], space: SearchSpace) -> list[tuple[float, float]]:
    """(oom_per_1k, p99_e2e_s) of the given front, for the early-stopping rule."""
    names = space.objective_names
    i, j = names.index("oom_per_1k"), names.index("p99_e2e_s")
    return [(t.values[i], t.values[j]) for t in front]


class FrontCache:
    """The study's Pareto front, kept current without re-reading every trial.

    ``study.best_trials`` reads and sorts all trials: O(n) per call, and the driver needs
    the front after every trial (progress, early stopping), which made a study's total
    cost quadratic. One driver's own results update the front incrementally; trials told
    by other drivers sharing the study arrive through :meth:`invalidate` at each heartbeat.
    """

    def __init__(self, study: optuna.Study, space: SearchSpace) -> None:
        self.study = study
        self.space = space
        self._front: list[FrozenTrial] | None = None
        self._signs = [1.0 if d == "minimize" else -1.0 for d in (o.direction for o in space.objectives)]

    def invalidate(self) -> None:
        self._front = None

    def trials(self) -> list[FrozenTrial]:
        if self._front is None:
            self._front = pareto_trials(self.study, self.space)
        return self._front

    def add(self, t: FrozenTrial) -> None:
        """Fold in one newly told trial (same rule as ``best_trials``)."""
        if self._front is None or not _launched(t):
            return
        if t.constraints and not feasible(t):
            return
        if any(self._dominates(f, t) for f in self._front):
            return
        self._front = sorted([f for f in self._front if not self._dominates(t, f)] + [t], key=lambda x: x.number)

    def _dominates(self, a: FrozenTrial, b: FrozenTrial) -> bool:
        av = [s * v for s, v in zip(self._signs, a.values, strict=True)]
        bv = [s * v for s, v in zip(self._signs, b.values, strict=True)]
        return all(x <= y for x, y in zip(av, bv, strict=True)) and av != bv


@dataclass(frozen=True)
class Choice:
    trial: FrozenTrial
    rule: str


def metric(t: FrozenTrial, name: str, space: SearchSpace) -> float:
    if name in space.objective_names and t.values:
        return float(t.values[space.objective_names.index(name)])
    v: Any = (t.user_attrs.get("metrics") or {}).get(name)
    return math.nan if v is None else float(v)


def choose_for_export(study: optuna.Study, space: SearchSpace, max_oom_per_1k: float) -> Choice | None:
    """The documented export rule (docs/export.md).

    Among Pareto trials, the lowest p99_e2e_s whose oom_per_1k <= ``max_oom_per_1k``;
    if none is within the limit, the lowest oom_per_1k (ties broken by p99). Trials that
    stopped early are skipped: their numbers are estimates.
    """
    front = [t for t in pareto_trials(study, space) if not t.user_attrs.get("early_stopped")]
    if not front:
        return None

    def key(t: FrozenTrial) -> tuple[float, float]:
        return metric(t, "oom_per_1k", space), metric(t, "p99_e2e_s", space)

    within = [t for t in front if key(t)[0] <= max_oom_per_1k]
    if within:
        best = min(within, key=lambda t: (key(t)[1], key(t)[0], t.number))
        return Choice(best, f"lowest p99_e2e_s among Pareto trials with oom_per_1k <= {max_oom_per_1k:g}")
    best = min(front, key=lambda t: (key(t)[0], key(t)[1], t.number))
    return Choice(best, f"no Pareto trial has oom_per_1k <= {max_oom_per_1k:g}: lowest oom_per_1k")
