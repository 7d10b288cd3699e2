"""autotune's own search strategy, as the driver consults it per trial.

Parts, each switchable in ``study.strategy`` so its effect can be measured
(experiments/search/, experiments/reality_gap/):
  (a) known-constraint pruning: the memory model rejects configs that cannot start; with
      ``prune_learns_error`` it learns the model's error from each startup and rejects only
      configs predicted to fail beyond that uncertainty (pruning.py);
  (b) crash-awareness: startup failures and SLO misses become Optuna constraints
      (autotune/study/trials/objectives.py), so constraint-aware samplers learn the boundary;
  (c) early stopping: a benchmark stops once the trial is dominated by the front, for any
      objectives the metric registry can bound (failure rates, latency percentiles);
  (d) warm start: the vLLM defaults and the references are measured first (seeding.py);
  (e) screen: the (recalibrated) simulator ranks a few of the sampler's candidates and the
      predicted best launches (screening.py; the simulator comes from autotune.calibrate).
``model_profile`` is the profile of autotune's own model in (a) and (e), never the physics
a sim backend runs (``engine.sim_profile``).
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.early_stop import EarlyStopRule, unboundable
from autotune.metrics import bound_of
from autotune.space import SearchSpace
from autotune.study.analysis import config_key, front_points, pooled_relative_sd, with_prior_sd
from autotune.study.search.pruning import StartupPredictor
from autotune.study.trials import Role, TrialRecord, records


class RunSpread:
    """The early-stop rule's noisy objective's run-to-run spread, relative, pooled over the
    configs the study ran in full more than once (confirmation runs, repeats); kept as trials
    finish, no re-reading of storage. ``metric`` is the first latency objective (p99_e2e_s
    for the flagship space)."""

    def __init__(self, metric: str = "p99_e2e_s") -> None:
        self.metric = metric
        self._runs: dict[str, list[float]] = {}

    @classmethod
    def of(cls, study: optuna.Study, space: SearchSpace | None = None) -> RunSpread:
        spread = cls(spread_metric(space) if space is not None else "p99_e2e_s")
        for r in records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
            spread.add(r)
        return spread

    def add(self, r: TrialRecord) -> None:
        v = r.metrics.get(self.metric, math.nan)
        if r.launched and r.started and not r.early_stopped and r.flags and math.isfinite(v):
            self._runs.setdefault(config_key(r.flags), []).append(v)

    def relative_sd(self) -> float:
        """The pooled spread, shrunk toward ``ASSUMED_RUN_SD`` while the repeats are few
        (:func:`with_prior_sd`); ``ASSUMED_RUN_SD`` until some config has two full runs."""
        return with_prior_sd(*pooled_relative_sd([g for g in self._runs.values() if len(g) > 1]), ASSUMED_RUN_SD)


def spread_metric(space: SearchSpace) -> str:
    """The objective whose run-to-run spread sets the stop margin: the first one the rule
    bounds with a margin (a latency percentile); p99_e2e_s when there is none."""
    for o in space.objectives:
        b = bound_of(o.metric, o.direction)
        if b is not None and b.noisy:
            return o.metric
    return "p99_e2e_s"


ASSUMED_RUN_SD = 0.05  # one run's relative p99 spread until the study has repeats to measure it


def stop_margin(run_sd: float) -> float:
    """How much worse than a front point a trial's latency bound must be before it stops: the
    rule's 5 %, widened to two of one run's relative spreads. A front point is a single run
    too, partly luck: with runs 10 % apart, a 5 % margin stops configs as good as the front."""
    sd = ASSUMED_RUN_SD if math.isnan(run_sd) else run_sd
    return max(EarlyStopRule.margin, 1.0 + 2.0 * sd)


def early_stop_rule(front: list[TrialRecord], space: SearchSpace, role: Role = Role.SEARCH,
                    run_sd: float = math.nan) -> EarlyStopRule | None:
    """The rule a trial's benchmark checks, from the front as it stands at dispatch and the
    study's run-to-run spread of p99 (``run_sd``, relative; NaN until configs were repeated).
    None for a confirmation run: it exists to measure a finalist in full, and None when an
    objective cannot be bounded before the benchmark ends (:func:`early_stop_blockers`)."""
    if not space.study.strategy.early_stop or role == Role.CONFIRM or early_stop_blockers(space):
        return None
    pts = front_points(front, space)
    return EarlyStopRule(front=tuple(pts), margin=stop_margin(run_sd),
                         objectives=tuple(space.objective_names)) if pts else None


def early_stop_blockers(space: SearchSpace) -> list[str]:
    """The objectives that keep early stopping off: a trial is dominated only when every
    objective is shown worse, and these (throughput, goodput, a server metric) have no bound
    before the benchmark ends. [] when the rule can bound them all."""
    return unboundable(space.objective_names, [o.direction for o in space.objectives])


def early_stop_notice(space: SearchSpace) -> str:
    """What a user is told at start when early stopping is asked for but cannot work ('' if it can)."""
    blockers = early_stop_blockers(space)
    if not space.study.strategy.early_stop or not blockers:
        return ""
    return (f"early stopping is off: the objective {blockers[0]} cannot be bounded before a benchmark ends "
            "(the rule bounds failure rates per 1k and latency percentiles; see `autotune metrics`)")


def prune_reason(predictor: StartupPredictor | None, flags: dict[str, Any], role: Role,
                 study: optuna.Study | None = None) -> str:
    """Why a sample must not launch ('' to launch it).

    Baseline and reference configs are measured as-is, even when predicted to fail: they
    are the comparison points, and a wrong prediction about them is worth finding out. A
    confirmation run repeats a config that already ran: it is measured, whatever the model says.
    The predictor first learns from ``study``'s launched trials, so a resumed study decides alike.
    """
    if predictor is None or role in (Role.BASELINE, Role.REFERENCE, Role.CONFIRM):
        return ""
    if study is not None:
        predictor.update(records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))
    return predictor.failure(flags)
