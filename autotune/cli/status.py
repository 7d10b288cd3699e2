"""`autotune status`: the study's trials, their state and values, the recommended config, the
Pareto front, and the statistics of every config measured more than once (docs/status.md
explains every word it prints).

The recommended config is the export rule's pick (autotune/study/analysis/export_rule.py), the one
`autotune export` writes and MLflow tags: one answer to "which config?". The Pareto front is
the one people are shown everywhere (autotune/study/analysis/pareto.py): configs at the mean of their
full runs.

The table fits the terminal (``COLUMNS``, else its width, else 80): long cells wrap at
words, and failure reasons are listed in full under the table, wrapped, never cut.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.errors import UserError
from autotune.export.header import predicted_oom_line
from autotune.formatting import number
from autotune.metrics import display, label
from autotune.metrics import get as get_metric
from autotune.rundir import RunDir
from autotune.space import SearchSpace
from autotune.space.loader import parse_space
from autotune.study.analysis import (
    DEFAULT_MAX_OOM_PER_1K,
    LATENCY,
    Choice,
    ConfigEvidence,
    FrontPoint,
    Ranking,
    config_front,
    recommendation,
    summarize,
)
from autotune.study.search import budget_note
from autotune.study.trials import State, TrialRecord, records
from autotune.tracking.naming import abbreviations, flags_label

# Width when the output is neither a terminal nor given COLUMNS (a file, a pipe to grep):
# wide enough that a row stays one line for grep, as wide as a terminal of 2 panes.
PIPE_WIDTH = 160


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _row(r: TrialRecord, searched: list[str], front: dict[int, FrontPoint], recommended: int | None) -> dict[str, Any]:
    return {
        "number": r.number,
        "state": r.shown_state,
        "served": r.launched and r.started,
        "role": str(r.role),
        "reference": r.reference or None,
        # The searched flags as the trial ran them: a `repair` constraint may have moved a
        # sampled value, and what ran is what the numbers measure.
        "params": r.searched_flags(searched),
        "flags": r.flags or None,
        # A trial that never served was told penalty values (1000 OOMs per 1000, ...): not shown as figures.
        "values": [_clean(v) for v in r.values] if r.values and not r.never_served else None,
        "failure_class": r.failure_class,
        "failure_reason": r.failure_reason or None,
        "early_stopped": r.early_stopped,
        "requeued_from": r.requeued_from,
        "repeat_of": r.repeat_of,
        "warnings": r.warnings,
        "elapsed_s": _clean(r.elapsed_s),
        "gpu_time_s": _clean(r.gpu_time_s),
        "started_at": r.started_at.isoformat() if r.started_at else None,
        "finished_at": r.finished_at.isoformat() if r.finished_at else None,
        "pareto": r.number in front,
        "recommended": r.number == recommended,
    }


def _counts(recs: list[TrialRecord]) -> dict[str, int]:
    n = {str(s): 0 for s in State}
    for r in recs:
        n[r.shown_state] += 1
    n["never_served"] = sum(1 for r in recs if r.never_served)
    return n


def recommendation_json(choice: Choice | None, rank_metric: str) -> dict[str, Any] | None:
    """The recommended config for `status --json`: the trial, why, and what stands behind it."""
    if choice is None:
        return None
    c = choice.config
    i = c.interval(rank_metric)
    return {
        "trial": choice.trial.number,
        "trials": c.numbers,
        "runs": c.n,
        "confirmed": c.confirmed,
        "rule": choice.rule,
        "notes": list(choice.notes),
        "flags": c.flags,
        "metric": rank_metric,
        "unit": get_metric(rank_metric).unit,
        "mean": _clean(i.mean),
        "ci95": [_clean(i.low), _clean(i.high)] if i.known else None,
    }


@app.command()
def status(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """List trials with state, flags as run and objective values; mark the recommended config and the Pareto front."""
    run_dir = find_run_dir(out)
    st = open_study(run_dir, study, storage)
    saved = saved_space(run_dir)
    recs = records(st.get_trials(deepcopy=False))
    searched = list(saved.get("params") or {}) or sorted({k for r in recs for k in r.params})
    front = {p.number: p for p in config_front(st)}
    space = _space(run_dir)
    choice = recommendation(st, space) if space else None
    recommended = choice.trial.number if choice else None
    rank_metric = _rank_metric(space)
    rows = [_row(r, searched, front, recommended) for r in recs]
    repeated = [c for c in summarize(recs, space).configs if c.n > 1] if space else []
    n = _counts(recs)
    if as_json:
        typer.echo(json.dumps({
            "study": st.study_name,
            "n_complete": n[State.COMPLETE],
            "n_failed": n[State.FAILED],
            "n_never_served": n["never_served"],
            # What the trial loop counts towards --trials: served or not, every launched trial.
            "n_launched": n[State.COMPLETE] + n["never_served"],
            "n_running": n[State.RUNNING],
            "n_rejected": n[State.REJECTED],
            "n_waiting": n[State.WAITING],
            "recommended": recommendation_json(choice, rank_metric),
            "budget_note": _budget_line(recs, space, n) or None,
            "pareto": sorted(front),
            "pareto_runs": {str(k): p.runs for k, p in sorted(front.items())},
            "trials": rows,
            "configs": [c.to_dict() for c in repeated],
        }, indent=1))
        return
    console = Console(soft_wrap=False, highlight=False, width=_width())
    width = console.width
    names = space.objective_names if space else (
        [o.get("metric") for o in saved.get("objectives", [])] or ["value"] * len(st.directions))
    failed = f"{n[State.FAILED]} failed" + (f" ({n['never_served']} never served)" if n["never_served"] else "")
    console.print(escape(_wrap(f"study {st.study_name}: {n[State.COMPLETE]} complete, {failed}, "
                               f"{n[State.RUNNING]} running, {n[State.REJECTED]} rejected, "
                               f"{n[State.WAITING]} waiting", width)))
    console.print(escape(_wrap(_recommended_line(choice, rank_metric), width, "  ")))
    if budget := _budget_line(recs, space, n):
        console.print(escape(_wrap(budget, width, "  ")))
    short = _short_names(rows, searched, names, width)
    console.print(_trials_table(rows, names, front, short))
    console.print(escape(_wrap("R: recommended (what `autotune export` writes). *: Pareto front, configs at the mean of "
                               "their runs (*3: a mean of 3 runs; * alone: a single run).", width)))
    if short:
        console.print(escape(_wrap("flags: " + ", ".join(f"{s}={n}" for n, s in short.items() if s != n), width)))
    failures = [r for r in rows if r["failure_reason"]]
    if failures:
        console.print("failures:")
        for r in failures:
            console.print(escape(_wrap(f"trial {r['number']} ({r['failure_class']}): {r['failure_reason']}", width,
                                       "    ", "  ")))
    if repeated:
        console.print(_configs_table(repeated, [m for m in names if m != "oom_per_1k"]))


def _budget_line(recs: list[TrialRecord], space: SearchSpace | None, n: dict[str, int]) -> str:
    """Once nothing runs or waits: whether the study's budget (its launched trials) was too
    small to search every flag (the line `autotune run` and the export header also give)."""
    if space is None or n[State.RUNNING] or n[State.WAITING]:
        return ""
    return budget_note(space, sum(r.launched for r in recs))


def _width() -> int:
    """COLUMNS when set, else the terminal's width, else :data:`PIPE_WIDTH`."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPE_WIDTH


