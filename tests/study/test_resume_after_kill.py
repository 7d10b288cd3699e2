"""SIGKILL the driver mid-run (a real subprocess), resume, and lose or duplicate nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import AUTOTUNE, sqlite_study_ready

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

DATA = Path(__file__).resolve().parents[1] / "data"


def _complete(db: Path, study: str) -> dict[int, tuple[float, ...]]:
    if not sqlite_study_ready(db):
        return {}
    try:
        s = optuna.load_study(study_name=study, storage=f"sqlite:///{db}")
    except KeyError:
        return {}
    return {t.number: tuple(t.values) for t in s.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE}


def _cmd(out: Path, address: str) -> list[str]:
    return [AUTOTUNE, "run", "--space", str(DATA / "noop_slow.yaml"), "--out", str(out), "--address", address, "--quiet"]


def test_resume_after_sigkill_keeps_every_completed_trial(ray_cluster, tmp_path):
    out = tmp_path / "run"
    db = out / "optuna.db"
    proc = subprocess.Popen(_cmd(out, ray_cluster), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 240
    while len(_complete(db, "noop_slow")) < 4:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "driver made no progress"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _complete(db, "noop_slow")
    study = optuna.load_study(study_name="noop_slow", storage=f"sqlite:///{db}")
    orphaned = [t.number for t in study.trials if t.state == TrialState.RUNNING]

    done = subprocess.run(_cmd(out, ray_cluster), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    after = _complete(db, "noop_slow")
    for n, values in before.items():
        assert after[n] == values  # nothing completed before the kill was lost or changed
    study = optuna.load_study(study_name="noop_slow", storage=f"sqlite:///{db}")
    launched = [t for t in study.trials if t.state == TrialState.COMPLETE and t.user_attrs.get("role") != "rejected"]
    assert len(launched) == 12
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert sorted(t.number for t in failed) == sorted(orphaned)
    requeued = sorted(t.user_attrs["requeued_from"] for t in study.trials if "requeued_from" in t.user_attrs)
    assert requeued == sorted(orphaned)
    for t in failed:  # a launched config is measured again; an unlaunched one keeps what it was enqueued with
        rerun = next(x for x in study.trials if x.user_attrs.get("requeued_from") == t.number)
        if t.user_attrs.get("flags"):
            assert rerun.params == t.params
        else:  # killed while sampling: its half sample is drawn afresh
            assert rerun.system_attrs.get("fixed_params", {}) == t.system_attrs.get("fixed_params", {})

    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = c.get_experiment_by_name("noop_slow")
    runs = c.search_runs([exp.experiment_id], filter_string="tags.`autotune.kind` = 'trial'", max_results=1000)
    numbers = [int(r.data.tags["autotune.trial_number"]) for r in runs]
    assert len(numbers) == len(set(numbers))  # none logged twice
    finished = {t.number for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)}
    assert set(numbers) == finished
