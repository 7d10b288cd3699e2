"""Pareto-front and optimisation-history plots (PNG), for the run directory and MLflow."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass(frozen=True)
class PlotPoint:
    number: int
    values: tuple[float, ...]
    feasible: bool
    pareto: bool
    role: str  # search | baseline | reference | rejected
    started: bool = True  # False: the engine never served, so the values are penalties


def pareto_plot(points: Sequence[PlotPoint], names: Sequence[str], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(7, 5))
    # Trials that never started carry penalty values (1000 OOM/1k, the timeout as p99);
    # drawn, they would squash every real point into a corner.
    not_started = sum(1 for p in points if p.role != "rejected" and not p.started)
    launched = [p for p in points if p.role != "rejected" and p.started and len(p.values) >= 2]
    series: list[tuple[str, Callable[[PlotPoint], bool], dict[str, Any]]] = [
        ("infeasible", lambda p: not p.feasible, dict(c="#bbbbbb", marker="x")),
        ("feasible", lambda p: p.feasible and not p.pareto, dict(c="#4c72b0", marker="o", alpha=0.6)),
    ]
    for label, pick, style in series:
        sel = [p for p in launched if pick(p)]
        if sel:
            ax.scatter([p.values[0] for p in sel], [p.values[1] for p in sel], label=label, **style)
    front = sorted((p for p in launched if p.pareto), key=lambda p: p.values)
    if front:
        ax.plot([p.values[0] for p in front], [p.values[1] for p in front], "-o", c="#dd4444", label="Pareto front")
    for p in launched:
        if p.role in ("baseline", "reference"):
            ax.annotate(f"{p.role} #{p.number}", (p.values[0], p.values[1]), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1] if len(names) > 1 else "")
    rejected = sum(1 for p in points if p.role == "rejected")
    ax.set_title(f"{title}\n(not shown: {not_started} failed to start, {rejected} rejected without launch)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def history_plot(points: Sequence[PlotPoint], names: Sequence[str], path: Path, title: str) -> Path:
    """Each objective per trial, with the best feasible value so far."""
    launched = sorted((p for p in points if p.role != "rejected" and p.started), key=lambda p: p.number)
    fig, axes = plt.subplots(len(names), 1, figsize=(7, 2.6 * len(names)), sharex=True, squeeze=False)
    for i, name in enumerate(names):
        ax = axes[i][0]
        xs = [p.number for p in launched]
        ys = [p.values[i] for p in launched]
        ax.scatter(xs, ys, s=14, c=["#4c72b0" if p.feasible else "#bbbbbb" for p in launched])
        best, bx, by = None, [], []
        for p in launched:
            if p.feasible and (best is None or p.values[i] < best):
                best = p.values[i]
            if best is not None:
                bx.append(p.number)
                by.append(best)
        if bx:
            ax.step(bx, by, where="post", c="#dd4444", label="best feasible so far")
            ax.legend(fontsize=8)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("trial")
    axes[0][0].set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
