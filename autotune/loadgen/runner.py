"""Run the fixed benchmark against one live engine, one *phase* at a time.

A phase sends requests (closed loop: ``concurrency`` requests always in flight; open loop:
at the trace's arrival times, Poisson, gamma or recorded, optionally capped at
``concurrency``) until one of:

* every request was answered (``COMPLETED``);
* the engine died (``ENGINE_DEAD``): the process exited or /health fails; requests in flight
  are cancelled and reported as its casualties, unsent ones are held for the next phase;
* no token arrived for ``hang_timeout_s`` while streamed requests were in flight (``HANG``;
  a request vLLM will not stream sends nothing until it is done, so it cannot show a hang);
* the caller's ``on_done`` hook asked to stop (``EARLY_STOP``): nothing more is sent, requests
  in flight finish.

The open-loop clock pauses between phases, so after a restart the held requests keep their
original spacing instead of arriving as one burst for the time the engine was down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import aiohttp

from autotune.loadgen.client import ErrorKind, RequestOutcome, send_completion
from autotune.workload import TraceRequest, WorkloadSpec

# Failures that say something about the engine rather than the request.
_ENGINE_FAILURES = {ErrorKind.CONNECTION, ErrorKind.HTTP_5XX, ErrorKind.PROTOCOL, ErrorKind.TIMEOUT}


class EngineWatch(Protocol):
    async def dead(self) -> str | None:
        """Why the engine is dead (process exited, /health failing), or None if it is alive."""
        ...


class PhaseEnd(StrEnum):
    COMPLETED = "completed"
    ENGINE_DEAD = "engine_dead"
    HANG = "hang"
    EARLY_STOP = "early_stop"


@dataclass
class PhaseResult:
    end: PhaseEnd
    reason: str
    outcomes: dict[int, RequestOutcome]  # every request sent in this phase, by trace index
    casualties: list[int]  # sent, not answered, and failed because the engine died or hung
    unsent: list[int]  # never sent in this phase (held for a restart, or dropped by early stop)
    duration_s: float
    clock_end_s: float  # open-loop benchmark clock where this phase stopped

    @property
    def engine_failed(self) -> bool:
        return self.end in (PhaseEnd.ENGINE_DEAD, PhaseEnd.HANG)


@dataclass
class LoadGenerator:
    """One trial's benchmark. Build once per trial; call :meth:`run_phase` once per engine life."""

    base_url: str  # e.g. http://127.0.0.1:8000
    model: str  # the served model name
    spec: WorkloadSpec
    trace: list[TraceRequest]
    token_id_high: int | None = None  # the served vocabulary size; caps the prompt token IDs
    hang_timeout_s: float = 120.0
    watch_interval_s: float = 0.5
    # Called after each answered or failed request (not cancelled ones); True stops the phase early.
    on_done: Callable[[RequestOutcome], bool | None] | None = None
    _bench_t0: float | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/completions"

    async def run_phase(self, indices: Sequence[int], watch: EngineWatch, clock_start_s: float = 0.0) -> PhaseResult:
        if self._bench_t0 is None:
            self._bench_t0 = time.perf_counter()
        phase = _Phase(self, list(indices), watch, clock_start_s)
        return await phase.run()


