"""The study driver: Optuna ask/tell over a pool of Ray workers, every trial in MLflow.

Order of writes for one trial, chosen so a kill at any point loses nothing:
ask (RUNNING, owner recorded) -> run on a worker -> trial files -> tell (COMPLETE/FAIL)
-> MLflow child run. A driver killed before tell leaves a RUNNING trial that the next
driver fails and re-enqueues; one killed after tell leaves an unlogged trial that the
next driver logs. MLflow runs are keyed by trial number, so nothing is logged twice.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from autotune.backends import ServerSpec, TrialRequest
from autotune.errors import UserError
from autotune.results import FailureClass, TrialResult, TrialStatus
from autotune.rundir import RunDir
from autotune.security import mask_url, scrub, secret_values
from autotune.space import SearchSpace, space_fingerprint
from autotune.study import seeding, strategy
from autotune.study.objectives import constraint_values, objective_values
from autotune.study.params import check_constraints, suggest_params
from autotune.study.pareto import FrontCache, pareto_numbers
from autotune.study.progress import Progress
from autotune.study.pruning import StartupPredictor
from autotune.study.recovery import (
    DRIVER_ATTR,
    DriverId,
    beat,
    heartbeats,
    is_mine_or_orphaned,
    recover_orphans,
    running_elsewhere,
)
from autotune.study.samplers import make_sampler
from autotune.study.storage import check_url, expand_url, open_storage, with_retries
from autotune.study.trial_files import (
    write_flags,
    write_gpu_timeline,
    write_requests_csv,
    write_result_json,
    write_server_log,
)
from autotune.tracking.mlflow_tracker import MlflowTracker, TrialLog
from autotune.tracking.report import finalize_tracking, trial_log_from_frozen
from autotune.workers.cluster import ClusterInfo, connect, disconnect, plan_workers
from autotune.workers.pool import Finished, WorkerPool

log = logging.getLogger(__name__)

FINGERPRINT_ATTR = "autotune.space_fingerprint"
MAX_CONSECUTIVE_REJECTIONS = 500


@dataclass
class RunOptions:
    out: Path | None = None
    study_name: str | None = None
    trials: int | None = None
    workers: int | None = None
    seed: int | None = None
    address: str | None = None
    progress: bool = True
    stale_after_s: float = 120.0
    backend_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    study: str
    run_dir: Path
    n_complete: int
    n_failed: int
    n_rejected: int
    pareto: list[int]
    workers: int
    wall_s: float
    launched: int


def study_name_for(space: SearchSpace, space_path: Path, override: str | None) -> str:
    return override or space.study.name or space_path.stem


class StudyDriver:
    def __init__(self, space: SearchSpace, space_path: Path, opts: RunOptions) -> None:
        self.space = space
        self.opts = opts
        self.name = study_name_for(space, space_path, opts.study_name)
        self.run_dir = RunDir(opts.out or Path("runs") / self.name)
        self.target = opts.trials or space.study.trials
        self.seed = space.study.seed if opts.seed is None else opts.seed
        self.me = DriverId.mine()
        self.secrets = secret_values(space.engine.env, [space.study.storage, space.study.mlflow_tracking_uri])
        self.predictor = StartupPredictor.for_space(space) if space.study.strategy.prune_startup_failures else None
        self.launched = 0
        self.counts = {"complete": 0, "failed": 0, "rejected": 0}
        self._consecutive_rejections = 0
        self._last_beat = 0.0
        self._running_elsewhere = 0

    # ---- setup -------------------------------------------------------------------------
    def _open_study(self) -> optuna.Study:
        url = expand_url(self.space.study.storage) if self.space.study.storage else self.run_dir.optuna_url
        self.secrets += secret_values({}, [url])
        storage = open_storage(url)
        directions = [o.direction for o in self.space.objectives]
        sampler = make_sampler(self.space.study.sampler, self.space, self.seed)
        try:
            # Only the driver that creates the study seeds it: two drivers starting together
            # on a shared storage must not both enqueue the warm-start trials.
            study = with_retries(
                lambda: optuna.create_study(storage=storage, study_name=self.name, directions=directions,
                                            sampler=sampler),
                "create_study",
            )
            self._created = True
        except optuna.exceptions.DuplicatedStudyError:
            study = with_retries(
                lambda: optuna.load_study(study_name=self.name, storage=storage, sampler=sampler), "load_study"
            )
            self._created = False
        if list(study.directions) != [
            optuna.study.StudyDirection.MINIMIZE if d == "minimize" else optuna.study.StudyDirection.MAXIMIZE
            for d in directions
        ]:
            raise UserError(f"study {self.name!r} exists with other objectives; use --study NEW_NAME")
        self._check_fingerprint(study)
        return study

    def _check_fingerprint(self, study: optuna.Study) -> None:
        fp = space_fingerprint(self.space)
        attrs = study.user_attrs
        if FINGERPRINT_ATTR not in attrs:
            study.set_user_attr(FINGERPRINT_ATTR, fp)
            study.set_user_attr("autotune.backend", self.space.engine.backend)
            # A creator killed before seeding leaves an unseeded study: seed it then.
            if self.space.study.strategy.warm_start and (self._created or not study.trials):
                seeding.enqueue_warm_start(study, self.space)
            self.run_dir.space_copy.write_text(yaml.safe_dump(_masked_space(self.space), sort_keys=False))
        elif attrs[FINGERPRINT_ATTR] != fp:
            raise UserError(
                f"study {self.name!r} was created from a different space (engine, params, constraints, workload "
                "or objectives changed); resume with the original file or pass --study NEW_NAME"
            )

    # ---- main loop ---------------------------------------------------------------------
    def _preflight(self) -> tuple[ClusterInfo, int]:
        """Everything that can refuse the run, checked before anything is written.

        A bad storage URL, an unknown sampler, an unreachable Ray or too many workers must
        leave no run directory, no study and no MLflow experiment behind.
        """
        if self.space.study.storage:
            check_url(expand_url(self.space.study.storage))
        if self.space.study.mlflow_tracking_uri:
            expand_url(self.space.study.mlflow_tracking_uri, "study.mlflow_tracking_uri")
        make_sampler(self.space.study.sampler, self.space, self.seed)
        g, c = self.space.cluster.gpus_per_worker, self.space.cluster.cpus_per_worker
        requested = self.opts.workers or self.space.cluster.workers
        logical = None
        if self.space.engine.backend in ("sim", "noop") and not self.opts.address and g > 0:
            logical = (requested or 2) * g  # the simulator runs on CPUs but keeps the GPU placement path
        info = connect(self.opts.address or self.space.cluster.address, logical_gpus=logical)
        try:
            return info, plan_workers(requested, g, c, info)
        except BaseException:
            disconnect(info)
            raise

    def run(self) -> RunSummary:
        t0 = time.time()
        info, n_workers = self._preflight()
        try:
            return self._run(info, n_workers, t0)
        finally:
            disconnect(info)

    def _run(self, info: ClusterInfo, n_workers: int, t0: float) -> RunSummary:
        self.run_dir.ensure()
        study = self._open_study()
        self.study = study
        self.front = FrontCache(study, self.space)
        orphans = recover_orphans(study, self.me, self.opts.stale_after_s)
        self._sync_counts()
        mlflow_uri = self.space.study.mlflow_tracking_uri
        mlflow_uri = expand_url(mlflow_uri, "study.mlflow_tracking_uri") if mlflow_uri else self.run_dir.mlflow_url
        self.secrets += secret_values({}, [mlflow_uri])
        tracker = MlflowTracker(mlflow_uri, self.run_dir.mlflow_artifacts, self.name)
        self.tracker = tracker
        progress = Progress(self.target, self.space.objective_names, self.opts.progress)
        self.progress = progress
        if orphans:
            progress.say(f"resumed: failed and re-enqueued trials {orphans} left running by a dead driver")
        self._logged = tracker.logged_trials()
        self._log_untracked()

        g, c = self.space.cluster.gpus_per_worker, self.space.cluster.cpus_per_worker
        tracker.start_invocation(self._invocation_params(n_workers), {"backend": self.space.engine.backend})
        progress.say(
            f"study {self.name}: {self.counts['complete']}/{self.target} trials done; backend "
            f"{self.space.engine.backend}, {n_workers} worker(s) x {g} GPU(s), sampler {self.space.study.sampler}; "
            f"run dir {self.run_dir.root}"
        )
        pool = self._make_pool(n_workers, g, c)
        pool.start()
        self._pool = pool
        status = "FAILED"
        try:
            self._loop(pool)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            pool.shutdown()
            self._finalize(status)
        return RunSummary(
            self.name, self.run_dir.root, self.counts["complete"], self.counts["failed"], self.counts["rejected"],
            pareto_numbers(self.study, self.space), n_workers, time.time() - t0, self.launched,
        )

    def _make_pool(self, n_workers: int, gpus: int, cpus: float) -> WorkerPool:
        """The workers trials run on; the search benchmark swaps in a simulated-clock pool."""
        return WorkerPool(self.space.engine.backend, n_workers, gpus, cpus, self.opts.backend_kwargs)

    def _loop(self, pool: WorkerPool) -> None:
        while True:
            self._heartbeat()
            for wid in pool.idle_workers():
                # Fresh counts before each launch: another driver sharing the study may have
                # finished or started trials since the last heartbeat.
                self._sync_counts()
                if self.counts["complete"] + self._running_elsewhere + pool.running >= self.target:
                    break
                nxt = self._next_launchable()
                if nxt is None:
                    break
                trial, request = nxt
                self.launched += 1
                pool.submit(wid, (trial, request), request)
            if pool.running == 0:
                if self.counts["complete"] >= self.target or self._consecutive_rejections >= MAX_CONSECUTIVE_REJECTIONS:
                    if self._consecutive_rejections >= MAX_CONSECUTIVE_REJECTIONS:
                        self.progress.say("stopping: the last samples were all rejected; the space looks infeasible")
                    return
                time.sleep(1.0)  # the rest of the target is running on other drivers
                continue
            for fin in pool.wait(timeout=10.0):
                self._finish(fin)

    def _heartbeat(self) -> None:
        now = time.time()
        if now - self._last_beat > 5:
            with_retries(lambda: beat(self.study, self.me), "heartbeat")
            self._last_beat = now
            self.front.invalidate()  # other drivers sharing the study may have moved it
            # A driver sharing the study may have died since we started: take its trials over.
            orphans = with_retries(lambda: recover_orphans(self.study, self.me, self.opts.stale_after_s), "recover")
            if orphans:
                self.progress.say(f"failed and re-enqueued trials {orphans} left running by a dead driver")
            self._sync_counts()

    def _sync_counts(self) -> None:
        """Counts from storage, so drivers sharing a study stop at the same total."""
        trials = with_retries(lambda: self.study.get_trials(deepcopy=False), "get_trials")
        c = {"complete": 0, "failed": 0, "rejected": 0}
        for t in trials:
            if t.state == TrialState.COMPLETE:
                c["rejected" if t.user_attrs.get("role") == seeding.ROLE_REJECTED else "complete"] += 1
            elif t.state == TrialState.FAIL:
                c["failed"] += 1
        self.counts = c
        self._running_elsewhere = running_elsewhere(trials, self.me)

    # ---- one trial -----------------------------------------------------------------------
    def _next_launchable(self) -> tuple[optuna.Trial, TrialRequest] | None:
        while self._consecutive_rejections < MAX_CONSECUTIVE_REJECTIONS:
            trial = with_retries(self.study.ask, "ask")
            self.study._storage.set_trial_system_attr(trial._trial_id, DRIVER_ATTR, str(self.me))
            role = trial.user_attrs.get("role", seeding.ROLE_SEARCH)
            params = suggest_params(trial, self.space)
            flags = {**self.space.fixed_flags(), **seeding.reference_fixed_overrides(self.space, trial.user_attrs.get("reference", "")), **params}
            repaired, violated = check_constraints(params, self.space, flags)
            flags.update(repaired)
            reason = "; ".join(violated)
            if not reason:
                reason = strategy.prune_reason(self.predictor, flags, role)
            if reason:
                self._reject(trial, flags, reason)
                continue
            self._consecutive_rejections = 0
            trial.set_user_attr("flags", flags)
            trial.set_user_attr("role", role)
            return trial, self._request(trial, flags)
        return None

    def _request(self, trial: optuna.Trial, flags: dict[str, Any]) -> TrialRequest:
        e = self.space.engine
        server = ServerSpec(
            model=_local_path_or_id(e.model), gpu=e.gpu, env=dict(e.env), host=e.host,
            download_dir=_local_path_or_id(e.download_dir), startup_timeout_s=e.startup_timeout_s,
            python=_local_path_or_id(e.python),
        )
        return TrialRequest(
            trial_number=trial.number,
            server=server,
            flags=dict(flags),
            workload=self.space.workload,
            seed=self.seed * 100_003 + trial.number,
            early_stop=strategy.early_stop_rule(self.front.trials(), self.space),
        )

    def _reject(self, trial: optuna.Trial, flags: dict[str, Any], reason: str) -> None:
        """Tell Optuna the sample is infeasible without launching anything."""
        self._consecutive_rejections += 1
        metrics: dict[str, float] = {}
        for k, v in constraint_values(metrics, started=False, space=self.space).values.items():
            trial.set_constraint(k, v)
        trial.set_user_attr("flags", flags)
        trial.set_user_attr("role", seeding.ROLE_REJECTED)
        trial.set_user_attr("state", "rejected")
        trial.set_user_attr("failure_class", str(FailureClass.REJECTED))
        trial.set_user_attr("failure_reason", scrub(reason, self.secrets))
        values = objective_values(metrics, self.space)
        frozen = with_retries(lambda: self.study.tell(trial, values, skip_if_finished=True), "tell")
        self.counts["rejected"] += 1
        self._log(frozen, [])
        self.progress.trial_done(trial.number, "rejected", "search", None, self.counts["complete"],
                                 self.counts["failed"], self.counts["rejected"], self._pool.running, note=reason[:100])

    def _finish(self, fin: Finished) -> None:
        trial, request = fin.key
        if fin.worker_died is not None:
            self._fail_and_requeue(trial, fin.worker_died)
            return
        result: TrialResult = fin.result
        metrics = result.metrics()
        started = result.status == TrialStatus.OK
        for k, v in constraint_values(metrics, started, self.space).values.items():
            trial.set_constraint(k, v)
        trial.set_user_attr("metrics", {k: (None if math.isnan(v) else v) for k, v in metrics.items()})
        trial.set_user_attr("state", "complete")
        trial.set_user_attr("failure_class", str(result.failure_class))
        trial.set_user_attr("failure_reason", scrub(result.failure_reason, self.secrets)[:1000])
        trial.set_user_attr("early_stopped", result.early_stopped)
        trial.set_user_attr("started", started)
        trial.set_user_attr("worker", fin.worker_id)
        artifacts = self._write_trial_files(request, result, metrics)
        values = objective_values(metrics, self.space)
        frozen = with_retries(lambda: self.study.tell(trial, values, skip_if_finished=True), "tell")
        self.counts["complete"] += 1
        self._log(frozen, artifacts)
        note = f"{result.failure_class}: {scrub(result.failure_reason, self.secrets)[:80]}" if result.failure_reason else ""
        if result.early_stopped:
            note = (note + " early-stopped").strip()
        self.progress.trial_done(trial.number, "complete", trial.user_attrs.get("role", "search"), values,
                                 self.counts["complete"], self.counts["failed"], self.counts["rejected"], self._pool.running, note)
        self.front.add(frozen)
        if self.progress.enabled:
            self.progress.front([(t.number, t.values) for t in self.front.trials()])

    def _fail_and_requeue(self, trial: optuna.Trial, reason: str) -> None:
        trial.set_user_attr("state", "failed")
        trial.set_user_attr("failure_reason", reason)
        frozen = with_retries(lambda: self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True), "tell")
        attrs = {k: v for k, v in trial.user_attrs.items() if k in ("role", "reference")}
        attrs["requeued_from"] = trial.number
        self.study.enqueue_trial(frozen.params, user_attrs=attrs)
        self.counts["failed"] += 1
        self._log(frozen, [])
        self.progress.trial_done(trial.number, "failed", attrs.get("role", "search"), None, self.counts["complete"],
                                 self.counts["failed"], self.counts["rejected"], self._pool.running, note=f"{reason}; re-enqueued")

    def _write_trial_files(self, request: TrialRequest, result: TrialResult, metrics: dict[str, float]) -> list[Path]:
        d = self.run_dir.trial_dir(request.trial_number)
        result.failure_reason = scrub(result.failure_reason, self.secrets)
        result.failure_evidence = [scrub(x, self.secrets) for x in result.failure_evidence]
        result.artifacts.server_log = scrub(result.artifacts.server_log, self.secrets)
        paths = [write_flags(d, request.flags), write_requests_csv(d, result), write_result_json(d, result, metrics)]
        paths += [p for p in (write_server_log(d, result), write_gpu_timeline(d, result)) if p is not None]
        return paths

    # ---- tracking ------------------------------------------------------------------------
    def _log(self, frozen: FrozenTrial, artifacts: list[Path]) -> None:
        if frozen.number in self._logged:
            return
        entry: TrialLog = trial_log_from_frozen(frozen, self.space, artifacts)
        self._logged[frozen.number] = self.tracker.log_trial(entry)

    def _log_untracked(self) -> None:
        """Trials told by an earlier driver that died before logging them to MLflow.

        Trials a live driver sharing the study told are its to log; logging them here too
        would make two child runs for one trial.
        """
        self._logged = {**self.tracker.logged_trials(), **self._logged}
        beats = with_retries(lambda: heartbeats(self.study), "heartbeats")
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            if t.number not in self._logged and is_mine_or_orphaned(t, self.me, beats, self.opts.stale_after_s):
                d = self.run_dir.trial_dir(t.number)
                files = [d / n for n in ("flags.yaml", "requests.csv", "result.json", "server.log", "gpu_timeline.json")]
                self._log(t, [f for f in files if f.exists()])

    def _invocation_params(self, n_workers: int) -> dict[str, Any]:
        return {
            "study": self.name,
            "backend": self.space.engine.backend,
            "model": self.space.engine.model,
            "gpu": self.space.engine.gpu,
            "sampler": self.space.study.sampler,
            "trials": self.target,
            "workers": n_workers,
            "seed": self.seed,
            "storage": mask_url(self.space.study.storage or self.run_dir.optuna_url),
            "space_fingerprint": space_fingerprint(self.space),
            **{f"strategy.{k}": v for k, v in self.space.study.strategy.model_dump().items()},
        }

    def _finalize(self, status: str) -> None:
        try:
            self._log_untracked()
            finalize_tracking(self.study, self.space, self.tracker, self._logged, self.run_dir, self.name)
        finally:
            self.tracker.end_invocation(status, {k: float(v) for k, v in self.counts.items()})


def _local_path_or_id(value: str | None) -> str | None:
    """Relative paths in the space mean the directory autotune runs in; Ray workers run
    elsewhere, so they get absolute paths. Anything else (a hub model id) passes through."""
    if value and not Path(value).is_absolute() and Path(value).exists():
        return str(Path(value).resolve())
    return value


def _masked_space(space: SearchSpace) -> dict[str, Any]:
    d = space.model_dump(mode="json")
    from autotune.security import mask_env

    d["engine"]["env"] = mask_env(space.engine.env)
    if d["study"].get("storage"):
        d["study"]["storage"] = mask_url(d["study"]["storage"])
    if d["study"].get("mlflow_tracking_uri"):
        d["study"]["mlflow_tracking_uri"] = mask_url(d["study"]["mlflow_tracking_uri"])
    return d
