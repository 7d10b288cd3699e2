"""A Ray node lost mid-study, on a real two-node Ray cluster on this machine.

Two nodes (``ray.cluster_utils.Cluster``: a head and a second raylet), 2 logical GPUs each;
the study's two workers of 2 GPUs can only be placed one per node. ``autotune run`` joins
the cluster with ``--address`` from its own working directory. Mid-study the second node
is removed (its raylet and workers killed, as when a machine is lost): the trial running
there is failed with the reason, re-enqueued and re-run on the node that is left, and the
study finishes with nothing lost or logged twice. The replacement worker cannot be placed
(no GPUs left), so the study must finish without it.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

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

HELPER = Path(__file__).with_name("two_node_cluster.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_lost_node_trials_rerun_on_the_node_left(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    proc: subprocess.Popen | None = None
    cluster = subprocess.Popen([sys.executable, str(HELPER), str(_free_port())], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env())
    try:
        line = cluster.stdout.readline() if cluster.stdout else ""
        assert line, "the two-node cluster did not start"
        address = json.loads(line)["address"]
        target = 8
        space = write_space(tmp_path / "space.yaml",
                            noop_space("nodeloss", target, delay_s=2.0, env={"NOOP_PID_DIR": str(pids)}))
        out = tmp_path / "run"
        storage = f"sqlite:///{out / 'optuna.db'}"
        driver_cwd = tmp_path / "elsewhere"
        driver_cwd.mkdir()
        proc = subprocess.Popen(run_cmd(space, out, address), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=driver_cwd, env=child_env())
        # Both workers have taken trials (one per node), and two trials have completed.
        deadline = time.time() + 240
        while len(complete_values(storage, "nodeloss")) < 2 or len(list(pids.glob("trial-*.pid"))) < 4:
            assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
            assert time.time() < deadline, "the study made no progress"
            time.sleep(0.1)
        kept = complete_values(storage, "nodeloss")
        assert cluster.stdin is not None and cluster.stdout is not None
        cluster.stdin.write("remove\n")
        cluster.stdin.flush()
        assert cluster.stdout.readline().strip() == "removed"
        stdout, stderr = proc.communicate(timeout=420)
        assert proc.returncode == 0, stderr[-3000:]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        if cluster.stdin:
            cluster.stdin.close()
        cluster.wait(timeout=120)

    study = check_study(storage, "nodeloss", out, target, kept)
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert failed, "removing the node failed no trial: was a worker placed on it?"
    for t in failed:
        assert "died" in t.user_attrs["failure_reason"] and "worker" in t.user_attrs["failure_reason"]
        rerun = next(x for x in study.trials if x.user_attrs.get("requeued_from") == t.number)
        assert rerun.state == TrialState.COMPLETE and rerun.params == t.params
    workers = {t.user_attrs["worker"] for t in launched_complete(study)}
    assert len(workers) >= 2  # both nodes' workers measured trials before the loss
