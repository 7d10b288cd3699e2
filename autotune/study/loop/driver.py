"""The trial loop: Optuna ask/tell over a pool of workers, with explicit inputs.

The loop is GIVEN an opened study (storage and sampler inside it), a worker pool and a
list of callbacks; it owns only the order of events. Order of writes for one trial,
chosen so a kill at any point loses nothing:

    ask (RUNNING, owner recorded) -> run on a worker -> on_trial_measured (trial files)
    -> tell (COMPLETE/FAIL) -> on_trial_end (MLflow child run, progress)

A driver killed before tell leaves a RUNNING trial that the next driver fails and
re-enqueues (study/storages/recovery.py); one killed after tell leaves an unlogged trial that the
next driver logs. MLflow runs are keyed by trial number, so nothing is logged twice.

The last trials of the target may be confirmation runs of the search's finalists
(study/search/confirm.py): which kind of trial comes next is read from storage before each launch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import optuna

from autotune.backends.base import TrialProgress
from autotune.results import FailureClass, TrialResult, TrialStatus
from autotune.security import scrub
from autotune.space import SearchSpace
from autotune.study.analysis import FrontCache
from autotune.study.loop.callbacks import Callback, StudyContext, Tally
from autotune.study.loop.pool import FinishedTrial, WorkerPool
from autotune.study.search import (
    Kind,
    RunSpread,
    StartupPredictor,
    Step,
    early_stop_notice,
    leader_repeat_after,
    leader_repeats,
    next_step,
    propose,
    search_quota,
    server_spec,
    strategy,
    trial_request,
)
from autotune.study.storages import Coordinator, fail_and_requeue, with_retries
from autotune.study.trials import (
    Role,
    State,
    TrialRecord,
    constraint_values,
    enqueue_attrs,
    objective_values,
    records,
    stored_trial,
)

MAX_CONSECUTIVE_REJECTIONS = 500
FAILURE_REASON_CHARS = 1000


@dataclass(frozen=True)
class LoopResult:
    tally: Tally
    launched: int  # trials this loop dispatched to workers


class TrialLoop:
    """Keep every worker busy until the study holds ``target`` launched trials.

    ``secrets`` are scrubbed from each result (failure reason, evidence, server log) as it
    arrives, before any callback or Optuna sees it. ``stale_after_s``: how long another
    driver sharing the study may go without a heartbeat before its trials are taken over.
    """

    def __init__(self, study: optuna.Study, space: SearchSpace, pool: WorkerPool, *, target: int, seed: int,
                 callbacks: Sequence[Callback] = (), secrets: Sequence[str] = (), stale_after_s: float = 120.0) -> None:
        self.study = study
        self.space = space
        self.pool = pool
        self.target = target
        self.quota = search_quota(target, space.study.confirm)  # the rest of the target confirms
        # Finished trials before the search's leader may be repeated (never: past the target).
        self.leader_from = (leader_repeat_after(space, target, 1)
                            if leader_repeats(target, space.study.confirm) else target + 1)
        self.seed = seed
        self.callbacks = list(callbacks)
        self.secrets = list(secrets)
        self.coordinator = Coordinator(study, stale_after_s)
        self.front = FrontCache(study)
        self.spread = RunSpread.of(study, space)  # the latency objective's run-to-run spread: the stop margin
        self.tally = Tally()
        self.server = server_spec(space)
        self.predictor = StartupPredictor.for_space(space) if space.study.strategy.prune_startup_failures else None
        self.launched = 0
        self._rejections = 0  # consecutive
        self._running: dict[int, tuple[optuna.Trial, TrialRecord]] = {}

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> LoopResult:
        orphans = self.coordinator.recover()
        self._sync()
        ctx = StudyContext(self.study, self.space, self.target, self.tally, self.front, self.coordinator)
        for cb in self.callbacks:
            cb.on_study_start(ctx)
        if orphans:
            self._notice(f"resumed: failed and re-enqueued trials {orphans} left running by a dead driver")
        if notice := early_stop_notice(self.space):
            self._notice(notice)
        status = "FAILED"
        # Workers are polled only when someone shows their progress.
        self.pool.set_progress_sink(self.trial_progress if self._shows_progress() else None)
        try:
            self.pool.start()
            self._loop()
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            self.pool.shutdown()
            for cb in self.callbacks:
                cb.on_study_end(status)
        return LoopResult(self.tally, self.launched)

    def _loop(self) -> None:
        while True:
            self._heartbeat()
            for wid in self.pool.idle_workers():
                # Fresh counts before each launch: another driver sharing the study may have
                # finished or started trials since the last heartbeat.
                self._sync()
                step = self._step()
                if step.kind in (Kind.WAIT, Kind.DONE):
                    break
                nxt = self._next_launchable(step)
                if nxt is None:
                    break
                self._launch(wid, *nxt)
            if self.pool.running == 0:
                if self._step().kind == Kind.DONE or self._rejections >= MAX_CONSECUTIVE_REJECTIONS:
                    if self._rejections >= MAX_CONSECUTIVE_REJECTIONS:
                        self._notice("stopping: the last samples were all rejected; the space looks infeasible")
                    return
                time.sleep(1.0)  # the rest of the target is running on other drivers
                continue
            for fin in self.pool.wait(timeout=10.0):
                self._finish(fin)

    def _heartbeat(self) -> None:
        if not self.coordinator.beat_due():
            return
        orphans = self.coordinator.beat()
        self.front.invalidate()  # other drivers sharing the study may have moved it
        if orphans:
            self._notice(f"failed and re-enqueued trials {orphans} left running by a dead driver")
        self._sync()

    def _step(self) -> Step:
        """What to launch next. While the counts say the search has launches left and no
        repeat of its leader can be due, no storage read is needed; past that, the stored
        trials decide (confirm.next_step)."""
        t = self.tally
        if t.complete + t.running_elsewhere + self.pool.running < self.quota and t.complete < self.leader_from:
            return Step(Kind.SEARCH)
        if self.quota == self.target:  # no confirmation runs
            return Step(Kind.DONE if t.complete >= self.target else Kind.WAIT)
        trials = with_retries(lambda: self.study.get_trials(deepcopy=False), "get_trials")
        return next_step(records(trials), self.space, self.target)

    def _sync(self) -> None:
        """Counts from storage, so drivers sharing a study stop at the same total."""
        c = self.coordinator.counts()
        t = self.tally
        t.complete, t.failed, t.rejected, t.running_elsewhere = c.complete, c.failed, c.rejected, c.running_elsewhere
        t.running = self.pool.running

    def _shows_progress(self) -> bool:
        """Whether a callback does something with a running trial's progress (overrides the
        base class's on_trial_progress, which does nothing)."""
        return any(type(cb).on_trial_progress is not Callback.on_trial_progress for cb in self.callbacks)

    def trial_progress(self, number: int, progress: TrialProgress) -> None:
        """A running trial's progress: the sink the loop hands its pool, called from ``wait``.
        Dropped unless the trial is still this loop's, so it never follows on_trial_measured."""
        if number in self._running:
            for cb in self.callbacks:
                cb.on_trial_progress(number, progress)

    # ---- one trial ---------------------------------------------------------------------------
    def _next_launchable(self, step: Step) -> tuple[optuna.Trial, TrialRecord] | None:
        while self._rejections < MAX_CONSECUTIVE_REJECTIONS:
            if step.kind == Kind.CONFIRM:
                self._enqueue_repeat(step.finalist)
            trial = with_retries(self.study.ask, "ask")
            self.coordinator.claim(trial)
            p = propose(trial, self.space, self.predictor)
            if p.reject_reason:
                self._reject(trial, p.record, p.reject_reason)
                if step.kind != Kind.SEARCH:
                    return None  # the next step is decided afresh
                continue
            self._rejections = 0
            _store(trial, p.record)
            return trial, p.record
        return None

    def _enqueue_repeat(self, finalist: TrialRecord | None) -> None:
        """A confirmation run of ``finalist``'s config, asked right after (a driver killed in
        between leaves it WAITING, and the next one asks it)."""
        assert finalist is not None
        attrs = enqueue_attrs(Role.CONFIRM, finalist.reference, repeat_of=finalist.number)
        # Not wrapped in with_retries: the storage retries each call itself, and repeating a
        # whole enqueue after a lost acknowledgement would enqueue the run twice.
        self.study.enqueue_trial(finalist.params, user_attrs=attrs)

    def _launch(self, worker_id: int, trial: optuna.Trial, record: TrialRecord) -> None:
        request = trial_request(record, self.space, self.server, self.seed,
                                strategy.early_stop_rule(self.front.trials(), self.space, record.role,
                                                         self.spread.relative_sd()))
        self.launched += 1
        self._running[record.number] = (trial, record)
        for cb in self.callbacks:
            cb.on_trial_start(record)
        self.pool.submit(worker_id, record.number, request)
        self.tally.running = self.pool.running

    def _reject(self, trial: optuna.Trial, record: TrialRecord, reason: str) -> None:
        """Tell Optuna the sample is infeasible without launching anything."""
        self._rejections += 1
        record.state, record.started = State.REJECTED, False
        record.failure_class, record.failure_reason = str(FailureClass.REJECTED), scrub(reason, self.secrets)
        self._settle(trial, record)
        record = self._tell(trial, record)  # the told record: its end time is Optuna's
        self.tally.rejected += 1
        self._end(record, None)

    def _finish(self, fin: FinishedTrial) -> None:
        trial, record = self._running.pop(fin.key)
        self.tally.running = self.pool.running
        if fin.worker_died is not None or fin.result is None:
            self._fail(trial, record, fin.worker_died or "the worker returned no result")
            return
        result = self._scrubbed(fin.result)
        metrics = result.metrics()
        record.state, record.started, record.worker = State.COMPLETE, result.status == TrialStatus.OK, fin.worker_id
        record.metrics = metrics
        record.failure_class = str(result.failure_class)
        record.failure_reason = result.failure_reason[:FAILURE_REASON_CHARS]
        record.early_stopped = result.early_stopped
        record.warnings = list(result.warnings)
        self._settle(trial, record)
        for cb in self.callbacks:
            cb.on_trial_measured(record, result)
        record = self._tell(trial, record)
        self.tally.complete += 1
        self.front.add(record)
        self.spread.add(record)
        self._end(record, result)

    def _fail(self, trial: optuna.Trial, record: TrialRecord, reason: str) -> None:
        """The worker died under the trial: nothing was measured; run the config again."""
        frozen = stored_trial(self.study, trial.number)
        if fail_and_requeue(self.study, frozen, scrub(reason, self.secrets), live=trial):
            self.tally.failed += 1
        self._end(TrialRecord.from_frozen(stored_trial(self.study, trial.number)), None)

    def _settle(self, trial: optuna.Trial, record: TrialRecord) -> None:
        """What Optuna will rank (values, constraints) and the record's attributes, stored
        on the still RUNNING trial."""
        record.constraints = constraint_values(record.metrics, record.started, self.space).values
        record.values = objective_values(record.metrics, record.started, self.space)
        for k, v in record.constraints.items():
            trial.set_constraint(k, v)
        _store(trial, record)

    def _tell(self, trial: optuna.Trial, record: TrialRecord) -> TrialRecord:
        frozen = with_retries(lambda: self.study.tell(trial, record.values, skip_if_finished=True), "tell")
        return TrialRecord.from_frozen(frozen)

    def _end(self, record: TrialRecord, result: TrialResult | None) -> None:
        for cb in self.callbacks:
            cb.on_trial_end(record, result)

    def _notice(self, message: str) -> None:
        for cb in self.callbacks:
            cb.on_notice(message)

    def _scrubbed(self, result: TrialResult) -> TrialResult:
        result.failure_reason = scrub(result.failure_reason, self.secrets)
        result.failure_evidence = [scrub(x, self.secrets) for x in result.failure_evidence]
        result.artifacts.server_log = scrub(result.artifacts.server_log, self.secrets)
        return result


def _store(trial: optuna.Trial, record: TrialRecord) -> None:
    for k, v in record.changed_attrs(trial.user_attrs).items():
        trial.set_user_attr(k, v)
