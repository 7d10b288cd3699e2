"""The service path: `ray job submit -- autotune run ...` against a Ray head on this machine.

A real head (`ray start --head`, dashboard on 127.0.0.1, token auth with a token of its own)
runs in its own process group with its own temp dir, and is stopped by killing that group:
never `ray stop`, which kills every Ray on the machine (other tests' and other users'). The
study is submitted with `--no-wait`, so the submitting client is gone before the study
starts; `autotune status` reads it while the job runs and after; the job finishes alone.

Slow on a loaded 2-core machine (the head takes ~20 s to start, each CLI call a few seconds):
the timeouts are generous and nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import AUTOTUNE, sqlite_study_ready

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

RAY = str(Path(sys.executable).with_name("ray"))  # the venv's, not resolved: its bin/python is a symlink
DATA = Path(__file__).resolve().parents[1] / "data"
PLANTED = "hf_planted_secret_value"  # sim_small.yaml's engine.env HF_TOKEN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Head:
    url: str  # the dashboard (Jobs API), on 127.0.0.1 only
    env: dict[str, str]  # what a client of this head needs: its token
    token: str
    log: Path

    def job(self, submission_id: str) -> dict:
        """The job's record from the Jobs REST API (`ray job status` without a Python start)."""
        req = urllib.request.Request(f"{self.url}/api/jobs/{submission_id}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def up(self) -> bool:
        try:
            req = urllib.request.Request(f"{self.url}/api/jobs/", headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([RAY, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the head's process group, then SIGKILL what is left after a few seconds (every
    daemon the head started is in that group). The test is over: nothing needs the 30 s drain
    `ray start --block` would take."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
        proc.wait(timeout=3)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    raise AssertionError(f"processes of the Ray head's group {pgid} are still alive")


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Head]:
    # A short path: Ray's unix socket paths under it must fit in 107 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="atj", dir="/tmp"))
    token_file = tmp / "auth_token"
    token = secrets.token_hex(32)
    token_file.write_text(token)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file),
           "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    env.pop("RAY_ADDRESS", None)
    dash = _free_port()
    log = tmp / "head.log"
    # Every port we can name is free and ours, so a head another test or user runs cannot clash.
    argv = [RAY, "start", "--head", "--block", "--port", str(_free_port()), "--dashboard-host", "127.0.0.1",
            "--dashboard-port", str(dash), "--node-ip-address", "127.0.0.1", "--temp-dir", str(tmp / "ray"),
            "--ray-client-server-port", str(_free_port()), "--dashboard-agent-listen-port", str(_free_port()),
            "--num-cpus", "4", "--num-gpus", "4", "--disable-usage-stats"]  # logical GPUs: the sim places on them
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    head = Head(f"http://127.0.0.1:{dash}", env, token, log)
    try:
        deadline = time.monotonic() + 300
        while not head.up():
            assert proc.poll() is None, f"ray start exited {proc.returncode}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the Jobs API never answered: {log.read_text()[-3000:]}"
            time.sleep(1)
        yield head
    finally:
        _stop_group(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _status(out: Path) -> dict | None:
    p = subprocess.run([AUTOTUNE, "status", "--out", str(out), "--json"], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    return json.loads(p.stdout) if p.returncode == 0 else None


def test_study_submitted_as_a_ray_job_outlives_its_client(ray_head, tmp_path):
    project = tmp_path / "project"  # what the user's --working-dir holds: the space file
    project.mkdir()
    space = yaml.safe_load((DATA / "sim_small.yaml").read_text())
    space["study"]["name"] = "sim_job"
    (project / "space.yaml").write_text(yaml.safe_dump(space))
    out = tmp_path / "run"  # absolute: the job's working dir is a temporary copy on the head
    sid = f"autotune-test-{secrets.token_hex(4)}"

    # The job's command names the venv's autotune by absolute path: the entrypoint runs with
    # the raylet's PATH, not the submitting shell's.
    sub = ray_head.cli("job", "submit", "--address", ray_head.url, "--no-wait", "--submission-id", sid,
                       "--working-dir", str(project), "--",
                       AUTOTUNE, "run", "--space", "space.yaml", "--out", str(out), "--workers", "1")
    assert sub.returncode == 0, sub.stderr[-3000:]  # the client has exited; the job is the head's now

    target = None
    mid_run: list[int] = []  # trials complete, as `autotune status` read them while the job ran
    deadline = time.monotonic() + 900
    while True:
        job = ray_head.job(sid)
        assert job["status"] in ("PENDING", "RUNNING", "SUCCEEDED"), job
        if job["status"] == "SUCCEEDED":
            break
        assert time.monotonic() < deadline, f"the job did not finish: {job}"
        # Read only a store the driver has finished creating (creating it from two
        # processes at once races); then read as a user would.
        if sqlite_study_ready(out / "optuna.db"):
            st = _status(out)
            if st is not None:
                target = target or yaml.safe_load((out / "space.yaml").read_text())["study"]["trials"]
                mid_run.append(st["n_complete"])
        time.sleep(1)

    final = _status(out)
    assert final is not None and final["study"] == "sim_job"
    assert target is not None and any(n < target for n in mid_run), f"never read mid-run: {mid_run}"
    # sim_small's reference never starts: it is counted failed (never served), nothing else is.
    assert final["n_launched"] >= target and final["n_running"] == 0 and final["n_failed"] == final["n_never_served"]
    assert final["pareto"]

    logs = ray_head.cli("job", "logs", "--address", ray_head.url, sid)
    assert logs.returncode == 0, logs.stderr[-2000:]
    # Plain progress (a job's output is no terminal), flags for people.
    assert re.search(r"^trial 0 \[baseline\] started: .*gpu_memory_utilization=0.92 ", logs.stdout, re.M), logs.stdout
    assert "\x1b[1A" not in logs.stdout
    assert f"study sim_job: {final['n_complete']} complete" in logs.stdout
    assert PLANTED not in logs.stdout

    # The trials ran on the head's cluster (RAY_ADDRESS, set for the job), not a Ray of the job's own.
    actors = ray_head.cli("list", "actors", "--address", ray_head.url, "--filter", "class_name=TrialWorker",
                          "--format", "json")
    assert actors.returncode == 0, actors.stderr[-2000:]
    assert json.loads(actors.stdout), "no TrialWorker actor on the head's cluster"
