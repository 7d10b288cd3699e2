"""Drivers sharing a study, and resuming one: ownership, heartbeats, orphans, counts.

Several drivers may share one study (PostgreSQL), so a RUNNING trial is only taken over
when its driver is provably gone: same host and its process no longer exists, or its
heartbeat is older than ``stale_after_s``. Taking a trial over means failing it with the
reason and enqueueing its config again (:func:`fail_and_requeue`), the one way a trial is
re-run, whether its driver or its Ray worker died.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.study.storages.storage import with_retries
from autotune.study.trials import (
    DRIVER_ATTR,
    PROCESS_DIED,
    State,
    TrialRecord,
    died_reason,
    enqueue_attrs,
    owner_of,
    state_of,
)

HEARTBEAT_PREFIX = "autotune.heartbeat:"
# User attribute of a re-run whose failed trial had been launched: the memory model let its
# config start then, so it is measured now whatever the model has learnt since (a re-run
# measures what was lost, it does not sample). proposal.propose reads it.
RERUN_OF_LAUNCHED_ATTR = "autotune.rerun_of_launched"


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
    # A study user attribute: Optuna's public API writes no study system attributes.
    study.set_user_attr(HEARTBEAT_PREFIX + str(me), time.time())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def driver_gone(owner: str | None, heartbeats: dict[str, float], stale_after_s: float, now: float,
                started_at: float | None = None) -> bool:
    """Whether the driver ``owner`` is gone: same host and its process ended, or no heartbeat
    for ``stale_after_s``. ``started_at``: when the thing it owns was made, for things made
    before a driver's first heartbeat (its MLflow invocation run): until ``stale_after_s``
    after that, a driver with no heartbeat yet is not taken for dead."""
    if not owner:
        return True
    d = DriverId.parse(owner)
    if d is None:
        return True
    if d.host == socket.gethostname() and not _pid_alive(d.pid):
        return True
    last = heartbeats.get(owner, started_at)
    return last is None or now - last > stale_after_s


def heartbeats(study: optuna.Study) -> dict[str, float]:
    """Driver id -> time of its last heartbeat, for every driver that ever ran the study."""
    attrs = study.user_attrs
    return {k.removeprefix(HEARTBEAT_PREFIX): v for k, v in attrs.items() if k.startswith(HEARTBEAT_PREFIX)}


def claim(trial: optuna.Trial, me: DriverId) -> None:
    """Record ``me`` as the owner of ``trial``, which it just asked."""
    trial.set_user_attr(DRIVER_ATTR, str(me))


def is_mine_or_orphaned(trial: FrozenTrial, me: DriverId, beats: dict[str, float], stale_after_s: float,
                        now: float | None = None) -> bool:
    """May this driver act for ``trial`` (log it, fail it)? Only if it owns it or the owner is gone.

    Drivers sharing a study must not log each other's trials: the owner logs its own, and
    a second logger would make two MLflow child runs for one trial.
    """
    owner = owner_of(trial)
    if owner == str(me):
        return True
    return driver_gone(owner, beats, stale_after_s, time.time() if now is None else now)


def fail_and_requeue(study: optuna.Study, t: FrozenTrial, reason: str, live: optuna.Trial | None = None) -> bool:
    """Fail the RUNNING trial ``t`` with ``reason`` and enqueue its config again.

    The failure's attributes (class, reason) are written through ``live``, the
    :class:`optuna.Trial` this driver asked as ``t`` when it is its own. An orphan has no live
    Trial, and Optuna's public API writes no attribute without one: it is failed by number, and
    its record reads the class :data:`PROCESS_DIED` and the reason that its driver died, the
    defaults of a FAIL trial that stores none (``TrialRecord.from_frozen``).

    Returns False, doing nothing, when another driver finished or failed it first. Failing
    comes first because only one driver can fail a trial (a second gets
    UpdateFinishedTrialError), so two recovering drivers never both re-enqueue it. A driver
    killed between the fail and the enqueue leaves a FAIL trial with no re-run; the next
    :func:`recover_orphans` finds it (owner gone, nothing ``requeued_from`` it) and
    enqueues it then.
    """
    launched = was_launched(t)  # read before the failure's attributes overwrite its role
    record = TrialRecord.from_frozen(t)
    record.state, record.failure_class, record.failure_reason = State.FAILED, PROCESS_DIED, reason
    try:
        if live is not None:  # attributes first: a finished trial can no longer be updated
            for k, v in record.changed_attrs(t.user_attrs).items():
                live.set_user_attr(k, v)
        study.tell(live if live is not None else t.number, state=TrialState.FAIL)
    except (RuntimeError, ValueError):
        # Another driver finished or failed it first: UpdateFinishedTrialError from the
        # storage, or tell's ValueError when it reads the trial already finished.
        return False
    _requeue(study, t, record, launched)
    return True


def was_launched(t: FrozenTrial) -> bool:
    """Whether ``t``'s config had been let through to launch: the loop stores a trial's flags
    just before dispatching it (a rejected sample stores them too, as state ``rejected``)."""
    return bool(t.user_attrs.get("flags")) and t.user_attrs.get("state") != str(State.REJECTED)


def rerun_params(t: FrozenTrial, record: TrialRecord, launched: bool) -> dict:
    """What a re-run of ``t`` measures: the config it launched, or, killed before launch, the
    params it was enqueued with. Values a sampler drew for a trial that never launched are
    dropped: the sampler was stopped mid-way, so they are half a sample, and fixing them would
    bias the re-run towards the dead driver's draw; the re-run samples them afresh."""
    if launched:
        return record.params
    return dict(t.system_attrs.get("fixed_params", {}))


