"""`autotune ui`: serves the run's MLflow store on 127.0.0.1 (a real MLflow server), prints
links to the study, stops the server's whole process group on SIGTERM and Ctrl-C, and
refuses bad input in one line with exit status 2."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from autotune.cli.ui import server_env, stop_group, ui_command
from autotune.tracking.mlflow_tracker import MlflowTracker, TrialLog, _create_store
from tests.conftest import run_cli
from tests.ui.ui_process import free_port, live_processes, start_ui

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop


_MIGRATED: list[bytes] = []  # the first store's database as MLflow's schema migrations left it


def _store(run_dir: Path, study: str = "ui-study") -> str:
    """A run directory as `autotune run` leaves it: the space copy and an MLflow store.

    MLflow's schema migrations (seconds) run once per process: each later store starts as a
    copy of the first one's database right after them, before anything was logged, and the
    tracker fills it as it would a fresh one (its deleted Default experiment's artifact root
    names the first directory; nothing reads it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "space.yaml").write_text(yaml.safe_dump({"version": 1, "study": {"name": study}}))
    db = f"sqlite:///{run_dir / 'mlflow.db'}"
    if _MIGRATED:
        (run_dir / "mlflow.db").write_bytes(_MIGRATED[0])
    else:
        _create_store(db, run_dir / "mlartifacts")
        _MIGRATED.append((run_dir / "mlflow.db").read_bytes())
    tracker = MlflowTracker(db, run_dir / "mlartifacts", study, own_store=True)
    tracker.start_invocation({"study": study}, {})
    tracker.log_trial(TrialLog(0, "complete", {"max_num_seqs": 64}, {"p99_e2e_s": 1.5}))
    tracker.end_invocation()
    return db


def test_ui_serves_the_run_store_on_loopback(tmp_path: Path):
    db = _store(tmp_path)
    port = free_port()
    cmd = ui_command(db, "127.0.0.1", port, tmp_path / "mlartifacts")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_env(),
                            start_new_session=True)
    try:
        body = None
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ui-study")
                with urllib.request.urlopen(req, timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(1)
        assert body is not None, "MLflow UI did not answer"
        assert '"name": "ui-study"' in body or '"name":"ui-study"' in body
    finally:
        stop_group(proc)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_ui_stops_the_servers_whole_process_group(tmp_path: Path, sig: int, code: int):
    _store(tmp_path / "run")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    port = free_port()
    ui = start_ui(tmp_path / "run", cwd, port)
    try:
        links = ui.wait_for_links()
        pgid = ui.server_pgid()
        assert live_processes(pgid), "the server runs in a process group of its own"
    finally:
        rc = ui.stop(sig)
    assert rc == code
    assert live_processes(pgid) == []
    assert [u for u in links.values() if u.startswith(f"http://127.0.0.1:{port}/#/experiments/")]
    with socket.socket() as s:  # the port is free again: no listener is left (as any server, ignore TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
    assert list(cwd.iterdir()) == []  # no mlruns/ or mlartifacts/ where it ran


def test_ui_on_a_port_in_use_is_one_line_exit_2(tmp_path: Path, capsys):
    _store(tmp_path)
    capsys.readouterr()  # MLflow's own log lines from creating the store
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run_cli(["ui", "--out", str(tmp_path), "--port", str(port)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and f"--port {port}" in err and "in use" in err
    assert "Traceback" not in err + out


@pytest.mark.parametrize("setup, says", [
    ("empty", "no study here"),
    ("space-only", "no MLflow store"),
    ("remote-store", "logs to http://mlflow.example:5000"),
    ("no-experiment", "holds no study yet"),
])
def test_ui_on_a_run_directory_without_a_study_is_one_line_exit_2(tmp_path: Path, capsys, setup: str, says: str):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if setup != "empty":
        study = {"name": "s"} | ({"mlflow_tracking_uri": "http://mlflow.example:5000"} if setup == "remote-store" else {})
        (run_dir / "space.yaml").write_text(yaml.safe_dump({"version": 1, "study": study}))
    if setup == "no-experiment":
        from mlflow.tracking import MlflowClient

        MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}").search_experiments()  # creates an empty store
    before = sorted(p.name for p in run_dir.iterdir())
    capsys.readouterr()
    code, out, err = run_cli(["ui", "--out", str(run_dir), "--port", str(free_port())], capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing created or changed
