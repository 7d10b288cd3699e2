"""From trial records to MLflow runs and plots."""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Mapping
from pathlib import Path

import optuna
from mlflow.entities import Metric, RunTag
from optuna.trial import TrialState

from autotune.formatting import number
from autotune.metrics import display
from autotune.rundir import RunDir
from autotune.space import SearchSpace
from autotune.study.analysis import (
    OOM_METRIC,
    ConfigEvidence,
    Ranking,
    pareto_numbers,
    recommendation,
    study_evidence,
)
from autotune.study.trials import Role, State, TrialRecord, records
from autotune.tracking.mlflow_tracker import MlflowTracker, TrialLog
from autotune.tracking.naming import abbreviations, flags_label
from autotune.tracking.plots import PlotPoint, history_plot, pareto_plot
from autotune.tracking.views import COMPARE_TAG


def trial_log(r: TrialRecord, space: SearchSpace, artifacts: list[Path]) -> TrialLog:
    """One child run: every flag the trial ran with as params, every aggregate as a metric."""
    metrics = dict(r.metrics)
    metrics["trial_elapsed_s"] = r.elapsed_s  # ask to tell: what the trial cost in wall time
    for name, v in zip(space.objective_names, r.values or (), strict=False):
        metrics.setdefault(f"objective.{name}", v)
    role = "rejected" if r.state == State.REJECTED else str(r.role)
    tags = {
        "backend": space.engine.backend,
        "role": role,
        "baseline": str(r.role == Role.BASELINE and r.state != State.REJECTED).lower(),
        "reference": r.reference if role in ("baseline", "reference") else "",
        "failure_class": r.failure_class,
        "failure_reason": r.failure_reason[:4000],
        "feasible": str(r.state in (State.COMPLETE, State.REJECTED) and r.feasible).lower(),
        "early_stopped": str(r.early_stopped).lower(),
    }
    if r.requeued_from is not None:
        tags["requeued_from"] = str(r.requeued_from)
    if r.warnings:
        tags["warnings"] = "; ".join(r.warnings)[:4000]
    flags = r.flags or {**space.fixed_flags(), **r.params}
    return TrialLog(r.number, str(r.state), flags, metrics, tags, artifacts, name=run_name(r, space),
                    start_ms=_epoch_ms(r.started_at), end_ms=_epoch_ms(r.finished_at), repeat_of=r.repeat_of)


def run_name(r: TrialRecord, space: SearchSpace) -> str:
    """``search-0041 gmu=0.92 mns=128 eager``: role, number, then the searched flags as run
    (``reference-0001 field-report-tuned ...`` and ``confirm-0045 repeats-0041 ...`` say more)."""
    role = "rejected" if r.state == State.REJECTED else str(r.role)
    parts = [f"{role}-{r.number:04d}"]
    if r.reference:
        parts.append(r.reference)
    if r.repeat_of is not None:
        parts.append(f"repeats-{r.repeat_of:04d}")
    short = abbreviations(space.params, [n for n, p in space.params.items() if p.type == "bool"])
    label = flags_label(r.searched_flags(space.params), short)
    return " ".join([*parts, label] if label else parts)


def _epoch_ms(t: dt.datetime | None) -> int | None:
    # Optuna's trial times are naive local times, which .timestamp() reads as local.
    return None if t is None else int(t.timestamp() * 1000)


def plot_points(study: optuna.Study) -> list[PlotPoint]:
    front = set(pareto_numbers(study))
    return [
        PlotPoint(r.number, tuple(r.values or ()), r.feasible, r.number in front,
                  "rejected" if r.state == State.REJECTED else str(r.role), r.started)
        for r in records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    ]


def write_plots(study: optuna.Study, space: SearchSpace, run_dir: RunDir) -> list[Path]:
    points = plot_points(study)
    if not points:
        return []
    names, name = space.objective_names, study.study_name
    paths = [history_plot(points, names, run_dir.plots / "history.png", f"{name}: optimisation history")]
    if len(names) >= 2:
        paths.append(pareto_plot(points, names, run_dir.plots / "pareto.png", f"{name}: Pareto front"))
    return paths


# Where MLflow holds the recommended config (docs/tracking.md): the experiment and each
# invocation run name its trial; every trial run says whether it is the one, and what its
# figures stand on.
RECOMMENDED_TAG = "autotune.recommended_trial"
RECOMMENDED_RULE_TAG = "autotune.recommended_rule"
PREDICTED_OOM_METRIC = "oom_per_1k_predicted"  # as `status --json` names it
EVIDENCE_TAG = "evidence"  # on a trial run: "single run", or "mean of 3 runs (trials 2, 5, 6)"