def _requeue(study: optuna.Study, t: FrozenTrial, failed: TrialRecord, launched: bool) -> None:
    """Enqueue :func:`rerun_params` of ``t`` (``failed`` is its record) with its links, so the
    re-run measures what was lost and not a fresh sample. Its new trial number is linked back by
    ``requeued_from`` (Optuna never reuses numbers); a confirmation run's re-run stays a
    confirmation run of the same config (``repeat_of``); a re-run of a launched config is not
    pruned (``RERUN_OF_LAUNCHED_ATTR``)."""
    attrs = enqueue_attrs(failed.role, failed.reference, failed.number, failed.repeat_of)
    if launched:
        attrs[RERUN_OF_LAUNCHED_ATTR] = True
    study.enqueue_trial(rerun_params(t, failed, launched), user_attrs=attrs)


def recover_orphans(study: optuna.Study, me: DriverId, stale_after_s: float = 120.0) -> list[int]:
    """Fail RUNNING trials whose driver is gone and enqueue their configs again.

    Returns the numbers of the failed trials. Also heals a FAIL trial whose driver died
    between failing and re-enqueueing it.
    """
    beats = heartbeats(study)
    now = time.time()
    trials = study.get_trials(deepcopy=False)
    requeued = {TrialRecord.from_frozen(t).requeued_from for t in trials}
    failed = []
    for t in trials:
        owner = owner_of(t)
        if t.state == TrialState.FAIL and t.number not in requeued and is_mine_or_orphaned(t, me, beats, stale_after_s, now):
            # Failed by a driver that died before re-enqueueing it.
            _requeue(study, t, TrialRecord.from_frozen(t), was_launched(t))
            continue
        if t.state != TrialState.RUNNING or owner == str(me) or not driver_gone(owner, beats, stale_after_s, now):
            continue
        if fail_and_requeue(study, t, died_reason(t)):
            failed.append(t.number)
    return failed


@dataclass
class Counts:
    """The study's trials by state, as stored: what every driver sharing it sees."""

    complete: int = 0
    failed: int = 0
    rejected: int = 0
    running_elsewhere: int = 0  # RUNNING on other drivers: they count towards the target before they finish


class Coordinator:
    """This driver among the drivers sharing a study.

    It marks the trials it asks as its own, beats every ``beat_every_s``, takes over the
    trials of drivers that died (at start and at each beat), and counts the study's trials
    from storage, so that drivers sharing a study stop at the same total.
    """

    def __init__(self, study: optuna.Study, stale_after_s: float = 120.0, beat_every_s: float = 5.0) -> None:
        self.study = study
        self.me = DriverId.mine()
        self.stale_after_s = stale_after_s
        self.beat_every_s = beat_every_s
        self._last_beat = 0.0

    def claim(self, trial: optuna.Trial) -> None:
        """Record this driver as the owner of a trial it just asked."""
        claim(trial, self.me)

    def recover(self) -> list[int]:
        return with_retries(lambda: recover_orphans(self.study, self.me, self.stale_after_s), "recover")

    def beat_due(self) -> bool:
        return time.time() - self._last_beat > self.beat_every_s

    def beat(self) -> list[int]:
        """Heartbeat, then take over the trials of drivers that died since the last one."""
        with_retries(lambda: beat(self.study, self.me), "heartbeat")
        self._last_beat = time.time()
        return self.recover()

    def counts(self) -> Counts:
        trials = with_retries(lambda: self.study.get_trials(deepcopy=False), "get_trials")
        c = Counts()
        mine = str(self.me)
        for t in trials:
            s = state_of(t)
            if s == State.COMPLETE:
                c.complete += 1
            elif s == State.REJECTED:
                c.rejected += 1
            elif s == State.FAILED:
                c.failed += 1
            elif s == State.RUNNING and owner_of(t) != mine:
                c.running_elsewhere += 1
        return c

    def gone(self, owner: str | None, started_at: float | None = None) -> bool:
        """Whether ``owner`` is a driver that is gone (never this one); see :func:`driver_gone`."""
        if owner == str(self.me):
            return False
        beats = with_retries(lambda: heartbeats(self.study), "heartbeats")
        return driver_gone(owner, beats, self.stale_after_s, time.time(), started_at)

    def mine_or_orphaned(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        """The trials this driver may act for (log): its own, and those of dead drivers."""
        beats = with_retries(lambda: heartbeats(self.study), "heartbeats")
        return [t for t in trials if is_mine_or_orphaned(t, self.me, beats, self.stale_after_s)]
