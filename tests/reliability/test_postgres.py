"""PostgreSQL: shared storage for several drivers, and a database restart mid-study.

Needs the server from scripts/start_postgres.sh (AUTOTUNE_TEST_PG_URL); `.ci/run` starts
it and sets AUTOTUNE_REQUIRE_POSTGRES=1 so these fail rather than skip there.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter

import optuna
import pytest
from optuna.trial import TrialState

from autotune.security import mask_url
from autotune.study.storages.recovery import owner_of
from autotune.study.storages.storage import RetryingRDBStorage, is_transient, storage_from_url
from tests.reliability.conftest import (
    child_env,
    complete_values,
    finished_numbers,
    launched_complete,
    load,
    mlflow_trial_numbers,
    noop_space,
    pg_ctl,
    run_cmd,
    unique_name,
    write_space,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_storage_on_postgres_round_trips(pg_url):
    st = storage_from_url(pg_url)
    assert isinstance(st, RetryingRDBStorage)
    name = unique_name("pg_roundtrip")
    study = optuna.create_study(storage=st, study_name=name, directions=["minimize", "minimize"])
    t = study.ask()
    t.suggest_int("max_num_seqs", 8, 64)
    study.tell(t, [1.0, 2.0])
    again = optuna.load_study(study_name=name, storage=storage_from_url(pg_url))
    assert [x.values for x in again.trials] == [[1.0, 2.0]]


def test_storage_calls_survive_a_restart(pg_url):
    """Direct storage calls during a restart block and then succeed; none is lost."""
    st = storage_from_url(pg_url)
    name = unique_name("pg_restart_calls")
    study = optuna.create_study(storage=st, study_name=name, directions=["minimize"])
    errors: list[BaseException] = []
    told: list[int] = []

    def work() -> None:
        try:
            for i in range(40):
                t = study.ask()
                t.set_user_attr("i", i)
                study.tell(t, float(i))
                told.append(t.number)
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    th = threading.Thread(target=work)
    th.start()
    time.sleep(0.5)
    pg_ctl("restart", "-m", "fast", "-w")
    th.join(timeout=300)
    assert not th.is_alive()
    assert not errors, repr(errors[0])
    trials = optuna.load_study(study_name=name, storage=pg_url).trials
    assert [t.number for t in trials if t.state == TrialState.COMPLETE] == told
    assert len(told) == 40


def test_transient_errors_are_recognised_through_optunas_wrapper():
    import sqlalchemy.exc
    from optuna.exceptions import StorageInternalError

    try:
        try:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        except sqlalchemy.exc.OperationalError as inner:
            raise StorageInternalError("An exception is raised during the commit.") from inner
    except StorageInternalError as e:
        assert is_transient(e)
    assert not is_transient(ValueError("bad value"))


def test_unreachable_server_is_one_line_without_password(pg_url):
    from autotune.errors import UserError

    url = pg_url.rsplit(":", 1)[0] + ":1/autotune"  # same credentials, a port nothing listens on
    with pytest.raises(UserError) as e:
        storage_from_url(url, retries=2)
    msg = str(e.value)
    assert "unreachable" in msg and "\n" not in msg
    password = pg_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert password not in msg and mask_url(url) in msg


def _wait_for(pred, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.time() + timeout
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"driver exited early ({what}): {proc.stderr.read()[-3000:] if proc.stderr else ''}")
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_two_drivers_share_one_study(ray_cluster, pg_url, pg_mlflow_url, tmp_path):
    """Two `autotune run` on one study: every trial once in Optuna and once in MLflow."""
    name = unique_name("pg_coop")
    target = 12
    # ${VAR} keeps the password out of the file, as users are told to do.
    # Trials slow enough (1.5 s) that the second driver, starting on a loaded machine, joins
    # while search trials remain; confirmation runs off: this test is about sharing the search.
    space = write_space(tmp_path / "space.yaml", noop_space(
        name, target, delay_s=1.5, storage="${AUTOTUNE_TEST_PG_URL}", mlflow="${AUTOTUNE_TEST_PG_MLFLOW_URL}",
        workers=1, confirm={"finalists": 0}))
    env = child_env()
    a = subprocess.Popen(run_cmd(space, tmp_path / "a", ray_cluster), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    # The second driver joins once the first has created the study and started trials,
    # as a user scaling out onto a second node would.
    _wait_for(lambda: len(complete_values(pg_url, name)) >= 1, 180, a, "the first driver's first trial")
    b = subprocess.Popen(run_cmd(space, tmp_path / "b", ray_cluster), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    outs = [p.communicate(timeout=300) for p in (a, b)]
    assert a.returncode == 0, outs[0][1][-3000:]
    assert b.returncode == 0, outs[1][1][-3000:]

    study = load(pg_url, name)
    assert study is not None
    trials = study.get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    launched = launched_complete(study)
    # Each driver stops when the shared count reaches the target; trials already running
    # on the other driver may finish after that, so the total can exceed it by at most
    # the other driver's worker count (1 here).
    assert target <= len(launched) <= target + 1
    owners = Counter((owner_of(t) or "").split(":")[1] for t in launched)
    assert len(owners) == 2, f"both drivers must have run trials: {owners}"
    # No config measured twice by accident: only the warm-start baseline is enqueued and it ran once.
    assert sum(1 for t in launched if t.user_attrs.get("role") == "baseline") == 1

    numbers = mlflow_trial_numbers(pg_mlflow_url, name)
    dupes = [n for n, c in Counter(numbers).items() if c > 1]
    assert not dupes, f"trials logged to MLflow more than once: {dupes}"
    assert set(numbers) == finished_numbers(study)


def test_driver_survives_a_database_restart(ray_cluster, pg_url, tmp_path):
    name = unique_name("pg_restart")
    target = 10
    space = write_space(tmp_path / "space.yaml", noop_space(name, target, delay_s=0.5, storage="${AUTOTUNE_TEST_PG_URL}"))
    out = tmp_path / "run"
    proc = subprocess.Popen(run_cmd(space, out, ray_cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env())
    _wait_for(lambda: len(complete_values(pg_url, name)) >= 3, 180, proc, "three trials before the restart")
    before = complete_values(pg_url, name)
    # Stop, stay down a few seconds (every in-flight storage call fails), start again.
    pg_ctl("stop", "-m", "fast", "-w")
    time.sleep(3)
    pg_ctl("start", "-w")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr

    after = complete_values(pg_url, name)
    for n, v in before.items():
        assert after[n] == v
    study = load(pg_url, name)
    assert len(launched_complete(study)) == target
    numbers = mlflow_trial_numbers(f"sqlite:///{out / 'mlflow.db'}", name)
    assert sorted(numbers) == sorted(finished_numbers(study))
