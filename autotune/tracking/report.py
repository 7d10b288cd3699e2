"""From trial records to MLflow runs and plots."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.rundir import RunDir
from autotune.space import SearchSpace
from autotune.study.pareto import pareto_numbers
from autotune.study.record import Role, State, TrialRecord, records
from autotune.tracking.mlflow_tracker import TrialLog
from autotune.tracking.naming import abbreviations, flags_label
from autotune.tracking.plots import PlotPoint, history_plot, pareto_plot


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
