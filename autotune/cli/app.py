"""The typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="autotune",
    help="Bayesian autotuning of vLLM serving flags (Optuna on Ray, tracked in MLflow).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
