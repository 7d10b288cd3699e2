"""Logging trials to MLflow so they can be compared side by side in the MLflow UI.

Only the study driver talks to MLflow, through one ``MlflowClient`` (no global active
run), so workers never race on the store. Child runs are created after Optuna is told,
and keyed by trial number: a resumed driver logs any told-but-unlogged trial and never
logs one twice. A run carries the trial's real start and end (a trial logged after the
fact, or on resume, would otherwise show when it was logged and a duration of
milliseconds).

A child run is finished (FINISHED or FAILED) only once everything of it was written; one
left RUNNING (its driver died, or the disk filled, mid-log) is unfinished: the next driver
deletes it and logs the trial again from Optuna's record, the source of truth. An
invocation run left RUNNING by a driver that is gone is marked KILLED.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.entities import Metric, Param, RunStatus, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

# MLflow sets its loggers to INFO when imported ("Creating initial MLflow database tables").
# Its store also logs every database error with a traceback before raising it as an
# MlflowException; the exception reaches the user as one line (a full disk, service.py),
# so the log is only a second, longer copy.
logging.getLogger("mlflow").setLevel(logging.WARNING)
logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

from autotune.study.storages.storage import sqlite_path  # noqa: E402
from autotune.tracking.naming import for_people  # noqa: E402
from autotune.tracking.views import COMPARE_TAG, DESCRIPTION_TAG, KIND_TAG, run_path  # noqa: E402

TRIAL_TAG = "autotune.trial_number"
STUDY_TAG = "autotune.study"
# A confirmation run names the trial whose config it repeats, and that trial's run.
REPEAT_TAG = "autotune.repeat_of"
REPEAT_RUN_TAG = "autotune.repeat_of_run"
# The driver (recovery.DriverId) that started an invocation run: a later driver closes the
# run when that driver is gone.
DRIVER_TAG = "autotune.driver"
_DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


@dataclass
class TrialLog:
    """What one child run holds."""

    number: int
    state: str  # complete | failed | rejected
    params: dict[str, Any]  # every flag the trial ran with (fixed + sampled)
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
    name: str = ""  # the run's name; "" gives trial-<number>
    start_ms: int | None = None  # when the trial was asked (epoch ms); None: now
    end_ms: int | None = None  # when it was told; None: now
    repeat_of: int | None = None  # the trial a confirmation run repeats


@dataclass
class TrialRuns:
    finished: dict[int, str] = field(default_factory=dict)  # trial number -> its one finished run
    unfinished: dict[int, list[str]] = field(default_factory=dict)  # runs left RUNNING mid-log


class MlflowTracker:
    """One study's experiment. ``own_store``: the store is the run directory's own, so its
    ``Default`` experiment is created inside the run directory and hidden (else MLflow
    points it at ``./mlruns`` in whatever directory autotune ran from)."""

    def __init__(self, tracking_uri: str, artifact_root: Path, study_name: str, own_store: bool = False) -> None:
        if own_store:
            _create_store(tracking_uri, artifact_root)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        if own_store:
            self._hide_default()
        self.study_name = study_name
        self.experiment_id = self._experiment(study_name, artifact_root)
        self.parent_run_id: str | None = None
        # Where a discarded run's artifacts may be removed from: the run directory's own.
        self._artifact_root = artifact_root.resolve() if own_store else None

    def _experiment(self, name: str, artifact_root: Path) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        artifact_root.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=artifact_root.resolve().as_uri(),
                                             tags={STUDY_TAG: name})

    def _hide_default(self) -> None:
        """Delete the empty ``Default`` experiment, so the UI lists the study alone. The
        store keeps the deleted row, so MLflow does not create it again."""
        default = self.client.get_experiment("0")
        if default.lifecycle_stage == "active" and not self.client.search_runs(["0"], max_results=1):
            self.client.delete_experiment("0")

    @property
    def created_ms(self) -> int:
        """When the experiment was created (epoch ms): a date that stays the same on resume."""
        return int(self.client.get_experiment(self.experiment_id).creation_time or 0)

    def set_experiment_tags(self, tags: Mapping[str, str]) -> None:
        """The description and views, checked at each start (a store made by an older
        version gets them too); only what changed is written."""
        stored = self.client.get_experiment(self.experiment_id).tags
        for key, value in tags.items():
            if stored.get(key) != value:
                self.client.set_experiment_tag(self.experiment_id, key, value)

    def start_invocation(self, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"{self.study_name}-{time.strftime('%Y%m%d-%H%M%S')}",
            tags={STUDY_TAG: self.study_name, KIND_TAG: "invocation", **tags},
        )
        self.parent_run_id = run.info.run_id
        self.client.log_batch(self.parent_run_id, params=[Param(k, _param_str(v)) for k, v in params.items()])
        return self.parent_run_id

    def end_invocation(self, status: str = "FINISHED", metrics: Mapping[str, float] | None = None) -> None:
        if self.parent_run_id is None:
            return
        if metrics:
            self.client.log_batch(self.parent_run_id, metrics=_metrics(metrics, int(time.time() * 1000)))
        self.client.set_terminated(self.parent_run_id, status=status)

    def logged_trials(self) -> dict[int, str]:
        """Trial number -> child run id, for every trial of this study logged in full."""
        return self.trial_runs().finished

    def trial_runs(self) -> TrialRuns:
        """This study's child runs by trial number: finished ones, and those left unfinished."""
        out = TrialRuns()
        for r in self._search(f"tags.`{KIND_TAG}` = 'trial'"):
            n = r.data.tags.get(TRIAL_TAG)
            if n is None:
                continue
            if r.info.status == RunStatus.to_string(RunStatus.RUNNING):
                out.unfinished.setdefault(int(n), []).append(r.info.run_id)
            else:
                out.finished.setdefault(int(n), r.info.run_id)
        return out

    def running_invocations(self) -> list[tuple[str, str | None, float]]:
        """(run id, driver, start time in s) of every invocation run still marked RUNNING."""
        running = RunStatus.to_string(RunStatus.RUNNING)
        return [(r.info.run_id, r.data.tags.get(DRIVER_TAG), (r.info.start_time or 0) / 1000)
                for r in self._search(f"tags.`{KIND_TAG}` = 'invocation'") if r.info.status == running]

    def close_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)

    def discard(self, run_id: str) -> None:
        """Delete an unfinished child run and the artifacts it holds in the run directory (it
        is logged again in full); MLflow keeps the deleted row, hidden from every view."""
        uri = self.client.get_run(run_id).info.artifact_uri or ""
        self.client.delete_run(run_id)
        if self._artifact_root is not None and uri.startswith("file:"):
            run_root = Path(unquote(urlparse(uri).path)).parent  # .../<experiment>/<run id>/artifacts
            if run_root.name == run_id and run_root.is_relative_to(self._artifact_root):
                shutil.rmtree(run_root, ignore_errors=True)

    def _search(self, filter_string: str) -> list[Any]:
        runs: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=filter_string, max_results=1000,
                                           page_token=token)
            runs += page
            token = page.token
            if not token:
                return runs

    def log_trial(self, t: TrialLog, repeated_run: str | None = None) -> str:
        """One child run; ``repeated_run`` is the run of the trial a confirmation repeats."""
        tags = {
            STUDY_TAG: self.study_name,
            KIND_TAG: "trial",
            TRIAL_TAG: str(t.number),
            "state": t.state,
            **t.tags,
        }
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        if t.repeat_of is not None:
            tags[REPEAT_TAG] = str(t.repeat_of)
            if repeated_run:
                tags[REPEAT_RUN_TAG] = repeated_run
                tags[DESCRIPTION_TAG] = (f"Confirmation run: repeats the config of trial {t.repeat_of} "
                                         f"([its run]({run_path(self.experiment_id, repeated_run)})).")
        run = self.client.create_run(self.experiment_id, run_name=t.name or f"trial-{t.number:04d}",
                                     start_time=t.start_ms, tags=tags)
        rid = run.info.run_id
        params = [Param(k, _param_str(v)) for k, v in sorted(t.params.items())]
        end_ms = t.end_ms or int(time.time() * 1000)
        self.client.log_batch(rid, params=params, metrics=_metrics(t.metrics, end_ms))
        for path in t.artifacts:
            if path.exists():
                self.client.log_artifact(rid, str(path))
        status = RunStatus.to_string(RunStatus.FINISHED if t.state != "failed" else RunStatus.FAILED)
        self.client.set_terminated(rid, status=status, end_time=end_ms)
        return rid

    def tag_pareto(self, logged: Mapping[int, str], pareto: Iterable[int], baseline: Iterable[int] = ()) -> None:
        """Mark the Pareto trials, and what the compare view shows: them and the baseline."""
        front, compared = set(pareto), set(pareto) | set(baseline)
        for number, rid in logged.items():
            self.client.log_batch(rid, tags=[RunTag("pareto", str(number in front).lower()),
                                             RunTag(COMPARE_TAG, str(number in compared).lower())])

    def log_plots(self, paths: Iterable[Path]) -> None:
        if self.parent_run_id is None:
            return
        for p in paths:
            if p.exists():
                self.client.log_artifact(self.parent_run_id, str(p), artifact_path="plots")


