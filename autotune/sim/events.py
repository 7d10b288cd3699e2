"""The simulated clock and the benchmark client that sends the trace.

The engine is step-driven: its events are step ends, at which completions happen. The
only events from outside are sends. Closed loop: ``concurrency`` clients each send the
next request of the trace when their previous one ends (or fails). Open loop: requests
arrive at the trace's Poisson times; ``concurrency``, if set, caps requests in flight on
the client side (as vLLM's benchmark ``--max-concurrency`` does). While the engine is
down after an OOM, sends are held and go out when it is back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.workload import TraceRequest


@dataclass(slots=True)
class Clock:
    now: float = 0.0

    def advance_to(self, t: float) -> None:
        # Never backwards: events scheduled "in the past" happen now.
        if t > self.now:
            self.now = t


class LoadGenerator:
    def __init__(self, trace: Sequence[TraceRequest], concurrency: int | None, closed_loop: bool) -> None:
        self.trace = trace
        self.closed = closed_loop
        self.cap = concurrency if concurrency is not None else len(trace)
        self.next_idx = 0
        self.in_flight = 0
        self.gate_s = 0.0  # when the client last became able to send (slot freed, engine back)

    @property
    def exhausted(self) -> bool:
        return self.next_idx >= len(self.trace)

    def next_arrival(self) -> float | None:
        """Open loop: when the next request arrives (None if none, or if the client-side
        cap holds it until a completion). Closed loop: None (sends follow completions)."""
        if self.closed or self.exhausted or self.in_flight >= self.cap:
            return None
        return float(self.trace[self.next_idx].arrival_s or 0.0)

    def due(self, now: float) -> list[tuple[TraceRequest, float]]:
        """Requests sent by ``now``, each with its send time: its arrival (open loop) unless
        the client was held back, then when it could send; ``now`` in closed loop."""
        out: list[tuple[TraceRequest, float]] = []
        while not self.exhausted and self.in_flight < self.cap:
            tr = self.trace[self.next_idx]
            if self.closed:
                send = now
            else:
                arrival = tr.arrival_s or 0.0
                if arrival > now:
                    break
                send = max(arrival, self.gate_s)
            out.append((tr, send))
            self.next_idx += 1
            self.in_flight += 1
        return out

    def finished(self, now: float, n: int = 1) -> None:
        if self.in_flight >= self.cap:
            self.gate_s = now
        self.in_flight -= n

    def reopen(self, now: float) -> None:
        """The engine is back after a restart: held requests go out now."""
        self.gate_s = now

    def take_rest(self) -> list[TraceRequest]:
        """Everything not yet sent (benchmark over: after max_restarts, or stopped early)."""
        rest = list(self.trace[self.next_idx :])
        self.next_idx = len(self.trace)
        return rest
