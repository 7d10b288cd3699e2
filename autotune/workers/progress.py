"""A running trial's events folded into one snapshot, which the driver polls.

The backend may emit an event per benchmark request (thousands per trial); the driver
wants the state, not the stream. Folding on the worker and sending the latest snapshot
when asked bounds what crosses Ray to one small record per poll, whatever the request
rate: that is the throttle, and nothing is queued or lost if the driver polls late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from autotune.backends.base import Phase, TrialProgress
from autotune.results import FailureClass


class ProgressTracker:
    """Thread-safe: the trial's thread calls :meth:`event`, the actor's poll thread :meth:`snapshot`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._trial: int | None = None
        self._begin(None, 0)

    def _begin(self, trial_number: int | None, total: int) -> None:
        self._trial, self._total, self._t0 = trial_number, total, self._clock()
        self._phase, self._done, self._ooms, self._restarts = Phase.DISPATCHED, 0, 0, 0
        self._latencies: list[float] = []

    def begin(self, trial_number: int, total: int) -> None:
        """A new trial of ``total`` benchmark requests starts on this worker."""
        with self._lock:
            self._begin(trial_number, total)

    def end(self) -> None:
        with self._lock:
            self._trial = None

    def event(self, name: str, info: dict[str, Any]) -> None:
        """The backend's hook (autotune.backends.base.EventHook); unknown names are ignored."""
        with self._lock:
            if name == "loading_weights":
                self._phase = Phase.LOADING_WEIGHTS
            elif name == "simulating":
                self._phase = Phase.SIMULATING
            elif name == "server_started":
                start = int(info.get("start", 0))
                self._phase = Phase.RESTARTING if start else Phase.STARTING
                self._restarts = max(self._restarts, start)
            elif name == "server_ready":
                self._phase = Phase.BENCHMARK
            elif name == "request_done":
                self._done += 1
                if info.get("ok") and info.get("e2e_s") is not None:
                    self._latencies.append(float(info["e2e_s"]))
            elif name == "engine_died":
                # The requests in flight are lost with the engine: back, as OOMs on an OOM death.
                lost = int(info.get("casualties", 0))
                self._done += lost
                if info.get("failure_class") == str(FailureClass.RUNTIME_OOM):
                    self._ooms += lost

    def snapshot(self) -> TrialProgress | None:
        """The running trial's state now; None between trials."""
        with self._lock:
            if self._trial is None:
                return None
            # numpy's default (linear) percentile, as the trial's own p99 aggregate.
            p99 = float(np.percentile(self._latencies, 99)) if self._latencies else None
            return TrialProgress(self._trial, self._phase, self._done, self._total, self._ooms, self._restarts,
                                 p99, self._clock() - self._t0)
