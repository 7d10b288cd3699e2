"""`autotune ui` serves the run's MLflow store on 127.0.0.1 (a real MLflow server)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from autotune.cli.ui import ui_command
from autotune.tracking.mlflow_tracker import MlflowTracker, TrialLog


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_run_store_on_loopback(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(db, tmp_path / "mlartifacts", "ui-study")
    tracker.start_invocation({"study": "ui-study"}, {})
    tracker.log_trial(TrialLog(0, "complete", {"max_num_seqs": 64}, {"p99_e2e_s": 1.5}))
    tracker.end_invocation()

    port = _free_port()
    cmd = ui_command(db, "127.0.0.1", port, tmp_path / "mlartifacts")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        proc.terminate()
        proc.wait(timeout=30)
