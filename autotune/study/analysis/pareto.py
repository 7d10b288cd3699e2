"""The Pareto front of a study (the rule that picks one config to deploy is export_rule.py).

Two fronts, for two readers:

* :func:`pareto_trials` / :class:`FrontCache`: Optuna's own, over single trials. The trial
  loop's early-stopping rule compares a running trial with it (a trial is measured once
  there, so that is what it is compared against).
* :func:`config_front` / :func:`pareto_numbers`: what people are shown (`autotune status`,
  MLflow's ``pareto`` tag and compare view, the plots, the run summary). A config measured
  more than once stands there with the **mean** of its full runs, not with each run: the
  lowest of dozens of single measurements is partly the luckiest, and a lucky first run
  of a config whose confirmation runs came out slower must not stay on the front as if
  the repeats had not happened. Each point is named by the config's first run (the trial
  that stands for it everywhere, as in the export rule), and says how many runs it averages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from autotune.space import SearchSpace
from autotune.study.analysis.evidence import config_key
from autotune.study.trials import TrialRecord, records


def pareto_trials(study: optuna.Study) -> list[TrialRecord]:
    """Non-dominated launched trials (Optuna's best trials: feasible ones only when the
    study has constraints), by trial number."""
    if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
        return []
    best = study.best_trials if len(study.directions) > 1 else [study.best_trial]
    return sorted((r for r in map(TrialRecord.from_frozen, best) if r.launched), key=lambda r: r.number)


@dataclass(frozen=True)
class FrontPoint:
    """One config on the front: its objective values (the mean over its full runs)."""

    number: int  # the config's first run: the trial that stands for it
    numbers: tuple[int, ...]  # every run averaged, by trial number
    values: tuple[float, ...]

    @property
    def runs(self) -> int:
        return len(self.numbers)


def config_points(recs: Sequence[TrialRecord]) -> list[FrontPoint]:
    """Every launched, feasible config with its objective values: the mean over its full runs.

    A trial stopped early stands alone (its values are estimates of its own, never averaged
    with full runs); so does one without recorded flags (an old study). A config with an
    infeasible run is left out, as Optuna leaves out an infeasible trial."""
    groups: dict[str, list[TrialRecord]] = {}
    for r in sorted(recs, key=lambda x: x.number):
        if not r.launched or not r.values:
            continue
        key = config_key(r.flags) if r.flags and not r.early_stopped else f"trial:{r.number}"
        groups.setdefault(key, []).append(r)
    points = []
    for runs in groups.values():
        if any(r.constraints and not r.feasible for r in runs):
            continue
        vals = [r.values for r in runs if r.values]
        points.append(FrontPoint(runs[0].number, tuple(r.number for r in runs),
                                 tuple(sum(v) / len(vals) for v in zip(*vals, strict=True))))
    return points


def non_dominated(points: Sequence[FrontPoint], directions: Sequence[StudyDirection]) -> list[FrontPoint]:
    signs = [1.0 if d == StudyDirection.MINIMIZE else -1.0 for d in directions]

    def key(p: FrontPoint) -> list[float]:
        return [s * v for s, v in zip(signs, p.values, strict=True)]

    def dominates(a: FrontPoint, b: FrontPoint) -> bool:
        ka, kb = key(a), key(b)
        return all(x <= y for x, y in zip(ka, kb, strict=True)) and ka != kb

    return sorted((p for p in points if not any(dominates(q, p) for q in points)), key=lambda p: p.number)


def config_front(study: optuna.Study) -> list[FrontPoint]:
    """The front people are shown: configs, at the mean of their full runs (module docstring)."""
    done = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return non_dominated(config_points(done), study.directions)


def pareto_numbers(study: optuna.Study) -> list[int]:
    """The trials that stand for the configs on :func:`config_front`."""
    return [p.number for p in config_front(study)]


def front_points(front: list[TrialRecord], space: SearchSpace) -> list[tuple[float, ...]]:
    """The objective values of the given front, in the space's objective order, for the
    early-stopping rule."""
    n = len(space.objectives)
    return [tuple(r.values[:n]) for r in front if r.values]


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
