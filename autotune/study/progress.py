"""Live progress of a study: one line per finished trial, and the current Pareto front."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from autotune.results import TrialResult
from autotune.study.callbacks import Callback, StudyContext
from autotune.study.record import Role, State, TrialRecord

_COLOR = {State.COMPLETE: "green", State.FAILED: "red", State.REJECTED: "yellow"}


class Progress(Callback):
    """Prints to stdout. ``header`` describes the run (backend, workers, run directory)."""

    def __init__(self, header: str = "") -> None:
        self.console = Console(stderr=False, highlight=False, soft_wrap=True)
        self.header = header
        self.ctx: StudyContext | None = None

    def on_study_start(self, ctx: StudyContext) -> None:
        self.ctx = ctx
        self.console.print(f"study {ctx.study.study_name}: {ctx.tally.complete}/{ctx.target} trials done; {self.header}")

    def on_notice(self, message: str) -> None:
        self.console.print(escape(message))

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        assert self.ctx is not None
        c, names = self.ctx.tally, self.ctx.space.objective_names
        vals = "  ".join(f"{n}={_fmt(v)}" for n, v in zip(names, record.values or (), strict=False))
        tag = "" if record.role == Role.SEARCH else escape(f" [{record.role}]")
        color = _COLOR.get(record.state, "white")
        note = escape(_note(record))
        self.console.print(
            f"[{c.complete}/{self.ctx.target}] trial {record.number}{tag} [{color}]{record.state}[/{color}] {vals}"
            f"{'  ' + note if note else ''}  | running {c.running}, failed {c.failed}, rejected {c.rejected}"
        )
        if record.state == State.COMPLETE:
            self._front([(r.number, r.values or []) for r in self.ctx.front.trials()], names)

    def _front(self, front: Sequence[tuple[int, Sequence[float]]], names: Sequence[str]) -> None:
        pts = ", ".join(f"#{n} (" + ", ".join(_fmt(v) for v in vals) + ")" for n, vals in front[:8])
        more = f" +{len(front) - 8} more" if len(front) > 8 else ""
        self.console.print(f"    Pareto front ({', '.join(names)}): {pts or 'none feasible yet'}{more}")


def _note(r: TrialRecord) -> str:
    if r.state == State.REJECTED:
        return r.failure_reason[:100]
    if r.state == State.FAILED:
        return f"{r.failure_reason}; re-enqueued"
    note = f"{r.failure_class}: {r.failure_reason[:80]}" if r.failure_reason else ""
    return (note + " early-stopped").strip() if r.early_stopped else note


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
