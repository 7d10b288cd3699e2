"""A pool of trial workers that keeps every worker busy and survives worker deaths.

The trial loop's default pool (it implements autotune.study.loop.pool.WorkerPool): one Ray
actor per GPU group.

Given a progress sink (``set_progress_sink``, by the trial loop), ``wait`` also polls each
busy worker's progress snapshot every ``progress_interval_s`` and hands it over
(``sink(key, snapshot)``) from the calling thread, only while the trial is still running: a
snapshot never arrives after its trial is returned as finished.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

from autotune.backends import TrialRequest
from autotune.backends.base import TrialProgress
from autotune.results import TrialResult
from autotune.workers.actor import RemoteTrialWorker

log = logging.getLogger(__name__)

WORKER_DEATH = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)


@dataclass
class Finished:
    """A trial that came back: a result, or the reason its worker died under it."""

    key: Any
    worker_id: int
    result: TrialResult | None = None
    worker_died: str | None = None


@dataclass
class WorkerPool:
    """One actor per GPU group; a worker takes trials once its actor is placed and running.

    A worker that dies (its process, or its node) is replaced by a new actor. The new one
    may not be placeable (a lost node took its GPUs with it): it waits, taking no trials,
    until the cluster has room, and the study goes on with the workers it has.
    """

    backend: str
    size: int
    gpus_per_worker: int
    cpus_per_worker: float
    backend_kwargs: dict[str, Any] = field(default_factory=dict)
    start_timeout_s: float = 600.0
    progress_interval_s: float = 0.5
    # study.pool.ProgressSink's shape (the workers may not import the study).
    _sink: Callable[[Any, TrialProgress], None] | None = field(default=None, init=False)
    _actors: dict[int, Any] = field(default_factory=dict, init=False)
    _pending: dict[Any, int] = field(default_factory=dict, init=False)  # readiness ref -> worker, not yet placed
    _busy: dict[Any, tuple[int, Any]] = field(default_factory=dict, init=False)  # ref -> (worker, key)
    _trial_of: dict[int, tuple[Any, int]] = field(default_factory=dict, init=False)  # busy worker -> (key, number)
    _polls: dict[Any, int] = field(default_factory=dict, init=False)  # progress ref -> worker
    _next_id: int = field(default=0, init=False)

    def set_progress_sink(self, sink: Callable[[Any, TrialProgress], None] | None) -> None:
        self._sink = sink

    def start(self) -> None:
        """Start every worker and wait until each is placed (the cluster was checked to hold them)."""
        for _ in range(self.size):
            self._spawn()
        ray.wait(list(self._pending), num_returns=len(self._pending), timeout=self.start_timeout_s)

    def _spawn(self) -> int:
        wid = self._next_id
        self._next_id += 1
        actor = RemoteTrialWorker.options(
            num_gpus=self.gpus_per_worker, num_cpus=self.cpus_per_worker, name=None
        ).remote(self.backend, wid, self.backend_kwargs)
        self._actors[wid] = actor
        self._pending[actor.info.remote()] = wid  # resolves once the actor is placed and constructed
        return wid

    def _placed(self) -> None:
        """Move workers whose actors have come up from pending to available."""
        if not self._pending:
            return
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        for ref in ready:
            wid = self._pending.pop(ref)
            try:
                ray.get(ref)
            except WORKER_DEATH as e:
                log.warning("worker %d died while starting (%s); replacing it", wid, type(e).__name__)
                self._replace(wid)

    def idle_workers(self) -> list[int]:
        self._placed()
        busy = {w for w, _ in self._busy.values()} | set(self._pending.values())
        return [w for w in self._actors if w not in busy]

    @property
    def running(self) -> int:
        return len(self._busy)

    def submit(self, worker_id: int, key: Any, request: TrialRequest) -> None:
        ref = self._actors[worker_id].run.remote(request)
        self._busy[ref] = (worker_id, key)
        self._trial_of[worker_id] = (key, request.trial_number)

    def actor(self, worker_id: int) -> Any:
        return self._actors[worker_id]

    def wait(self, timeout: float | None = None) -> list[Finished]:
        """Block until at least one trial finishes (or ``timeout``); return all that did."""
        if not self._busy:
            return []
        done = self._wait_polling(timeout)
        if done:  # collect everything else already finished without blocking again
            more, _ = ray.wait([r for r in self._busy if r not in done], num_returns=len(self._busy) - len(done), timeout=0)
            done = list(done) + list(more)
        out = []
        for ref in done:
            wid, key = self._busy.pop(ref)
            self._trial_of.pop(wid, None)
            try:
                out.append(Finished(key, wid, result=ray.get(ref)))
            except WORKER_DEATH as e:
                reason = f"worker {wid} died: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                log.warning("%s; replacing it", reason)
                self._replace(wid)
                out.append(Finished(key, wid, worker_died=reason))
        return out

    def _wait_polling(self, timeout: float | None) -> list[Any]:
        """``ray.wait`` for one finished trial, in steps that poll progress in between."""
        if self._sink is None:
            done, _ = ray.wait(list(self._busy), num_returns=1, timeout=timeout)
            return list(done)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Each call polls too, not only a step that timed out: with trials finishing
            # every few seconds, a step that ends with nothing done may be rare.
            self._poll_progress()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = self.progress_interval_s if left is None else min(left, self.progress_interval_s)
            done, _ = ray.wait(list(self._busy), num_returns=1, timeout=step)
            if done or (left is not None and left <= step):
                return list(done)

    def _poll_progress(self) -> None:
        """Hand over the snapshots that came back; ask each busy worker not already asked.

        Never blocks: an answer arrives by the next step. A worker that died answers with
        an error, ignored here: its trial's own reference reports the death.
        """
        assert self._sink is not None
        if self._polls:
            ready, _ = ray.wait(list(self._polls), num_returns=len(self._polls), timeout=0)
            for ref in ready:
                wid = self._polls.pop(ref)
                try:
                    snap = ray.get(ref)
                except Exception:
                    continue
                running = self._trial_of.get(wid)
                if snap is not None and running is not None and snap.trial_number == running[1]:
                    self._sink(running[0], snap)
        asked = set(self._polls.values())
        for wid in self._trial_of:
            if wid not in asked:
                self._polls[self._actors[wid].progress.remote()] = wid

    def _replace(self, worker_id: int) -> None:
        actor = self._actors.pop(worker_id, None)
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        self._spawn()

    def shutdown(self) -> None:
        unplaced = set(self._pending.values())
        for wid, actor in self._actors.items():
            if wid not in unplaced:  # an actor never placed has nothing to close, and would not answer
                try:
                    ray.get(actor.close.remote(), timeout=60)
                except Exception:
                    pass
            ray.kill(actor, no_restart=True)
        self._actors.clear()
        self._pending.clear()
        self._busy.clear()
        self._trial_of.clear()
        self._polls.clear()