def _rank_metric(space: SearchSpace | None) -> str:
    return Ranking.for_space(space).metric if space else LATENCY


def _recommended_line(choice: Choice | None, metric: str) -> str:
    if choice is None:
        return "recommended: none yet (no config served the whole benchmark within the study's constraints)"
    c = choice.config
    i = c.interval(metric)
    if i.known:
        runs = f"{c.center_word} of {c.n} runs" if c.n > 1 else "single run"
        fig = (f"{metric} {display(metric, i.mean)} ({runs}, 95 % interval {display(metric, i.low)} to "
               f"{display(metric, i.high)})")
    else:
        fig = f"{metric} {display(metric, i.mean)} (single run: no interval)"
    predicted = predicted_oom_line(c, DEFAULT_MAX_OOM_PER_1K)  # export.oom_model: as the export header says it
    notes = "".join(f" Note: {x}." for x in choice.notes)
    return (f"recommended: trial {choice.trial.number}, {fig}; chosen by the export rule: {choice.rule}."
            f"{f' {predicted[0].upper()}{predicted[1:]}.' if predicted else ''}{notes}"
            " `autotune export` writes this config.")


def _short_names(rows: list[dict[str, Any]], searched: list[str], names: list[str], width: int) -> dict[str, str]:
    """The flags' short names (as in MLflow's run names, autotune/tracking/naming.py) when a
    row with the full names would not fit in ``width``; {} when it would."""
    widest = max((len(_flags_text(r["params"], {})) for r in rows), default=0)
    fixed = 3 + 9 + 10 + sum(max(len(label(n)), 6) + 2 for n in names) + 5  # #, state, role, values, marks
    if fixed + widest <= width:
        return {}
    bools = {k for r in rows for k, v in r["params"].items() if isinstance(v, bool)}
    return abbreviations(searched, bools)


