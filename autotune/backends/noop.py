"""A backend that does no work: for measuring the orchestration's own overhead.

Its numbers are a cheap deterministic function of the flags (so samplers have a
landscape to move on), not a model of anything; never read them as performance.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from autotune.backends.base import TrialRequest
from autotune.results import RequestRecord, TrialResult, TrialStatus


class NoopBackend:
    name = "noop"

    def __init__(self, requests: int = 10) -> None:
        self.requests = requests

    def run_trial(self, request: TrialRequest) -> TrialResult:
        # Tests that kill drivers or workers mid-trial need trials that take a moment, and
        # to kill a worker they need its pid while it holds a trial.
        pid_dir = request.server.env.get("NOOP_PID_DIR")
        if pid_dir:
            Path(pid_dir, f"trial-{request.trial_number}.pid").write_text(str(os.getpid()))
        delay = float(request.server.env.get("NOOP_DELAY_S", "0") or 0)
        if delay > 0:
            time.sleep(delay)
        h = int(hashlib.sha256(repr(sorted(request.flags.items())).encode()).hexdigest()[:8], 16)
        base = 1.0 + (h % 1000) / 1000.0
        n = min(self.requests, request.workload.num_requests)
        records = [RequestRecord(i, 0.0, 0.1, base + i * 1e-3, 10, 10) for i in range(n)]
        return TrialResult(status=TrialStatus.OK, backend=self.name, records=records, requests_issued=n,
                           duration_s=base)

    def close(self) -> None:
        pass
