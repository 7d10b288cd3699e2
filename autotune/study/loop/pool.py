"""What the trial loop needs from the workers that run trials.

Two implementations: the Ray pool of GPU-group actors (autotune.workers.pool) and the
search benchmark's in-process pool on a simulated clock (experiments/search/harness.py).
The study package does not import either: it only states the shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from autotune.backends.base import TrialProgress, TrialRequest
from autotune.results import TrialResult

# Where a pool hands a running trial's progress: ``sink(key, snapshot)``, ``key`` as submitted.
ProgressSink = Callable[[Any, TrialProgress], None]


class FinishedTrial(Protocol):
    """A trial that came back: a result, or the reason its worker died under it."""

    key: Any  # what ``submit`` was given
    worker_id: int
    result: TrialResult | None
    worker_died: str | None


class WorkerPool(Protocol):
    def set_progress_sink(self, sink: ProgressSink | None) -> None:
        """Where to hand running trials' progress (None: nowhere). The loop calls it once,
        before ``start``, with its own hook when a callback shows progress: a pool given
        None never asks its workers for any. A pool that cannot report progress ignores it.
        Calls to ``sink`` come from inside ``wait``, on the loop's thread, only for a trial
        not yet returned as finished."""
        ...

    def start(self) -> None:
        """Start the workers (the loop calls it once, before the first submit)."""
        ...

    def idle_workers(self) -> list[int]:
        ...

    @property
    def running(self) -> int:
        """Trials submitted and not yet returned by ``wait``."""
        ...

    def submit(self, worker_id: int, key: Any, request: TrialRequest) -> None:
        ...

    def wait(self, timeout: float | None = None) -> Sequence[FinishedTrial]:
        """Block until at least one trial finishes (or ``timeout``); return all that did."""
        ...

    def shutdown(self) -> None:
        ...