def recommendation_tags(study: optuna.Study, space: SearchSpace) -> tuple[dict[str, str], dict[int, dict[str, str]],
                                                                          dict[int, dict[str, float]]]:
    """What MLflow is told about the recommendation and the front, from the stored study:
    (experiment and invocation tags, tags per trial, metrics per trial).

    The recommended config is the export rule's (:func:`recommendation`), the same one
    `autotune status` marks and `autotune export` writes. The trial standing for a config
    measured more than once gets its mean and 95 % interval as metrics (``mean.<metric>``,
    ``ci95_low.<metric>``, ``ci95_high.<metric>``; its own run's figures stay as they are),
    and every trial run an ``evidence`` tag that says whether its figures are one run's. With
    ``export.oom_model`` the trial standing for a config also gets the refitted hazard's
    predicted OOM rate (``oom_per_1k_predicted``): one over the limit ranks the config after
    those not so predicted.
    """
    choice = recommendation(study, space)
    recommended = choice.trial.number if choice else None
    exp = {RECOMMENDED_TAG: "none" if recommended is None else str(recommended),
           RECOMMENDED_RULE_TAG: choice.rule if choice else "no config served the whole benchmark yet"}
    evidence = study_evidence(study, space)
    rank = Ranking.for_space(space).metric
    per_trial: dict[int, dict[str, str]] = {}
    metrics: dict[int, dict[str, float]] = {}
    for c in evidence.configs:
        for r in c.runs:
            per_trial[r.number] = {"recommended": "false", EVIDENCE_TAG: _evidence_words(c, r.number, rank)}
        if c.n > 1:
            m: dict[str, float] = {"runs": float(c.n)}
            for name, i in c.intervals.items():
                m[f"mean.{name}"] = i.mean
                if i.known:
                    m[f"ci95_low.{name}"], m[f"ci95_high.{name}"] = i.low, i.high
            m[f"mean.{OOM_METRIC}"] = c.oom.rate_per_1k
            metrics[c.first.number] = m
        if not math.isnan(c.oom.predicted_per_1k):  # export.oom_model: what status --json and the header show
            metrics.setdefault(c.first.number, {})[PREDICTED_OOM_METRIC] = c.oom.predicted_per_1k
    for r in records(study.get_trials(deepcopy=False)):
        per_trial.setdefault(r.number, {"recommended": "false", EVIDENCE_TAG: _other_evidence(r)})
    if recommended is not None:
        per_trial[recommended]["recommended"] = "true"
    return exp, per_trial, metrics


def _evidence_words(c: ConfigEvidence, trial: int, metric: str) -> str:
    """What a trial's figures stand on, with the ranked metric rounded for reading (MLflow's
    table shows every stored digit): ``mean of 3 runs: p99_e2e_s 25.9 s [24.17, 27.63] (trials
    3, 7, 8)``, ``single run: p99_e2e_s 24.9 s`` (units as the metric registry declares them)."""
    i = c.interval(metric)
    if not any(r.started for r in c.runs):
        return "never served: the engine did not start"
    if c.n == 1:
        return f"single run: {metric} {display(metric, i.mean)}"
    if trial != c.first.number:
        return f"repeat of trial {c.first.number} (the {c.center_word} is on trial {c.first.number})"
    ci = f" [{number(i.low, 4)}, {number(i.high, 4)}]" if i.known else ""
    return (f"{c.center_word} of {c.n} runs: {metric} {display(metric, i.mean)}{ci} "
            f"(trials {', '.join(map(str, c.numbers))})")


def _other_evidence(r: TrialRecord) -> str:
    """A trial that is no full run of any config."""
    if r.state == State.REJECTED:
        return "rejected: not launched"
    if r.early_stopped:
        return "stopped early: estimates"
    return "no measurement"


def tag_recommendation(tracker: MlflowTracker, logged: Mapping[int, str], study: optuna.Study,
                       space: SearchSpace) -> int | None:
    """Write :func:`recommendation_tags` to the experiment, the invocation run and the
    logged trial runs; the recommended trial joins the compare view (with vLLM's defaults
    and the front). Returns the recommended trial's number."""
    exp, per_trial, metrics = recommendation_tags(study, space)
    tracker.set_experiment_tags(exp)
    if tracker.parent_run_id:
        tracker.client.log_batch(tracker.parent_run_id, tags=[RunTag(k, v) for k, v in exp.items()])
    recommended = None if exp[RECOMMENDED_TAG] == "none" else int(exp[RECOMMENDED_TAG])
    now = int(time.time() * 1000)
    for trial, rid in logged.items():
        tags = dict(per_trial.get(trial, {"recommended": "false"}))
        if trial == recommended:
            tags[COMPARE_TAG] = "true"
        vals = [Metric(k, float(v), now, 0) for k, v in metrics.get(trial, {}).items() if not math.isnan(v)]
        tracker.client.log_batch(rid, tags=[RunTag(k, v) for k, v in tags.items()], metrics=vals)
    return recommended
