"""Live progress of a study: what each running trial is doing, each finished trial, the front.

A trial on real GPUs takes ten minutes or more, so the running trials are shown while they
run (phase, benchmark requests back, OOMs and restarts so far, running p99), from the
snapshots their workers report (``on_trial_progress``). Two ways to show them:

- ``rich``, for a terminal: one line per running trial, updated in place below the
  permanent lines;
- ``plain``, for logs and pipes (a Ray job's log, CI): a line when a trial's phase, OOMs or
  restarts change, and otherwise at most one per trial every ``plain_every_s``.

Both print the same permanent lines: a trial started (with the flags it runs), a trial
finished, the Pareto front. Numbers are for people: 0.92, not 0.9199999999999999.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from autotune.backends.base import Phase, TrialProgress
from autotune.results import TrialResult
from autotune.study.analysis import config_front
from autotune.study.loop import Callback, StudyContext
from autotune.study.trials import Role, State, TrialRecord

MODES = ("auto", "rich", "plain", "none")
_COLOR = {State.COMPLETE: "green", State.FAILED: "red", State.REJECTED: "yellow"}
_SERVING = (Phase.STARTING, Phase.RESTARTING, Phase.BENCHMARK)


class Progress(Callback):
    """Prints to ``console`` (stdout by default). ``header`` describes the run (backend,
    workers, run directory). ``mode``: rich, plain, or auto (rich on a terminal)."""

    def __init__(self, header: str = "", mode: str = "auto", console: Console | None = None,
                 plain_every_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console or Console(stderr=False, highlight=False, soft_wrap=True)
        self.mode = ("rich" if self.console.is_terminal else "plain") if mode == "auto" else mode
        self.header = header
        self.plain_every_s = plain_every_s
        self.clock = clock
        self.ctx: StudyContext | None = None
        self._running: dict[int, TrialProgress | None] = {}  # started, not ended: last snapshot
        self._printed: dict[int, tuple[tuple[Any, ...], float]] = {}  # plain: last headline and when
        self._live: Live | None = None
        self._last_front: list[tuple[int, tuple[float, ...]]] | None = None  # the front last printed
        self._confirming = False  # a confirmation run has ended: the front is over config means

    # ---- the study ---------------------------------------------------------------------------
    def on_study_start(self, ctx: StudyContext) -> None:
        self.ctx = ctx
        self.console.print(f"study {ctx.study.study_name}: {ctx.tally.complete}/{ctx.target} trials done; {self.header}")
        if self.mode == "rich":
            # Refreshed on each snapshot, not by a timer thread: elapsed times come with them.
            self._live = Live(console=self.console, auto_refresh=False, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def on_study_end(self, status: str) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def on_notice(self, message: str) -> None:
        self.console.print(escape(message))

    # ---- one trial -----------------------------------------------------------------------------
    def on_trial_start(self, record: TrialRecord) -> None:
        assert self.ctx is not None
        flags = record.searched_flags(list(self.ctx.space.params))
        shown = " ".join(f"{k}={human(v, digits=6)}" for k, v in flags.items())  # as set, not rounded
        self._running[record.number] = None
        self._show_running()
        self.console.print(f"trial {record.number}{_tag(record)} started: {escape(shown)}")

    def on_trial_progress(self, number: int, progress: TrialProgress) -> None:
        if number not in self._running:
            return
        self._running[number] = progress
        if self.mode == "plain":
            self._plain(number, progress)
        else:
            self._show_running()

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        assert self.ctx is not None
        self._running.pop(record.number, None)
        self._printed.pop(record.number, None)
        self._show_running()
        c, names = self.ctx.tally, self.ctx.space.objective_names
        vals = "  ".join(f"{n}={human(v)}" for n, v in zip(names, record.values or (), strict=False))
        if record.never_served:  # penalty values, not measurements
            vals = ""
        state = record.shown_state
        color = _COLOR.get(State(state), "white")
        note = escape(_note(record))
        self.console.print(
            f"[{c.complete}/{self.ctx.target}] trial {record.number}{_tag(record)} [{color}]{state}[/{color}] "
            f"{vals}{'  ' + note if note else ''}  | running {c.running}, failed {c.failed}, rejected {c.rejected}"
        )
        if record.state == State.COMPLETE:
            self._confirming = self._confirming or record.role == Role.CONFIRM
            if self._confirming:
                # Once configs are measured again, the front people see elsewhere (status, MLflow) is
                # over configs at their mean (study/analysis/pareto.py): reading every trial costs O(n) per
                # trial from the first confirmation run on (a leader repeat, at the earliest a third
                # into the search), a few hundred records at most.
                front = [(p.number, p.values) for p in config_front(self.ctx.study)]
            else:
                front = [(r.number, tuple(r.values or ())) for r in self.ctx.front.trials()]
            if front != self._last_front:  # only when it changed: the same line after each trial is noise
                self._last_front = front
                self._front(front, names)

    # ---- output --------------------------------------------------------------------------------
    def _plain(self, number: int, p: TrialProgress) -> None:
        """A line when the headline changes; otherwise one per ``plain_every_s``."""
        headline = (p.phase, p.ooms, p.restarts)
        last = self._printed.get(number)
        now = self.clock()
        if last is None or last[0] != headline or now - last[1] >= self.plain_every_s:
            self._printed[number] = (headline, now)
            self.console.print(f"  trial {number}: {describe(p)}")

    def _show_running(self) -> None:
        """rich: the live region's rows, one per running trial (before a print, which
        redraws the region, so the print never shows a stale one)."""
        if self._live is None:
            return
        rows = [Text(f"  trial {n}: {describe(p) if p else Phase.DISPATCHED}") for n, p in sorted(self._running.items())]
        self._live.update(Group(*rows), refresh=True)

    def _front(self, front: Sequence[tuple[int, Sequence[float]]], names: Sequence[str]) -> None:
        pts = ", ".join(f"#{n} (" + ", ".join(human(v) for v in vals) + ")" for n, vals in front[:8])
        more = f" +{len(front) - 8} more" if len(front) > 8 else ""
        self.console.print(f"    Pareto front ({', '.join(names)}): {pts or 'none feasible yet'}{more}")


def describe(p: TrialProgress) -> str:
    """One running trial for people: ``benchmark 340 of 1000, OOMs 3, restarts 1, p99 4.21 s (2m05s)``."""
    phase = f"{p.phase} {p.done} of {p.total}" if p.phase == Phase.BENCHMARK else str(p.phase)
    parts = [phase]
    if p.phase in _SERVING:  # before a server starts (or on the simulator) there is nothing to count
        parts += [f"OOMs {p.ooms}", f"restarts {p.restarts}"]
    if p.p99_s is not None:
        parts.append(f"p99 {human(p.p99_s)} s")
    return ", ".join(parts) + f" ({duration(p.elapsed_s)})"


def human(v: Any, digits: int = 3) -> str:
    """A number for people: ``digits`` significant digits (0.92, 4.21, 123), whole from 10**digits.

    Measurements get 3 digits; flag values get 6, which shows 0.9199999999999999 as 0.92 and
    keeps every digit a flag is set with.
    """
    if isinstance(v, bool) or not isinstance(v, float):
        return "nan" if v is None else str(v)
    if math.isnan(v):
        return "nan"
    return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:.0f}"


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _tag(r: TrialRecord) -> str:
    return "" if r.role == Role.SEARCH else escape(f" [{r.role}]")


def _note(r: TrialRecord) -> str:
    """Why a trial failed or was rejected, whole: a reason cut mid-word ("Try increasing
    `gpu_memory_utilization") hides the advice it ends with."""
    if r.state == State.REJECTED:
        return r.failure_reason
    if r.state == State.FAILED:
        return f"{r.failure_reason}; re-enqueued"
    note = f"{r.failure_class}: {r.failure_reason}" if r.failure_reason else ""
    return (note + " early-stopped").strip() if r.early_stopped else note

