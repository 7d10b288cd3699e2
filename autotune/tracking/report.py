"""From Optuna trials to MLflow runs and plots: the bridge the study driver calls."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.rundir import RunDir
from autotune.space import SearchSpace
from autotune.study.pareto import feasible, pareto_numbers
from autotune.tracking.mlflow_tracker import MlflowTracker, TrialLog
from autotune.tracking.plots import PlotPoint, history_plot, pareto_plot


def trial_state(t: FrozenTrial) -> str:
    if t.state == TrialState.FAIL:
        return "failed"
    return t.user_attrs.get("state", "complete")


def trial_log_from_frozen(t: FrozenTrial, space: SearchSpace, artifacts: list[Path]) -> TrialLog:
    flags = dict(t.user_attrs.get("flags") or {**space.fixed_flags(), **t.params})
    metrics = {k: v for k, v in (t.user_attrs.get("metrics") or {}).items() if v is not None}
    if t.values:
        for name, v in zip(space.objective_names, t.values, strict=False):
            metrics.setdefault(f"objective.{name}", v)
    role = t.user_attrs.get("role", "search")
    tags = {
        "backend": space.engine.backend,
        "role": role,
        "baseline": str(role == "baseline").lower(),
        "reference": t.user_attrs.get("reference", "") if role in ("baseline", "reference") else "",
        "failure_class": t.user_attrs.get("failure_class", "none" if t.state == TrialState.COMPLETE else "driver"),
        "failure_reason": str(t.user_attrs.get("failure_reason", ""))[:4000],
        "feasible": str(feasible(t)).lower() if t.state == TrialState.COMPLETE else "false",
        "early_stopped": str(bool(t.user_attrs.get("early_stopped", False))).lower(),
    }
    if "requeued_from" in t.user_attrs:
        tags["requeued_from"] = str(t.user_attrs["requeued_from"])
    return TrialLog(t.number, trial_state(t), flags, metrics, tags, artifacts)


def plot_points(study: optuna.Study, space: SearchSpace) -> list[PlotPoint]:
    front = set(pareto_numbers(study, space))
    return [
        PlotPoint(t.number, tuple(t.values), feasible(t), t.number in front, t.user_attrs.get("role", "search"),
                  bool(t.user_attrs.get("started", True)))
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    ]


def write_plots(study: optuna.Study, space: SearchSpace, run_dir: RunDir, name: str) -> list[Path]:
    points = plot_points(study, space)
    if not points:
        return []
    names = space.objective_names
    paths = [history_plot(points, names, run_dir.plots / "history.png", f"{name}: optimisation history")]
    if len(names) >= 2:
        paths.append(pareto_plot(points, names, run_dir.plots / "pareto.png", f"{name}: Pareto front"))
    return paths


def finalize_tracking(study: optuna.Study, space: SearchSpace, tracker: MlflowTracker, logged: dict[int, str],
                      run_dir: RunDir, name: str) -> None:
    """Tag Pareto trials and log the plots on the invocation's parent run."""
    tracker.tag_pareto(logged, pareto_numbers(study, space))
    tracker.log_plots(write_plots(study, space, run_dir, name))
