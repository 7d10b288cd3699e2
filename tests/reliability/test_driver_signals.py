"""SIGTERM and SIGKILL of `autotune run` leave no Ray process of its study behind.

A real `autotune run` starts its own local Ray (no ``--address``: the Ray processes are the
driver's), runs no-op trials of 3 s on two workers, and is signalled while both run. Every
process of the driver's tree at that moment (GCS, raylet, agents, workers) must be gone
shortly after: on SIGTERM through the driver's orderly shutdown (exit 143, one line), on
SIGKILL through the reaper it started (workers/reaper.py). The study then resumes with
nothing lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import AUTOTUNE
from tests.reliability.conftest import (
    check_study,
    child_env,
    complete_values,
    noop_space,
    run_cmd,
    write_space,
)
from tests.reliability.procs import process_name, tree

pytestmark = pytest.mark.slow  # starts its own Ray (~10 s) per case: not in the quick loop; CI runs it

# Two rounds of the two workers: the signal lands in the first (both trials running), the
# resume re-runs those two and measures two more. More trials only lengthen the resume.
TARGET = 4


def _alive(pids: set[int]) -> dict[int, str]:
    """Those of ``pids`` still running (a zombie has ended: only its exit status is left)."""
    out = {}
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out[pid] = process_name(pid)
    return out


def _signalled_mid_study(tmp_path: Path, sig: signal.Signals) -> tuple[subprocess.Popen[str], set[int], str, Path]:
    name = f"sig{sig.name.lower()}"
    space = write_space(tmp_path / "space.yaml", noop_space(name, TARGET, delay_s=3.0, workers=2,
                                                            confirm={"finalists": 0}))
    out = tmp_path / "run"
    env = child_env()
    env.pop("RAY_ADDRESS", None)  # a local Ray of the driver's own
    proc = subprocess.Popen([AUTOTUNE, "run", "--space", str(space), "--out", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 180
    while True:
        pids = tree(proc.pid)
        if sum(process_name(p).startswith("ray::TrialWorker") for p in pids) >= 2:
            break
        assert proc.poll() is None, f"the driver ended early: {proc.stderr.read()[-3000:] if proc.stderr else ''}"
        assert time.time() < deadline, "the workers did not start"
        time.sleep(0.2)
    time.sleep(1.0)  # both trials under way
    pids = tree(proc.pid) - {proc.pid}
    assert {"gcs_server", "raylet"} <= {process_name(p) for p in pids}
    os.kill(proc.pid, sig)  # the driver alone, as a supervisor or the OOM killer would
    return proc, pids, name, out


def _all_gone(pids: set[int], within_s: float) -> dict[int, str]:
    deadline = time.time() + within_s
    while (left := _alive(pids)) and time.time() < deadline:
        time.sleep(0.2)
    return left


def _resume_and_check(tmp_path: Path, name: str, out: Path, address: str) -> None:
    storage = f"sqlite:///{out / 'optuna.db'}"
    kept = complete_values(storage, name)
    done = subprocess.run(run_cmd(tmp_path / "space.yaml", out, address), capture_output=True, text=True,
                          timeout=300, env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    check_study(storage, name, out, TARGET, kept)
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'invocation'", order_by=["start_time"])
    assert [r.info.status for r in runs] == ["KILLED", "FINISHED"]  # the signalled driver's run, closed


def test_sigterm_shuts_the_study_down_in_order_and_leaves_no_ray_process(ray_cluster, tmp_path):
    proc, pids, name, out = _signalled_mid_study(tmp_path, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    lines = [ln for ln in err.splitlines() if not ln.startswith(("20", "note:"))]  # Ray's dated notices at start
    assert lines == [f"error: stopped by SIGTERM: workers and Ray shut down, trials that were running are re-run "
                     f"on resume; run the same command again to resume the study in {out}"], err[-3000:]
    left = _all_gone(pids, within_s=10)
    assert not left, f"left running after SIGTERM: {left}"
    _resume_and_check(tmp_path, name, out, ray_cluster)


def test_sigkill_leaves_no_ray_process_for_long(ray_cluster, tmp_path):
    proc, pids, name, out = _signalled_mid_study(tmp_path, signal.SIGKILL)
    proc.communicate(timeout=60)
    # Without the reaper Ray's agents outlive a SIGKILLed driver by a minute or more.
    left = _all_gone(pids, within_s=15)
    assert not left, f"left running 15 s after SIGKILL: {left}"
    _resume_and_check(tmp_path, name, out, ray_cluster)
