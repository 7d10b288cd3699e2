"""The trial loop's MLflow callback: a parent run per invocation, a child run per trial.

Child runs are created after Optuna is told (``on_trial_end``) and keyed by trial number,
so a resumed driver logs each told-but-unlogged trial once and never one twice; trials a
live driver sharing the study told are that driver's to log. A resumed driver also
repairs what a dead one left half-written: a child run left RUNNING (killed, or the disk
filled, mid-log) is deleted and logged again from Optuna's record, and an invocation run
left RUNNING is marked KILLED.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.study.analysis import pareto_numbers
from autotune.study.loop import Callback, StudyContext, existing_files
from autotune.study.trials import Role, TrialRecord, records
from autotune.tracking.mlflow_tracker import DRIVER_TAG, MlflowTracker
from autotune.tracking.report import tag_recommendation, trial_log, write_plots
from autotune.tracking.views import experiment_tags


class MlflowLogger(Callback):
    def __init__(self, tracking_uri: str, run_dir: RunDir, invocation_params: Mapping[str, Any],
                 invocation_tags: Mapping[str, str]) -> None:
        self.tracking_uri = tracking_uri
        self.run_dir = run_dir
        self.params = dict(invocation_params)
        self.tags = dict(invocation_tags)
        self.logged: dict[int, str] = {}  # trial number -> child run id
        self._ctx: StudyContext | None = None
        self._tracker: MlflowTracker | None = None

    def on_study_start(self, ctx: StudyContext) -> None:
        self._ctx = ctx
        name = ctx.study.study_name
        self._tracker = MlflowTracker(self.tracking_uri, self.run_dir.mlflow_artifacts, name,
                                      own_store=self.tracking_uri == self.run_dir.mlflow_url)
        self._tracker.set_experiment_tags(
            experiment_tags(ctx.space, name, self._tracker.experiment_id, self._tracker.created_ms))
        self._close_dead_invocations()
        self._log_untracked()
        self._tracker.start_invocation(self.params, {**self.tags, DRIVER_TAG: str(ctx.coordinator.me)})

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        self._log(record)

    def on_study_end(self, status: str) -> None:
        ctx, tracker = self._parts()
        try:
            self._log_untracked()
            tracker.tag_pareto(self.logged, pareto_numbers(ctx.study), _baseline_numbers(ctx.study))
            # The export rule's pick, as `autotune status` and `autotune export` name it.
            tag_recommendation(tracker, self.logged, ctx.study, ctx.space)
            tracker.log_plots(write_plots(ctx.study, ctx.space, self.run_dir))
        finally:
            t = ctx.tally
            tracker.end_invocation(status, {"complete": t.complete, "failed": t.failed, "rejected": t.rejected})

    def _parts(self) -> tuple[StudyContext, MlflowTracker]:
        assert self._ctx is not None and self._tracker is not None, "on_study_start was not called"
        return self._ctx, self._tracker

    def _log(self, record: TrialRecord) -> None:
        ctx, tracker = self._parts()
        if record.number in self.logged:
            return
        files: list[Path] = existing_files(self.run_dir, record.number)
        log = trial_log(record, ctx.space, files)
        repeated = self.logged.get(log.repeat_of) if log.repeat_of is not None else None
        self.logged[record.number] = tracker.log_trial(log, repeated)

    def _log_untracked(self) -> None:
        """Trials told by an earlier driver that died before logging them to MLflow in full:
        not logged at all, or a run left unfinished, which is deleted and logged again."""
        ctx, tracker = self._parts()
        runs = tracker.trial_runs()
        self.logged = {**runs.finished, **self.logged}
        told = ctx.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        todo = [t for t in told if t.number not in self.logged or t.number in runs.unfinished]
        for t in ctx.coordinator.mine_or_orphaned(todo):
            for rid in runs.unfinished.get(t.number, []):
                tracker.discard(rid)
            self._log(TrialRecord.from_frozen(t))

    def _close_dead_invocations(self) -> None:
        """Invocation runs still RUNNING whose driver is gone (SIGKILL, a full disk): KILLED."""
        ctx, tracker = self._parts()
        for rid, driver, started_at in tracker.running_invocations():
            if ctx.coordinator.gone(driver, started_at):
                tracker.close_run(rid, "KILLED")


def _baseline_numbers(study: optuna.Study) -> list[int]:
    """Launched trials of vLLM's defaults: what the Pareto trials are compared against."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return [r.number for r in records(done) if r.role == Role.BASELINE and r.launched]
