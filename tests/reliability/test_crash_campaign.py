"""Crash safety: SIGKILL the driver at seeded random points, and a worker mid-trial.

The campaign runs a small simulator study (the flagship qwen72b space, fewer requests)
as a real `autotune run` subprocess on the session's Ray, kills the whole process group
at 10+ random moments (startup, ask, mid-trial, tell, MLflow logging, all fair game),
resumes each time, and checks that nothing learned was lost or duplicated.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState

from tests.conftest import REPO
from tests.reliability.conftest import (
    check_study,
    child_env,
    complete_values,
    launched_complete,
    noop_space,
    run_cmd,
    write_space,
)

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

SEED = 20240611
KILLS = 10
# Large enough that 10 kills (each after ~2 completions or a few seconds) land before the end.
TARGET = 40


def _sim_space(path: Path) -> Path:
    d = yaml.safe_load((REPO / "search_spaces" / "qwen72b.yaml").read_text())
    d["workload"]["num_requests"] = 60  # each simulated trial well under a second
    d["study"] = {"name": "crash", "trials": TARGET, "seed": 7}
    d["cluster"] = {"gpus_per_worker": 2, "workers": 2}
    return write_space(path, d)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def test_driver_killed_at_random_points_loses_and_duplicates_nothing(ray_cluster, tmp_path):
    rng = random.Random(SEED)
    space = _sim_space(tmp_path / "space.yaml")
    out = tmp_path / "run"
    storage = f"sqlite:///{out / 'optuna.db'}"
    kept: dict[int, tuple[float, ...]] = {}
    points: list[str] = []
    while len(points) < KILLS:
        before = len(complete_values(storage, "crash"))
        proc = subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, env=child_env())
        # Half the kills at a random time from launch (startup, resume, first asks); half
        # after a random number of new completions plus a jitter (mid-trial, tell, logging).
        if rng.random() < 0.5:
            wait_s = rng.uniform(0.5, 6.0)
            deadline = time.time() + wait_s
            while time.time() < deadline and proc.poll() is None:
                time.sleep(0.05)
            point = f"t+{wait_s:.2f}s"
        else:
            more, jitter = rng.randint(1, 3), rng.uniform(0.0, 0.8)
            deadline = time.time() + 120
            while len(complete_values(storage, "crash")) < before + more and proc.poll() is None:
                assert time.time() < deadline, "driver made no progress"
                time.sleep(0.05)
            time.sleep(jitter)
            point = f"after +{more} complete, +{jitter:.2f}s"
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            assert proc.returncode == 0, f"driver failed on its own at {point}: {err[-3000:]}"
            pytest.fail(f"the study finished before kill {len(points) + 1}; raise TARGET (kills so far: {points})")
        _kill_group(proc)
        points.append(point)
        kept.update(complete_values(storage, "crash"))

    done = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=600, env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    study = check_study(storage, "crash", out, TARGET, kept)
    assert len(points) >= KILLS
    # The kills did hit running trials (otherwise the campaign proved little).
    assert any(t.state == TrialState.FAIL for t in study.trials), f"no kill caught a running trial: {points}"


def test_worker_killed_mid_trial_is_failed_requeued_and_replaced(ray_cluster, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    # Enough trials after the kill for the replacement actor to come up and take one: with 6, a fresh
    # clone's suite beside `.ci/run` on 2 cores (load ~9) saw the surviving worker finish them all first.
    target = 12
    space = write_space(tmp_path / "space.yaml", noop_space("wkill", target, delay_s=1.5, env={"NOOP_PID_DIR": str(pids)}))
    out = tmp_path / "run"
    storage = f"sqlite:///{out / 'optuna.db'}"
    proc = subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env())
    deadline = time.time() + 180
    # A worker has taken a trial and is sleeping in it; its pid file is created before it is written.
    while not [f for f in pids.glob("trial-*.pid") if f.read_text().strip()]:
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
        assert time.time() < deadline, "no trial started"
        time.sleep(0.05)
    victim_file = sorted(f for f in pids.glob("trial-*.pid") if f.read_text().strip())[0]
    victim_trial = int(victim_file.stem.split("-")[1])
    victim_pid = int(victim_file.read_text())
    kept = complete_values(storage, "wkill")
    os.kill(victim_pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]

    study = check_study(storage, "wkill", out, target, kept)
    t = study.trials[victim_trial]
    assert t.state == TrialState.FAIL
    assert "died" in t.user_attrs["failure_reason"] and "worker" in t.user_attrs["failure_reason"]
    rerun = [x for x in study.trials if x.user_attrs.get("requeued_from") == victim_trial]
    assert len(rerun) == 1 and rerun[0].state == TrialState.COMPLETE and rerun[0].params == t.params
    # The pool replaced the dead actor: later trials ran in a process that did not exist before.
    after = {int(p.read_text()) for p in pids.glob("trial-*.pid") if int(p.stem.split("-")[1]) > victim_trial}
    assert after - {victim_pid}, "no trial ran after the kill"
    assert any(x.user_attrs.get("worker", -1) >= 2 for x in launched_complete(study)), "no replacement worker ran"
