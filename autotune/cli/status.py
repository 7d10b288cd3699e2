"""`autotune status`: the study's trials, their state and values, and the Pareto front."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.table import Table

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.study.seeding import ROLE_REJECTED

_STATE = {TrialState.COMPLETE: "complete", TrialState.FAIL: "failed", TrialState.RUNNING: "running",
          TrialState.WAITING: "waiting", TrialState.PRUNED: "pruned"}


def _state(t: FrozenTrial) -> str:
    if t.state == TrialState.COMPLETE and t.user_attrs.get("role") == ROLE_REJECTED:
        return "rejected"
    return _STATE.get(t.state, str(t.state))


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _pareto(study: Any) -> list[int]:
    if len(study.directions) < 2:
        try:
            return [study.best_trial.number]
        except ValueError:
            return []
    return sorted(t.number for t in study.best_trials if t.user_attrs.get("role") != ROLE_REJECTED)


@app.command()
def status(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object")] = False,
) -> None:
    """List trials with state, params and objective values; mark the Pareto front."""
    run_dir = find_run_dir(out)
    st = open_study(run_dir, study, storage)
    trials = st.get_trials(deepcopy=False)
    front = set(_pareto(st)) if any(t.state == TrialState.COMPLETE for t in trials) else set()
    rows = [
        {
            "number": t.number,
            "state": _state(t),
            "role": t.user_attrs.get("role", "search"),
            "params": t.params,
            "values": [_clean(v) for v in (t.values or [])] or None,
            "failure_reason": t.user_attrs.get("failure_reason", "") or None,
            "pareto": t.number in front,
        }
        for t in trials
    ]
    states = [r["state"] for r in rows]
    if as_json:
        typer.echo(json.dumps({
            "study": st.study_name,
            "n_complete": states.count("complete"),
            "n_failed": states.count("failed"),
            "n_running": states.count("running"),
            "n_rejected": states.count("rejected"),
            "pareto": sorted(front),
            "trials": rows,
        }, indent=1))
        return
    names = [o.get("metric") for o in saved_space(run_dir).get("objectives", [])] or ["value"] * len(st.directions)
    table = Table(title=f"study {st.study_name}  ({states.count('complete')} complete, {states.count('failed')} failed, "
                        f"{states.count('running')} running, {states.count('rejected')} rejected)")
    for col in ["#", "state", "role", *names, "pareto", "params / failure"]:
        table.add_column(col)
    for r in rows:
        vals = [f"{v:.4g}" if isinstance(v, float) else "-" for v in (r["values"] or [None] * len(names))]
        detail = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        if r["failure_reason"]:
            detail += f"  [{r['failure_reason'][:80]}]"
        table.add_row(str(r["number"]), r["state"], r["role"], *vals, "*" if r["pareto"] else "", detail)
    Console(soft_wrap=False, width=200).print(table)