class _Phase:
    def __init__(self, gen: LoadGenerator, indices: list[int], watch: EngineWatch, clock_start_s: float):
        self.gen = gen
        self.spec = gen.spec
        self.pending = list(indices)  # in send order
        self.watch = watch
        self.clock_start_s = clock_start_s
        self.outcomes: dict[int, RequestOutcome] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        self.alive_failures: set[int] = set()  # failed while the engine was confirmed alive
        self.stop = asyncio.Event()
        self.end = PhaseEnd.COMPLETED
        self.reason = ""
        self.last_progress = time.perf_counter()
        self.t0 = 0.0

    def _finish(self, end: PhaseEnd, reason: str) -> None:
        if not self.stop.is_set():
            self.end, self.reason = end, reason
            self.stop.set()

    def _progress(self) -> None:
        self.last_progress = time.perf_counter()

    def _streaming_in_flight(self) -> bool:
        return any(self.gen.trace[i].options.streamable for i in self.tasks)

    async def _one(self, session: aiohttp.ClientSession, idx: int) -> None:
        req = self.gen.trace[idx]
        prompt = req.prompt_token_ids(self.spec, token_id_high=self.gen.token_id_high)
        assert self.gen._bench_t0 is not None
        out = RequestOutcome(index=idx, send_s=time.perf_counter() - self.gen._bench_t0, options=req.options)
        self.outcomes[idx] = out
        await send_completion(session, self.gen.url, self.gen.model, prompt, req.output_len, out,
                              self.spec.request_timeout_s, on_chunk=self._progress)
        if out.ok:
            self._progress()
        elif out.error_kind in _ENGINE_FAILURES:
            if not self.stop.is_set():
                # Did this request fail because the engine died? Ask now, before anything else is sent.
                reason = await self.watch.dead()
                if reason:
                    self._finish(PhaseEnd.ENGINE_DEAD, reason)
                else:
                    self.alive_failures.add(idx)
            elif self.end == PhaseEnd.EARLY_STOP:
                self.alive_failures.add(idx)
            # else: the engine was already found dead; this request is one of its casualties
        else:
            self.alive_failures.add(idx)  # the server refused this request (4xx): the engine is fine
        if self.gen.on_done is not None and not (self.stop.is_set() and self.end != PhaseEnd.EARLY_STOP):
            if self.gen.on_done(out):
                self._finish(PhaseEnd.EARLY_STOP, "early-stop rule: the trial cannot reach the Pareto front")

    def _launch(self, session: aiohttp.ClientSession, idx: int, slots: asyncio.Semaphore | None) -> asyncio.Task:
        async def run() -> None:
            try:
                await self._one(session, idx)
            finally:
                if slots is not None:
                    slots.release()
                self.tasks.pop(idx, None)

        task = asyncio.create_task(run())
        self.tasks[idx] = task
        return task

    async def _dispatch(self, session: aiohttp.ClientSession) -> None:
        cap = self.spec.concurrency
        slots = asyncio.Semaphore(cap) if cap else None
        while self.pending and not self.stop.is_set():
            idx = self.pending[0]
            arrival = self.gen.trace[idx].arrival_s
            if not self.spec.closed_loop and arrival is not None:
                due = self.t0 + max(0.0, arrival - self.clock_start_s)
                delay = due - time.perf_counter()
                if delay > 0 and await _wait(self.stop, delay):
                    break
            if slots is not None:
                if not await _acquire(slots, self.stop):
                    break
                if self.stop.is_set():
                    slots.release()
                    break
            self.pending.pop(0)
            if not self._streaming_in_flight():
                # Nothing streamed was in flight: the silence before this send was not a hang.
                self._progress()
            self._launch(session, idx, slots)
        # Wait for what is in flight, unless the engine failed (then watch() cancels it).
        while self.tasks and not (self.stop.is_set() and self.end != PhaseEnd.EARLY_STOP):
            await _wait(self.stop, 0.05)
        if self.tasks and self.end == PhaseEnd.EARLY_STOP:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)
        if not self.stop.is_set():
            self._finish(PhaseEnd.COMPLETED, "all requests answered")

    async def _watch(self) -> None:
        while not self.stop.is_set():
            if await _wait(self.stop, self.gen.watch_interval_s):
                return
            if self._streaming_in_flight() and time.perf_counter() - self.last_progress > self.gen.hang_timeout_s:
                self._finish(PhaseEnd.HANG, f"no token for {self.gen.hang_timeout_s:g}s with "
                                            f"{len(self.tasks)} requests in flight")
                return
            reason = await self.watch.dead()
            if reason:
                self._finish(PhaseEnd.ENGINE_DEAD, reason)
                return

    async def run(self) -> PhaseResult:
        self.t0 = time.perf_counter()
        self._progress()
        # One connection per in-flight request; no client-side cap below the benchmark's own.
        conn = aiohttp.TCPConnector(limit=0, force_close=False)
        async with aiohttp.ClientSession(connector=conn) as session:
            watcher = asyncio.create_task(self._watch())
            dispatcher = asyncio.create_task(self._dispatch(session))
            await self.stop.wait()
            if self.end in (PhaseEnd.ENGINE_DEAD, PhaseEnd.HANG):
                in_flight = list(self.tasks.values())
                for t in in_flight:
                    t.cancel()
                await asyncio.gather(*in_flight, return_exceptions=True)
            await asyncio.gather(dispatcher, return_exceptions=True)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        duration = time.perf_counter() - self.t0
        casualties: list[int] = []
        if self.end in (PhaseEnd.ENGINE_DEAD, PhaseEnd.HANG):
            casualties = sorted(i for i, o in self.outcomes.items() if not o.ok and i not in self.alive_failures)
        return PhaseResult(
            end=self.end,
            reason=self.reason,
            outcomes=self.outcomes,
            casualties=casualties,
            unsent=list(self.pending),
            duration_s=duration,
            clock_end_s=self.clock_start_s + duration,
        )


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Sleep up to ``timeout``; True if ``event`` was set meanwhile."""
    try:
        await asyncio.wait_for(event.wait(), timeout=max(timeout, 0.0))
        return True
    except TimeoutError:
        return event.is_set()


async def _acquire(sem: asyncio.Semaphore, stop: asyncio.Event) -> bool:
    """Take a slot; False (holding nothing) if ``stop`` was set first."""
    acquire = asyncio.ensure_future(sem.acquire())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({acquire, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if acquire.done() and not acquire.cancelled():
        return True
    acquire.cancel()
    try:
        await acquire
    except asyncio.CancelledError:
        return False
    return True  # it won the race after all: we hold a slot
