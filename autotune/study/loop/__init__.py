"""The trial loop: Optuna ask/tell with explicit inputs over a worker pool (its protocol here),
callbacks in the crash-safe order, the run directory's trial files, opening a study, and the
backend checks made before it starts.
"""

from __future__ import annotations

from autotune.study.loop.callbacks import Callback, StudyContext, Tally
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.loop.pool import FinishedTrial, WorkerPool
from autotune.study.loop.trial_files import TrialFiles, existing_files
from autotune.study.loop.validate import validate_for_backend

__all__ = ["Callback", "FinishedTrial", "StudyContext", "Tally", "TrialFiles", "TrialLoop", "WorkerPool", "existing_files", "open_study", "validate_for_backend"]
