"""An in-process worker pool for TrialLoop tests: no Ray, results in submit order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.backends.base import TrialRequest
from autotune.results import TrialResult


@dataclass
class Back:
    """What the loop's pool hands back: FinishedTrial's shape."""

    key: Any
    worker_id: int
    result: TrialResult | None
    worker_died: str | None = None


@dataclass
class InlinePool:
    """Runs a trial when it is submitted; ``wait`` hands results back in submit order."""

    run: Callable[[TrialRequest], TrialResult | str]  # a str: the worker died with that reason
    size: int = 1
    requests: list[TrialRequest] = field(default_factory=list)
    sinks: list[Any] = field(default_factory=list)  # what the loop handed set_progress_sink
    _out: list[Back] = field(default_factory=list)

    def set_progress_sink(self, sink: Any) -> None:
        # Trials run inside submit, so nothing is ever in flight to report; kept for the tests.
        self.sinks.append(sink)

    def start(self) -> None:
        pass

    def idle_workers(self) -> list[int]:
        busy = {b.worker_id for b in self._out}
        return [w for w in range(self.size) if w not in busy]

    @property
    def running(self) -> int:
        return len(self._out)

    def submit(self, worker_id: int, key: Any, request: TrialRequest) -> None:
        self.requests.append(request)
        r = self.run(request)
        self._out.append(Back(key, worker_id, None, r) if isinstance(r, str) else Back(key, worker_id, r))

    def wait(self, timeout: float | None = None) -> list[Back]:
        return [self._out.pop(0)] if self._out else []

    def shutdown(self) -> None:
        self._out.clear()
