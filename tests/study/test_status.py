"""`autotune status` shows the flags a trial ran with, in numbers people read."""

from __future__ import annotations

import json

import optuna
import yaml
from optuna.distributions import FloatDistribution, IntDistribution

from autotune.rundir import RunDir
from autotune.study.storages.storage import storage_from_url
from autotune.study.trials.record import Role, State, TrialRecord
from tests.conftest import run_cli

SAMPLED = {"gpu_memory_utilization": 0.9199999999999999, "max_num_batched_tokens": 2048}
# A `repair` constraint (max_num_batched_tokens >= max_model_len) moved the sampled 2048.
RAN = {"max_model_len": 8192, "gpu_memory_utilization": 0.92, "max_num_batched_tokens": 8192}


def _run_dir(tmp_path) -> RunDir:
    rd = RunDir(tmp_path / "run").ensure()
    space = {"study": {"name": "st"}, "objectives": [{"metric": "oom_per_1k"}, {"metric": "p99_e2e_s"}],
             "params": {"gpu_memory_utilization": {}, "max_num_batched_tokens": {}}}
    rd.space_copy.write_text(yaml.safe_dump(space))
    study = optuna.create_study(storage=storage_from_url(rd.optuna_url), study_name="st",
                                directions=["minimize", "minimize"])
    r = TrialRecord(0, State.COMPLETE, Role.SEARCH, params=SAMPLED, flags=RAN,
                    metrics={"oom_per_1k": 0.0, "p99_e2e_s": 27.123456789}, values=[0.0, 27.123456789])
    dists = {"gpu_memory_utilization": FloatDistribution(0.85, 0.98, step=0.005),
             "max_num_batched_tokens": IntDistribution(1024, 16384)}
    study.add_trial(optuna.trial.create_trial(params=SAMPLED, distributions=dists, values=r.values,
                                              user_attrs=r.user_attrs()))
    return rd


def test_status_shows_the_flags_as_run(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    (t,) = json.loads(out)["trials"]
    assert t["params"] == {"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 8192}  # not Optuna's params
    assert t["flags"] == RAN and t["state"] == "complete" and t["pareto"] is True


def test_status_table_numbers_are_for_people(tmp_path, capsys):
    rd = _run_dir(tmp_path)
    code, out, err = run_cli(["status", "--out", str(rd.root)], capsys)
    assert code == 0, err
    assert "gpu_memory_utilization=0.92," in out and "max_num_batched_tokens=8192" in out
    assert "0.9199999" not in out and "27.12" in out and "27.123456789" not in out


def test_status_reads_a_study_whose_driver_was_killed_mid_write(tmp_path, capsys):
    """A driver SIGKILLed inside a write transaction leaves a hot rollback journal. A read-only
    look cannot roll it back (SQLITE_READONLY_ROLLBACK) and status used to answer "holds no
    study yet, try again in a moment" forever; SQLite's recovery rolls the write back instead."""
    import os
    import signal
    import subprocess
    import sys

    rd = _run_dir(tmp_path)
    db = rd.root / "optuna.db"
    writer = ("import sqlite3, sys, time\n"
              "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "con.execute('BEGIN IMMEDIATE')\n"
              "con.execute('CREATE TABLE filler (x BLOB)')\n"
              "for _ in range(5000): con.execute('INSERT INTO filler VALUES (?)', (b'x' * 1000,))\n"
              "con.execute('DELETE FROM studies')\n"
              "print('in the write', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", writer, str(db)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "in the write"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert (rd.root / "optuna.db-journal").exists()  # the fault under test happened

    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    assert [t["number"] for t in json.loads(out)["trials"]] == [0]  # the killed write rolled back, nothing lost