def _flags_text(params: dict[str, Any], short: dict[str, str]) -> str:
    if short:
        return flags_label(params, short)
    return ", ".join(f"{k}={number(v)}" for k, v in params.items())


def _trials_table(rows: list[dict[str, Any]], names: list[str], front: dict[int, FrontPoint],
                  short: dict[str, str]) -> Table:
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("role")
    for name in names:
        table.add_column(escape(label(name)), justify="right")  # with its unit, as the export and MLflow give it
    table.add_column("", no_wrap=True)  # R and *: see the legend under the table
    table.add_column("flags as run", overflow="fold")
    for r in rows:
        # Rejected and never-served trials were told penalty values, not measurements.
        told = r["values"] if r["state"] != str(State.REJECTED) else None
        vals = [number(v, 4) if isinstance(v, float) else "-" for v in (told or [None] * len(names))]
        detail = _flags_text(r["params"], short)
        if r["failure_reason"]:
            detail += f" [{r['failure_class']}: see failures]"
        if r["early_stopped"]:
            detail += " (stopped early: estimates)"
        if r["repeat_of"] is not None:
            detail += f" (repeats trial {r['repeat_of']})"
        point = front.get(r["number"])
        mark = ("R" if r["recommended"] else "") + ("" if point is None else "*" if point.runs == 1 else f"*{point.runs}")
        table.add_row(str(r["number"]), r["state"], r["role"], *vals, mark, escape(detail))
    return table


def _wrap(text: str, width: int, indent: str = "", first: str = "") -> str:
    """Wrapped at words (a word longer than a line is split: nothing may pass the width)."""
    return textwrap.fill(text, width=max(width, 20), initial_indent=first, subsequent_indent=indent,
                         break_on_hyphens=False)


def _space(run_dir: RunDir) -> SearchSpace | None:
    """The study's space, for the per-config statistics; None when the run directory's copy
    is missing or predates the schema (the trial table needs only the stored trials)."""
    try:
        return parse_space(saved_space(run_dir), run_dir.space_copy)
    except UserError:
        return None


def _configs_table(configs: list[ConfigEvidence], metrics: list[str]) -> Table:
    table = Table(title="configs measured more than once: mean [95 % interval]; OOMs over all their requests, "
                        "with the 95 % upper bound", box=None, header_style="bold")
    for col in ["trials", "runs", *(escape(label(m)) for m in metrics), "OOMs", "oom_per_1k <=", "headroom GiB"]:
        table.add_column(col)
    for c in configs:
        cells = []
        for m in metrics:
            i = c.interval(m)
            cells.append(f"{number(i.mean, 4)} [{number(i.low, 4)}, {number(i.high, 4)}]" if i.known else number(i.mean, 4))
        ooms = f"{c.oom.events}/{c.oom.requests}" if c.oom.requests else "?"
        table.add_row(", ".join(map(str, c.numbers)), str(c.n), *cells, ooms, number(c.oom.upper_per_1k, 3),
                      number(c.headroom.gib, 3))
    return table
