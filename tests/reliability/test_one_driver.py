"""One driver per run directory: a second `autotune run` on the same --out is refused.

Two real `autotune run` processes (no-op backend, on the session's Ray) are started together
on one fresh --out: one runs the study, the other exits 2 with one line naming the first's
pid, and the stores it would have raced to create (MLflow's schema migration once failed
that way) are created once. The holder is then SIGKILLed: its lock goes with it, and a
third driver resumes the study to completion.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.reliability.conftest import (
    check_study,
    child_env,
    complete_values,
    noop_space,
    run_cmd,
    write_space,
)

pytestmark = pytest.mark.slow  # real driver processes: not in the quick loop; CI runs it

TARGET = 6


def test_a_second_driver_on_one_run_directory_is_refused_with_the_holders_pid(ray_cluster, tmp_path):
    name = "onedriver"
    space = write_space(tmp_path / "space.yaml", noop_space(name, TARGET, delay_s=3.0, workers=1,
                                                            confirm={"finalists": 0}))
    out = tmp_path / "run"
    storage = f"sqlite:///{out / 'optuna.db'}"
    procs = [subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True, env=child_env()) for _ in range(2)]
    # The refused one ends within seconds; the holder runs ~20 s of trials.
    deadline = time.time() + 120
    while all(p.poll() is None for p in procs):
        assert time.time() < deadline, "neither driver ended: the second was not refused"
        time.sleep(0.1)
    refused = next(p for p in procs if p.poll() is not None)
    holder = next(p for p in procs if p is not refused)
    _, err = refused.communicate(timeout=30)
    assert refused.returncode == 2, err
    assert holder.poll() is None, "the holder ended first: the study was too short to overlap"
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note:")]  # a budget note may precede
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: --out {out}: another autotune run (pid {holder.pid}) is running"), lines[0]

    # SIGKILL: no cleanup runs, and the next driver must still get the run directory.
    while not complete_values(storage, name):
        assert holder.poll() is None and time.time() < deadline, "the holder completed no trial"
        time.sleep(0.2)
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait(timeout=60)
    kept = complete_values(storage, name)
    assert (out / "driver.lock").read_text().split()[0] == str(holder.pid)  # the file stays; its lock does not
    done = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    check_study(storage, name, out, TARGET, kept)


def test_a_driver_killed_while_creating_the_mlflow_store_leaves_one_that_opens(ray_cluster, tmp_path):
    """MLflow's schema migrations take seconds; a kill among them once left a store no run
    could open ("table webhooks already exists"). The store is built aside and renamed."""
    name = "killedmigration"
    space = write_space(tmp_path / "space.yaml", noop_space(name, 2, confirm={"finalists": 0}))
    out = tmp_path / "run"
    proc = subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=child_env())
    deadline = time.time() + 120
    # As soon as the store is being created, under whatever name.
    while not (list(out.glob(".mlflow.db.*.tmp")) or (out / "mlflow.db").exists()):
        assert proc.poll() is None, f"the driver ended before creating its store: {proc.stderr.read()[-3000:]}"
        assert time.time() < deadline, "no MLflow store was created"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    done = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list(out.glob(".mlflow.db.*.tmp"))  # the killed driver's leftover is gone
    check_study(f"sqlite:///{out / 'optuna.db'}", name, out, 2, {})


def test_a_held_run_directory_is_refused_before_ray_is_started(tmp_path, capsys):
    """The early check needs no cluster: the lock alone refuses, in-process."""
    import fcntl

    from tests.conftest import run_cli

    space = write_space(tmp_path / "space.yaml", noop_space("held", 2))
    out = tmp_path / "run"
    out.mkdir()
    with open(out / "driver.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        f.write(f"{os.getpid()} {os.uname().nodename}\n")
        f.flush()
        # An address nothing listens on: were Ray started first, this would fail differently.
        code, _, err = run_cli(["run", "--space", str(space), "--out", str(out), "--address", "127.0.0.1:1",
                                "--quiet"], capsys)
    assert code == 2, err
    # (A "note:" on the space's budget may come first: it is about the space, not the lock.)
    assert [ln for ln in err.splitlines() if not ln.startswith("note:")] == [
        f"error: --out {out}: another autotune run (pid {os.getpid()}) is running on this run directory; wait for "
        "it to end, or stop it, then run again (to share a study between drivers, give each its own --out)"], err
    assert sorted(p.name for p in out.iterdir()) == ["driver.lock"]  # nothing created
