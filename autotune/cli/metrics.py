"""`autotune metrics`: the metric registry, as the names a space's objectives and SLOs may use.

The same table is docs/metrics.md (a test regenerates it and fails when they differ), so the
command, the docs and the schema's check of a metric name read one declaration each.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.metrics import table

COLUMNS = ("name", "unit", "direction", "source", "early_stop", "simulated", "help")


def markdown() -> str:
    """The registry as the markdown table of docs/metrics.md."""
    rows = table()
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(f"`{r[c]}`" if c == "name" else r[c] for c in COLUMNS) + " |" for r in rows]
    return "\n".join(out) + "\n"


@app.command("metrics")
def metrics_command(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list of the metrics.")] = False,
) -> None:
    """List every metric an objective, SLO or constraint may name: unit, direction, where it
    comes from, whether early stopping can bound it, whether the simulator reports it."""
    if as_json:
        typer.echo(json.dumps(table(), indent=1))
        return
    for r in table():
        flags = ("early-stop " if r["early_stop"] == "yes" else "") + ("" if r["simulated"] == "yes" else "vllm-only")
        typer.echo(f"{r['name']:<28} {r['unit']:<16} {r['direction']:<9} {r['source']:<9} {flags:<20} {r['help']}")
