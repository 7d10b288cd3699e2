"""`autotune ui`: the MLflow UI on the study's tracking store, bound to 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir


def ui_command(backend_uri: str, host: str, port: int, artifacts: Path) -> list[str]:
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", backend_uri,
            "--default-artifact-root", artifacts.resolve().as_uri(), "--host", host, "--port", str(port)]


@app.command()
def ui(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    port: Annotated[int, typer.Option(help="port")] = 5000,
    host: Annotated[str, typer.Option(help="bind address; keep 127.0.0.1 unless you mean to expose it")] = "127.0.0.1",
) -> None:
    """Start the MLflow UI on the run directory's store and print its URL."""
    run_dir = find_run_dir(out)
    cmd = ui_command(run_dir.mlflow_url, host, port, run_dir.mlflow_artifacts)
    typer.echo(f"MLflow UI: http://{host}:{port}   (Ctrl-C to stop)", err=False)
    proc = subprocess.Popen(cmd)
    try:
        sys.exit(proc.wait())
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(timeout=10)
