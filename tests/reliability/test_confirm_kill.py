"""A driver SIGKILLed mid-confirmation: the resume completes the confirmation runs, none twice.

A real `autotune run` subprocess (no-op backend, each trial ~1 s) on the session's Ray: 8
trials, of which the last ones (a quarter of the budget, study/confirm.confirm_trials)
confirm 2 finalists. The whole process group is killed while a confirmation run is in
flight; a second `autotune run` resumes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter

import pytest
from optuna.trial import TrialState

from autotune.space import load_space
from autotune.study.search.confirm import confirm_trials
from tests.reliability.conftest import (
    check_study,
    child_env,
    complete_values,
    load,
    noop_space,
    run_cmd,
    write_space,
)

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

TARGET = 8


def _confirm_running(storage: str, name: str) -> bool:
    s = load(storage, name)
    return s is not None and any(t.state == TrialState.RUNNING and t.user_attrs.get("role") == "confirm"
                                 for t in s.get_trials(deepcopy=False))


def test_driver_killed_mid_confirmation_resumes_and_completes_them(ray_cluster, tmp_path):
    name = "confirmkill"
    space = write_space(tmp_path / "space.yaml", noop_space(name, TARGET, delay_s=1.0,
                                                            confirm={"finalists": 2, "repeats": 2}))
    out = tmp_path / "run"
    storage = f"sqlite:///{out / 'optuna.db'}"
    proc = subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=child_env())
    deadline = time.time() + 240
    while not _confirm_running(storage, name):
        assert proc.poll() is None, f"the driver ended before confirming: {proc.stderr.read()[-3000:]}"
        assert time.time() < deadline, "no confirmation run started"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    kept = complete_values(storage, name)
    killed = [t.number for t in load(storage, name).get_trials(deepcopy=False) if t.state == TrialState.RUNNING]

    done = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr

    study = check_study(storage, name, out, TARGET, kept)  # nothing lost, each failure re-run once, logged once
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert sorted(t.number for t in failed) == sorted(killed)
    assert any(t.user_attrs.get("role") == "confirm" for t in failed)
    confirms = [t for t in trials if t.user_attrs.get("role") == "confirm" and t.state == TrialState.COMPLETE]
    per_finalist = Counter(t.user_attrs["repeat_of"] for t in confirms)
    # Each finalist confirmed at least once; the budget's confirmation runs all measured, none twice.
    budget = confirm_trials(TARGET, load_space(space).study.confirm)
    assert len(per_finalist) == 2 and min(per_finalist.values()) >= 1, per_finalist
    assert sum(per_finalist.values()) == budget, (per_finalist, budget)
    by_number = {t.number: t for t in trials}
    for t in confirms:  # each repeat measured its finalist's config
        assert t.params == by_number[t.user_attrs["repeat_of"]].params
    for t in failed:  # a killed repeat was re-run as a repeat of the same config
        rerun = next(x for x in trials if x.user_attrs.get("requeued_from") == t.number)
        assert rerun.user_attrs.get("repeat_of") == t.user_attrs.get("repeat_of")
