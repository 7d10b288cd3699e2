"""Live progress of a study: one line per finished trial, and the current Pareto front."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape


class Progress:
    def __init__(self, target: int, objective_names: Sequence[str], enabled: bool = True) -> None:
        self.console = Console(stderr=False, highlight=False, soft_wrap=True)
        self.target = target
        self.names = list(objective_names)
        self.enabled = enabled

    def say(self, msg: str) -> None:
        if self.enabled:
            self.console.print(msg)

    def trial_done(self, number: int, state: str, role: str, values: Sequence[float] | None,
                   done: int, failed: int, rejected: int, running: int, note: str = "") -> None:
        if not self.enabled:
            return
        vals = "  ".join(f"{n}={_fmt(v)}" for n, v in zip(self.names, values or (), strict=False))
        tag = "" if role == "search" else escape(f" [{role}]")
        color = {"complete": "green", "failed": "red", "rejected": "yellow"}.get(state, "white")
        self.console.print(
            f"[{done}/{self.target}] trial {number}{tag} [{color}]{state}[/{color}] {vals}"
            f"{'  ' + escape(note) if note else ''}  | running {running}, failed {failed}, rejected {rejected}"
        )

    def front(self, front: Sequence[tuple[int, Sequence[float]]]) -> None:
        if not self.enabled:
            return
        pts = ", ".join(f"#{n} (" + ", ".join(_fmt(v) for v in vals) + ")" for n, vals in front[:8])
        more = f" +{len(front) - 8} more" if len(front) > 8 else ""
        self.console.print(f"    Pareto front ({', '.join(self.names)}): {pts or 'none feasible yet'}{more}")


def _fmt(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "nan"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
