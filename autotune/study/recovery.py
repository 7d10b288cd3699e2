"""Resuming a study: trials a dead driver left RUNNING are failed and re-enqueued.

Several drivers may share one study (PostgreSQL), so a RUNNING trial is only taken over
when its driver is provably gone: same host and its process no longer exists, or its
heartbeat is older than ``stale_after_s``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

DRIVER_ATTR = "autotune.driver"
HEARTBEAT_PREFIX = "autotune.heartbeat:"


@dataclass(frozen=True)
class DriverId:
    host: str
    pid: int
    token: str

    @classmethod
    def mine(cls) -> DriverId:
        return cls(socket.gethostname(), os.getpid(), uuid.uuid4().hex[:8])

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.token}"

    @classmethod
    def parse(cls, s: str) -> DriverId | None:
        try:
            host, pid, token = s.rsplit(":", 2)
            return cls(host, int(pid), token)
        except ValueError:
            return None


def beat(study: optuna.Study, me: DriverId) -> None:
    study._storage.set_study_system_attr(study._study_id, HEARTBEAT_PREFIX + str(me), time.time())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def driver_gone(owner: str | None, heartbeats: dict[str, float], stale_after_s: float, now: float) -> bool:
    if not owner:
        return True
    d = DriverId.parse(owner)
    if d is None:
        return True
    if d.host == socket.gethostname() and not _pid_alive(d.pid):
        return True
    last = heartbeats.get(owner)
    return last is None or now - last > stale_after_s


def heartbeats(study: optuna.Study) -> dict[str, float]:
    """Driver id -> time of its last heartbeat, for every driver that ever ran the study."""
    sys_attrs = study._storage.get_study_system_attrs(study._study_id)
    return {k.removeprefix(HEARTBEAT_PREFIX): v for k, v in sys_attrs.items() if k.startswith(HEARTBEAT_PREFIX)}


def is_mine_or_orphaned(trial: FrozenTrial, me: DriverId, beats: dict[str, float], stale_after_s: float,
                        now: float | None = None) -> bool:
    """May this driver act for ``trial`` (log it, fail it)? Only if it owns it or the owner is gone.

    Drivers sharing a study must not log each other's trials: the owner logs its own, and
    a second logger would make two MLflow child runs for one trial.
    """
    owner = trial.system_attrs.get(DRIVER_ATTR)
    if owner == str(me):
        return True
    return driver_gone(owner, beats, stale_after_s, time.time() if now is None else now)


def running_elsewhere(trials: list[FrozenTrial], me: DriverId) -> int:
    """RUNNING trials other drivers own: they count towards the target before they finish."""
    mine = str(me)
    return sum(1 for t in trials if t.state == TrialState.RUNNING and t.system_attrs.get(DRIVER_ATTR) != mine)


def requeue_params(t: FrozenTrial) -> dict:
    """The params to measure again. A trial killed between ask and its suggestions has
    none yet; if it was enqueued (baseline, reference, a re-run) its fixed params say what
    it was going to measure, so the re-run measures that and not a fresh sample."""
    return {**t.system_attrs.get("fixed_params", {}), **t.params}


def recover_orphans(study: optuna.Study, me: DriverId, stale_after_s: float = 120.0) -> list[int]:
    """Fail RUNNING trials whose driver is gone and enqueue their params again.

    Returns the numbers of the failed trials. Their re-runs get new trial numbers (Optuna
    numbers are never reused); ``requeued_from`` links them.

    Failing comes first because only one driver can fail a trial (a second gets
    UpdateFinishedTrialError), so two recovering drivers never both re-enqueue it. A driver
    killed between the fail and the enqueue leaves a FAIL trial with no re-run; the next
    recovery finds it (owner gone, nothing ``requeued_from`` it) and enqueues it then.
    """
    beats = heartbeats(study)
    now = time.time()
    trials = study.get_trials(deepcopy=False)
    requeued = {t.user_attrs["requeued_from"] for t in trials if "requeued_from" in t.user_attrs}
    failed = []
    for t in trials:
        owner = t.system_attrs.get(DRIVER_ATTR)
        if t.state == TrialState.FAIL and t.number not in requeued and is_mine_or_orphaned(t, me, beats, stale_after_s, now):
            _requeue(study, t)  # failed by a driver that died before re-enqueueing it
            continue
        if t.state != TrialState.RUNNING or owner == str(me) or not driver_gone(owner, beats, stale_after_s, now):
            continue
        storage = study._storage
        try:
            # Attributes first: a finished trial can no longer be updated.
            storage.set_trial_user_attr(t._trial_id, "failure_reason", f"driver {owner} died while the trial ran")
            storage.set_trial_user_attr(t._trial_id, "state", "failed")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except RuntimeError:
            continue  # another driver finished or failed it first (UpdateFinishedTrialError)
        _requeue(study, t)
        failed.append(t.number)
    return failed


def _requeue(study: optuna.Study, t: FrozenTrial) -> None:
    user_attrs = {k: v for k, v in t.user_attrs.items() if k in ("role", "reference")}
    user_attrs["requeued_from"] = t.number
    study.enqueue_trial(requeue_params(t), user_attrs=user_attrs)
