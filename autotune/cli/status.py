"""`autotune status`: the study's trials, their state and values, the Pareto front, and the
statistics of every config measured more than once (docs/export.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.errors import UserError
from autotune.formatting import number
from autotune.rundir import RunDir
from autotune.space import SearchSpace
from autotune.space.loader import parse_space
from autotune.study.evidence import ConfigEvidence, summarize
from autotune.study.pareto import pareto_numbers
from autotune.study.record import State, TrialRecord, records


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _row(r: TrialRecord, searched: list[str], front: set[int]) -> dict[str, Any]:
    return {
        "number": r.number,
        "state": str(r.state),
        "role": str(r.role),
        "reference": r.reference or None,
        # The searched flags as the trial ran them: a `repair` constraint may have moved a
        # sampled value, and what ran is what the numbers measure.
        "params": r.searched_flags(searched),
        "flags": r.flags or None,
        "values": [_clean(v) for v in r.values] if r.values else None,
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
    }


@app.command()
def status(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """List trials with state, flags as run and objective values; mark the Pareto front."""
    run_dir = find_run_dir(out)
    st = open_study(run_dir, study, storage)
    saved = saved_space(run_dir)
    recs = records(st.get_trials(deepcopy=False))
    searched = list(saved.get("params") or {}) or sorted({k for r in recs for k in r.params})
    front = set(pareto_numbers(st))
    rows = [_row(r, searched, front) for r in recs]
    space = _space(run_dir)
    repeated = [c for c in summarize(recs, space).configs if c.n > 1] if space else []
    n = {s: sum(1 for r in recs if r.state == s) for s in State}
    if as_json:
        typer.echo(json.dumps({
            "study": st.study_name,
            "n_complete": n[State.COMPLETE],
            "n_failed": n[State.FAILED],
            "n_running": n[State.RUNNING],
            "n_rejected": n[State.REJECTED],
            "n_waiting": n[State.WAITING],
            "pareto": sorted(front),
            "trials": rows,
            "configs": [c.to_dict() for c in repeated],
        }, indent=1))
        return
    names = [o.get("metric") for o in saved.get("objectives", [])] or ["value"] * len(st.directions)
    table = Table(title=f"study {st.study_name}  ({n[State.COMPLETE]} complete, {n[State.FAILED]} failed, "
                        f"{n[State.RUNNING]} running, {n[State.REJECTED]} rejected, {n[State.WAITING]} waiting)")
    for col in ["#", "state", "role", *names, "pareto", "flags as run / failure"]:
        table.add_column(col)
    for r in rows:
        vals = [number(v, 4) if isinstance(v, float) else "-" for v in (r["values"] or [None] * len(names))]
        detail = ", ".join(f"{k}={number(v)}" for k, v in r["params"].items())
        if r["failure_reason"]:
            detail += f"  [{r['failure_reason'][:80]}]"
        if r["early_stopped"]:
            detail += "  (stopped early: estimates)"
        if r["repeat_of"] is not None:
            detail += f"  (repeats trial {r['repeat_of']})"
        table.add_row(str(r["number"]), r["state"], r["role"], *vals, "*" if r["pareto"] else "", escape(detail))
    console = Console(soft_wrap=False, width=200)
    console.print(table)
    if repeated:
        console.print(_configs_table(repeated, [m for m in names if m != "oom_per_1k"]))


def _space(run_dir: RunDir) -> SearchSpace | None:
    """The study's space, for the per-config statistics; None when the run directory's copy
    is missing or predates the schema (the trial table needs only the stored trials)."""
    try:
        return parse_space(saved_space(run_dir), run_dir.space_copy)
    except UserError:
        return None


def _configs_table(configs: list[ConfigEvidence], metrics: list[str]) -> Table:
    table = Table(title="configs measured more than once: mean [95 % interval]; OOMs over all their requests, "
                        "with the 95 % upper bound")
    for col in ["trials", "runs", *metrics, "OOMs", "oom_per_1k <=", "headroom GiB"]:
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
