"""The Pareto front of a study (the rule that picks one config to deploy is export_rule.py)."""

from __future__ import annotations

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.space import SearchSpace
from autotune.study.record import TrialRecord


def pareto_trials(study: optuna.Study) -> list[TrialRecord]:
    """Non-dominated launched trials (Optuna's best trials: feasible ones only when the
    study has constraints), by trial number."""
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    best = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    return sorted((r for r in map(TrialRecord.from_frozen, best) if r.launched), key=lambda r: r.number)


def pareto_numbers(study: optuna.Study) -> list[int]:
    try:
        return [r.number for r in pareto_trials(study)]
    except ValueError:  # single objective with no feasible trial yet
        return []


def front_points(front: list[TrialRecord], space: SearchSpace) -> list[tuple[float, float]]:
    """(oom_per_1k, p99_e2e_s) of the given front, for the early-stopping rule."""
    names = space.objective_names
    i, j = names.index("oom_per_1k"), names.index("p99_e2e_s")
    return [(r.values[i], r.values[j]) for r in front if r.values]


class FrontCache:
    """The study's Pareto front, kept current without re-reading every trial.

    ``study.best_trials`` reads and sorts all trials: O(n) per call, and the loop needs
    the front after every trial (progress, early stopping), which made a study's total
    cost quadratic. One driver's own results update the front incrementally; trials told
    by other drivers sharing the study arrive through :meth:`invalidate` at each heartbeat.
    """

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self._front: list[TrialRecord] | None = None
        self._signs = [1.0 if d == StudyDirection.MINIMIZE else -1.0 for d in study.directions]

    def invalidate(self) -> None:
        self._front = None

    def trials(self) -> list[TrialRecord]:
        if self._front is None:
            self._front = pareto_trials(self.study)
        return self._front

    def add(self, r: TrialRecord) -> None:
        """Fold in one newly told trial (same rule as ``best_trials``)."""
        if self._front is None or not r.launched or not r.values:
            return
        if r.constraints and not r.feasible:
            return
        if any(self._dominates(f, r) for f in self._front):
            return
        self._front = sorted([f for f in self._front if not self._dominates(r, f)] + [r], key=lambda x: x.number)

    def _dominates(self, a: TrialRecord, b: TrialRecord) -> bool:
        assert a.values is not None and b.values is not None
        av = [s * v for s, v in zip(self._signs, a.values, strict=True)]
        bv = [s * v for s, v in zip(self._signs, b.values, strict=True)]
        return all(x <= y for x, y in zip(av, bv, strict=True)) and av != bv