def _create_store(tracking_uri: str, artifact_root: Path) -> None:
    """Create a database store with the run directory's artifact root before any client
    opens it: a client creates it with ``./mlruns`` as the root of ``Default``.

    A SQLite store is built under a temporary name and renamed into place: MLflow's
    schema migrations take seconds, and a driver killed among them would leave a store
    no later run can open ("table ... already exists"). The caller holds the run
    directory's lock, so a temporary file left by a killed driver is stale.
    """
    if tracking_uri.split(":", 1)[0].split("+", 1)[0] not in _DB_SCHEMES:
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    artifact_root.mkdir(parents=True, exist_ok=True)
    root_uri = artifact_root.resolve().as_uri()
    db = sqlite_path(tracking_uri)
    if db is None:  # a database server: created once by whoever set it up
        SqlAlchemyStore(tracking_uri, root_uri).engine.dispose()
        return
    for stale in db.parent.glob(f".{db.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    if db.exists():
        return
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        SqlAlchemyStore(f"sqlite:///{tmp}", root_uri).engine.dispose()
        os.replace(tmp, db)
    finally:
        tmp.unlink(missing_ok=True)


def _param_str(v: Any) -> str:
    return for_people(v)[:6000]


def _metrics(values: Mapping[str, float], ts_ms: int) -> list[Metric]:
    out = []
    for k, v in values.items():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out.append(Metric(k, float(v), ts_ms, 0))
    return out
