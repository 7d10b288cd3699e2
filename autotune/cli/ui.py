"""`autotune ui`: the MLflow UI on the study's tracking store, bound to 127.0.0.1.

It prints direct links (the trials table; vLLM's defaults against the Pareto front as a
parallel-coordinates plot) because MLflow opens an experiment in its GenAI view and with
default columns otherwise (autotune/tracking/views.py).

The MLflow server is started in a session of its own and stopped as a whole process
group: ``mlflow server`` runs uvicorn (and, unless told not to, a job runner with its huey
consumers) as children it does not stop itself, so signalling only the process we start
leaves them behind. The session's leader is a small watchdog (:func:`watch`), which runs
the server and stops the whole group when `autotune ui` is gone, however it went (a
SIGKILL cannot be caught, so nothing of `autotune ui` itself could forward it).

Its own output is the links and errors; the server's log (an access-log line per request)
goes to ``<run dir>/mlflow-server.log``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, saved_space
from autotune.errors import UserError
from autotune.rundir import RunDir
from autotune.security import mask_url

STOP_GRACE_S = 10.0
READY_TIMEOUT_S = 180.0
WATCH_EVERY_S = 0.5  # how often the watchdog looks whether `autotune ui` is still there
SERVER_LOG = "mlflow-server.log"


class _Terminated(Exception):
    """SIGTERM, raised in the main thread so the server group is stopped on the way out."""


def ui_command(backend_uri: str, host: str, port: int, artifacts: Path) -> list[str]:
    root = artifacts.resolve().as_uri()
    # One worker: the UI needs no more, and it starts in seconds instead of tens of them.
    # --artifacts-destination: MLflow's default is ./mlartifacts in the working directory.
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
            "--default-artifact-root", root, "--artifacts-destination", root,
            "--host", host, "--port", str(port), "--workers", "1"]


def watched(cmd: list[str], parent_pid: int) -> list[str]:
    """``cmd`` run under :func:`watch`, which stops it (and its group) once ``parent_pid`` is gone."""
    code = "import sys; from autotune.cli.ui import watch; watch(int(sys.argv[1]), sys.argv[2:])"
    return [sys.executable, "-c", code, str(parent_pid), *cmd]


def watch(parent_pid: int, cmd: list[str], every_s: float = WATCH_EVERY_S) -> None:
    """Run ``cmd`` in this process group; when ``parent_pid`` is no longer this process's
    parent (it died, and this one was handed to init or a subreaper), stop the group:
    SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`. Exits with ``cmd``'s status."""
    child = subprocess.Popen(cmd)
    while child.poll() is None:
        if os.getppid() != parent_pid:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the server
            with contextlib.suppress(ProcessLookupError):
                os.killpg(0, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(0, signal.SIGKILL)  # whatever is left, this watchdog included
        time.sleep(every_s)
    sys.exit(child.returncode)


def server_env() -> dict[str, str]:
    """No job runner (7 huey consumers that serve MLflow's GenAI jobs, not this UI), no telemetry."""
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


def study_links(run_dir: RunDir, base_url: str) -> list[tuple[str, str]]:
    """(label, URL) per study experiment in the run directory's store."""
    from mlflow.tracking import MlflowClient

    from autotune.tracking.views import compare_path, experiment_path

    client = MlflowClient(tracking_uri=run_dir.mlflow_url)
    exps = [e for e in client.search_experiments() if e.experiment_id != "0"]
    if not exps:
        raise UserError(f"--out {run_dir.root}: the MLflow store holds no study yet; run 'autotune run --space SPACE.yaml "
                        f"--out {run_dir.root}' first")
    links = []
    for e in exps:
        links.append((f"study {e.name}, all trials", base_url + "/" + experiment_path(e.experiment_id)))
        links.append((f"study {e.name}, vLLM defaults vs Pareto front", base_url + "/" + compare_path(e.experiment_id)))
    return links


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's process group; SIGKILL whatever is left after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader: an exited but unreaped process still counts in its group
        if not _group_alive(proc.pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@app.command()
def ui(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    port: Annotated[int, typer.Option(help="port")] = 5000,
    host: Annotated[str, typer.Option(help="bind address; keep 127.0.0.1 unless you mean to expose it")] = "127.0.0.1",
) -> None:
    """Serve the run directory's MLflow store and print links to the study's views."""
    _check_port_number(port)
    _check_host(host)
    run_dir = find_run_dir(out)
    _check_store(run_dir)
    _check_port_free(host, port)
    base = f"http://{host}:{port}"
    links = study_links(run_dir, base)
    log_path = run_dir.root / SERVER_LOG
    typer.echo(f"starting the MLflow UI on {base} (Ctrl-C to stop; server log: {log_path}) ...")
    with log_path.open("w") as log:
        proc = subprocess.Popen(watched(ui_command(run_dir.mlflow_url, host, port, run_dir.mlflow_artifacts),
                                        os.getpid()),
                                env=server_env(), start_new_session=True, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    # Ctrl-C stops the server even where SIGINT was inherited as ignored (a shell's background job).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 0
    try:
        if _wait_ready(proc, base) or proc.poll() is None:
            typer.echo(f"MLflow UI: {base}")
            for label, url in links:
                typer.echo(f"  {label}:\n    {url}")
        code = proc.wait()
        if code:
            typer.echo(f"error: the MLflow server exited with status {code}; its log: {log_path}", err=True)
    except KeyboardInterrupt:
        code = 130
    except _Terminated:
        code = 128 + signal.SIGTERM
    finally:
        stop_group(proc)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    raise typer.Exit(code)


def _check_store(run_dir: RunDir) -> None:
    db = run_dir.root / "mlflow.db"
    if db.exists():
        return
    uri = (saved_space(run_dir).get("study") or {}).get("mlflow_tracking_uri")
    if uri:
        raise UserError(f"--out {run_dir.root}: this study logs to {mask_url(uri)}, not to the run directory; "
                        "open that MLflow server instead")
    raise UserError(f"--out {run_dir.root}: no MLflow store ({db.name}) here; run 'autotune run --space "
                    f"SPACE.yaml --out {run_dir.root}' first")


def _check_port_number(port: int) -> None:
    if not 1 <= port <= 65535:
        raise UserError(f"--port {port}: not a TCP port; pick one from 1 to 65535 (default 5000)")


def _check_host(host: str) -> None:
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UserError(f"--host {host!r}: not an address or host name this machine can listen on; "
                        "use --host 127.0.0.1 (the default)") from None


def _check_port_free(host: str, port: int) -> None:
    with socket.socket() as s:
        # As the server binds: a port left in TIME_WAIT by an earlier server is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:  # resolves, but to no address of this machine
                raise UserError(f"--host {host}: no address of this machine ({e.strerror}); "
                                "use --host 127.0.0.1 (the default)") from None
            raise UserError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror}); "
                            "pick a free port with --port") from None


def _wait_ready(proc: subprocess.Popen, base: str) -> bool:
    """Whether the server answers /health before it exits or the timeout passes."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated()
