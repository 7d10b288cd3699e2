"""One trial, typed: what autotune keeps with each Optuna trial, and what every reader sees.

Optuna stores a trial's state, params, objective values and constraints. autotune adds
what it ran (the flags after repair), why (role, reference), what happened (failure class
and reason, metrics, early stop, warnings) and where (worker, the trial it re-runs). That
lives in Optuna's ``user_attrs`` under the keys below, which are written and read in this
module only: the trial loop, recovery, `autotune status`, export, MLflow tracking and the
plots all see a :class:`TrialRecord`.

The keys are the ones studies were stored with before this module existed, so studies
created by older versions resume and read unchanged. Links between trials: ``requeued_from``
(a re-run of a trial whose process died) and ``repeat_of`` (a confirmation run of the config
a search trial measured, role ``confirm``; docs/export.md).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from autotune.results import FailureClass


class State(StrEnum):
    WAITING = "waiting"  # enqueued (warm start, re-run), not asked yet
    RUNNING = "running"
    COMPLETE = "complete"  # launched and measured (a startup failure is a measurement too)
    FAILED = "failed"  # no measurement: the driver or worker running it died; re-enqueued
    REJECTED = "rejected"  # never launched: a constraint or the memory model ruled it out


class Role(StrEnum):
    BASELINE = "baseline"  # vLLM's defaults, measured first
    REFERENCE = "reference"  # a hand-tuned config from the space's ``references``
    SEARCH = "search"  # sampled
    CONFIRM = "confirm"  # a finalist's config measured again after the search (``repeat_of``)


# The reference name of the baseline trial.
BASELINE_NAME = "vllm-defaults"
# failure_class of a FAILED trial: the process running it (driver or Ray worker) died, so
# nothing about the config is known. Not a FailureClass: those describe the engine.
PROCESS_DIED = "driver"
# User attribute naming the driver that asked a trial (study/storages/recovery.py claims it).
DRIVER_ATTR = "autotune.driver"

# Stored role of a rejected trial. Older readers (and the search benchmark) look for it;
# the role it was sampled as is recovered from its reference name (see ``_role``).
_REJECTED_ROLE = "rejected"


@dataclass
class TrialRecord:
    number: int
    state: State
    role: Role = Role.SEARCH
    reference: str = ""  # the baseline's or reference's name
    # The sampled values (Optuna's params); for a trial not sampled yet, those it was
    # enqueued to measure. What ran can differ: see ``flags``.
    params: dict[str, Any] = field(default_factory=dict)
    # Every flag as run: fixed flags, a reference's unsearched flags, params after repair.
    flags: dict[str, Any] = field(default_factory=dict)
    failure_class: str = str(FailureClass.NONE)  # a FailureClass value, or PROCESS_DIED
    failure_reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)  # NaN: not measured
    values: list[float] | None = None  # objective values told to Optuna
    constraints: dict[str, float] = field(default_factory=dict)  # feasible when all <= 0
    early_stopped: bool = False
    started: bool = True  # the engine served; False for a startup failure or a rejected sample
    worker: int | None = None
    requeued_from: int | None = None  # the failed trial this one re-runs
    repeat_of: int | None = None  # role confirm: the search trial whose config this measures again
    warnings: list[str] = field(default_factory=list)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None

    @property
    def launched(self) -> bool:
        """Measured on an engine (rejected samples and failed runs are not)."""
        return self.state == State.COMPLETE

    @property
    def never_served(self) -> bool:
        """Launched, but the engine never served (it did not start): Optuna holds it as
        complete with penalty values, so the search learns from it; people are shown a
        failure, and no figures (`autotune status`, progress)."""
        return self.state == State.COMPLETE and not self.started

    @property
    def shown_state(self) -> str:
        """The state as people are shown it: ``failed`` for a trial that never served."""
        return str(State.FAILED) if self.never_served else str(self.state)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def elapsed_s(self) -> float:
        """Wall time from ask to tell, the trial's whole life on the driver (the metric
        ``duration_s`` is the benchmark's alone)."""
        if self.started_at is None or self.finished_at is None:
            return math.nan
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def gpu_time_s(self) -> float:
        """Time the trial held its GPUs: startups, restarts and the benchmark."""
        return self.metrics.get("gpu_time_s", math.nan)

    def metric(self, name: str, objective_names: list[str]) -> float:
        """A metric as Optuna ranks it: the told value for an objective (a penalty when
        nothing was measured), else the measured aggregate."""
        if name in objective_names and self.values:
            return float(self.values[objective_names.index(name)])
        return self.metrics.get(name, math.nan)

    def searched_flags(self, searched: Iterable[str]) -> dict[str, Any]:
        """The searched flags with the values they ran with (a repair may have moved a
        sampled value), in the space's order; the params for a trial not run yet."""
        source = self.flags or self.params
        return {k: source[k] for k in searched if k in source}

    def user_attrs(self) -> dict[str, Any]:
        """What this record stores in Optuna's user attributes (values and constraints are
        Optuna's own fields)."""
        out: dict[str, Any] = {"role": _REJECTED_ROLE if self.state == State.REJECTED else str(self.role)}
        if self.reference:
            out["reference"] = self.reference
        if self.requeued_from is not None:
            out["requeued_from"] = self.requeued_from
        if self.repeat_of is not None:
            out["repeat_of"] = self.repeat_of
        if self.flags:
            out["flags"] = dict(self.flags)
        if self.state in (State.COMPLETE, State.FAILED, State.REJECTED):
            out["state"] = str(self.state)
            out["failure_class"] = self.failure_class
            out["failure_reason"] = self.failure_reason
        if self.state == State.COMPLETE:
            out["metrics"] = {k: (None if math.isnan(v) else v) for k, v in self.metrics.items()}
            out["early_stopped"] = self.early_stopped
            out["started"] = self.started
        if self.worker is not None:
            out["worker"] = self.worker
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out

    def changed_attrs(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The user attributes the stored trial does not hold yet: each write is a commit."""
        return {k: v for k, v in self.user_attrs().items() if stored.get(k) != v}

    @classmethod
    def from_frozen(cls, t: FrozenTrial) -> TrialRecord:
        a = t.user_attrs
        state = state_of(t)
        reference = str(a.get("reference", ""))
        metrics = {k: (math.nan if v is None else float(v)) for k, v in (a.get("metrics") or {}).items()}
        return cls(
            number=t.number,
            state=state,
            role=_role(a.get("role"), reference),
            reference=reference,
            params={**t.system_attrs.get("fixed_params", {}), **t.params},
            flags=dict(a.get("flags") or {}),
            failure_class=str(a.get("failure_class", PROCESS_DIED if state == State.FAILED else FailureClass.NONE)),
            failure_reason=str(a.get("failure_reason", died_reason(t) if state == State.FAILED else "")),
            metrics=metrics,
            values=list(t.values) if t.values else None,
            constraints=dict(t.constraints or {}),
            early_stopped=bool(a.get("early_stopped", False)),
            started=bool(a.get("started", state != State.REJECTED)),
            worker=a.get("worker"),
            requeued_from=a.get("requeued_from"),
            repeat_of=a.get("repeat_of"),
            warnings=list(a.get("warnings") or []),
            started_at=t.datetime_start,
            finished_at=t.datetime_complete,
        )


def owner_of(t: FrozenTrial) -> str | None:
    """The driver that asked ``t``. Studies stored before ownership moved to user attributes
    (Optuna's public API writes no trial system attributes) hold it among the system ones."""
    return t.user_attrs.get(DRIVER_ATTR) or t.system_attrs.get(DRIVER_ATTR)


def died_reason(t: FrozenTrial) -> str:
    """The reason of a FAILED trial that stores none: autotune writes a failure's reason before
    it fails the trial, so only a trial whose driver died is failed without one (another driver
    fails it by number, as Optuna's public API allows, and cannot write its attributes)."""
    owner = owner_of(t)
    return f"driver {owner} died while the trial ran" if owner else "its process died before it recorded an outcome"


def state_of(t: FrozenTrial) -> State:
    """The record's state without building the record (counting trials reads every one)."""
    if t.state == OptunaState.COMPLETE:
        return State.REJECTED if t.user_attrs.get("role") == _REJECTED_ROLE else State.COMPLETE
    if t.state == OptunaState.RUNNING:
        return State.RUNNING
    if t.state == OptunaState.WAITING:
        return State.WAITING
    return State.FAILED  # FAIL, and PRUNED (autotune never prunes)


def enqueue_attrs(role: Role, reference: str = "", requeued_from: int | None = None,
                  repeat_of: int | None = None) -> dict[str, Any]:
    """User attributes of a trial enqueued to measure a given config (warm start, re-run,
    confirmation)."""
    return TrialRecord(-1, State.WAITING, role, reference, requeued_from=requeued_from,
                       repeat_of=repeat_of).user_attrs()


def _role(stored: Any, reference: str) -> Role:
    if stored in (None, _REJECTED_ROLE):
        # Only enqueued trials carry a reference name: the baseline's is fixed.
        if reference == BASELINE_NAME:
            return Role.BASELINE
        return Role.REFERENCE if reference else Role.SEARCH
    return Role(stored)


def records(trials: list[FrozenTrial]) -> list[TrialRecord]:
    return [TrialRecord.from_frozen(t) for t in trials]


def stored_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """Trial ``number`` as stored, through Optuna's public API (a Study exposes no storage).

    Optuna numbers a study's trials 0, 1, ... in the order it stores them, so the number is
    the trial's index; the scan is the safety net should that ever change.
    """
    trials = study.get_trials(deepcopy=False)
    if number < len(trials) and trials[number].number == number:
        return trials[number]
    return next(t for t in trials if t.number == number)
