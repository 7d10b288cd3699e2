"""A backend that does no work: for measuring the orchestration's own overhead.

Its numbers are a cheap deterministic function of the flags (so samplers have a
landscape to move on), not a model of anything; never read them as performance.

With ``NOOP_DELAY_S`` in the server env a trial takes that long: a quarter "starting the
server", the rest spread over its requests, emitting the events a real trial emits (tests
of live progress need a trial that is visibly in flight).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from autotune.backends.base import EventHook, TrialRequest
from autotune.results import RequestRecord, TrialResult, TrialStatus


class NoopBackend:
    name = "noop"

    def __init__(self, requests: int = 10, events: EventHook | None = None) -> None:
        self.requests = requests
        self.events = events

    def _emit(self, name: str, **info: float | int | bool) -> None:
        if self.events is not None:
            self.events(name, info)

    def run_trial(self, request: TrialRequest) -> TrialResult:
        # Tests that kill drivers or workers mid-trial need trials that take a moment, and
        # to kill a worker they need its pid while it holds a trial.
        pid_dir = request.server.env.get("NOOP_PID_DIR")
        if pid_dir:
            Path(pid_dir, f"trial-{request.trial_number}.pid").write_text(str(os.getpid()))
        delay = float(request.server.env.get("NOOP_DELAY_S", "0") or 0)
        h = int(hashlib.sha256(repr(sorted(request.flags.items())).encode()).hexdigest()[:8], 16)
        base = 1.0 + (h % 1000) / 1000.0
        n = min(self.requests, request.workload.num_requests)
        self._emit("server_started", start=0)
        _sleep(delay / 4)
        self._emit("server_ready", start=0, startup_s=delay / 4)
        records = []
        for i in range(n):
            _sleep(delay * 3 / 4 / n)
            records.append(RequestRecord(i, 0.0, 0.1, base + i * 1e-3, 10, 10))
            self._emit("request_done", ok=True, e2e_s=base + i * 1e-3)
        return TrialResult(status=TrialStatus.OK, backend=self.name, records=records, requests_issued=n,
                           duration_s=base)

    def close(self) -> None:
        pass


def _sleep(seconds: float) -> None:
    if seconds > 0:  # without a delay, no trip through the scheduler (overhead measurements)
        time.sleep(seconds)
