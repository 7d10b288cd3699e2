"""What the trial loop tells the rest of the world, and when: the callback hooks.

Per-trial files, MLflow logging and progress output are callbacks handed to the loop
(like Ray Tune's callbacks), not code inside it, so a benchmark or an experiment runs the
same loop with its own (or none). The hook points follow the loop's crash-safety order
for one trial:

    ask (RUNNING, owner recorded) -> on_trial_start -> run on a worker (on_trial_progress
    while it runs) -> on_trial_measured -> tell (COMPLETE/FAIL) -> on_trial_end

``on_trial_measured`` runs BEFORE Optuna is told: what must exist whenever Optuna says a
trial is complete (the trial files) is written there. ``on_trial_end`` runs AFTER: what
must never be written for a trial Optuna does not hold (an MLflow child run, keyed by
trial number so a resumed driver logs a told-but-unlogged trial once) goes there. A
driver killed between the two leaves a told trial without a child run; the MLflow
callback logs it at the next ``on_study_start``.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.backends.base import TrialProgress
from autotune.results import TrialResult
from autotune.space import SearchSpace
from autotune.study.analysis import FrontCache
from autotune.study.storages import Coordinator
from autotune.study.trials import TrialRecord


@dataclass
class Tally:
    """The study's trials as this driver last counted them; the loop keeps it current."""

    complete: int = 0  # launched and measured
    failed: int = 0
    rejected: int = 0
    running: int = 0  # on this driver's workers
    running_elsewhere: int = 0  # on other drivers sharing the study


@dataclass
class StudyContext:
    """What callbacks may read about the running study (live: the loop updates it)."""

    study: optuna.Study
    space: SearchSpace
    target: int  # launched trials to reach
    tally: Tally
    front: FrontCache
    coordinator: Coordinator


class Callback:
    """Base class: every hook does nothing; a callback overrides the ones it needs."""

    def on_study_start(self, ctx: StudyContext) -> None:
        """The study is open, orphans are recovered, no trial of this run has started."""

    def on_notice(self, message: str) -> None:
        """Something the user should read (trials of a dead driver taken over, stopping early)."""

    def on_trial_start(self, record: TrialRecord) -> None:
        """A trial was asked and sampled and is about to be dispatched to a worker."""

    def on_trial_progress(self, number: int, progress: TrialProgress) -> None:
        """While trial ``number`` runs: its phase, requests back, OOMs, restarts and running
        p99 as its worker last reported them. Between on_trial_start and on_trial_measured,
        as often as the pool polls (a pool may never call it). Only a callback that overrides
        it makes the loop hand its pool a progress sink: without one, no worker is polled."""

    def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
        """A trial's result is in (secrets scrubbed) and Optuna is NOT told yet."""

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        """Optuna is told; ``record`` is final. ``result`` is None for a trial rejected
        without launch or failed because its worker died."""

    def on_study_end(self, status: str) -> None:
        """The loop stopped: FINISHED, FAILED (an exception) or KILLED (interrupted)."""
