"""A full disk at any write of a study: one line, exit 2, and a resume that loses nothing.

Two ways to fill a disk:

- **Injected** (needs no root, so it runs in CI everywhere): ``ENOSPC`` raised at one write of an in-process
  `autotune run` (no-op backend, on the session's Ray), as the real store raises it: SQLite's
  "database or disk is full" through SQLAlchemy and Optuna for Optuna's tell, through
  MLflow's store for a trial's metrics, the OS's ``OSError(ENOSPC)`` for an artifact copy and
  for the trial files. A fake, because which write a real full disk hits first cannot be
  chosen; each case picks one.
- **Real** (root only: it mounts a 2 MB tmpfs, the issue's repro): the study fills it.

Each is then resumed with room to spare and must end as if nothing happened: every trial
once in Optuna, exactly one finished MLflow child run with its metrics per finished trial,
no run left RUNNING (the dead invocation is KILLED), completed trials unchanged.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from optuna.exceptions import StorageInternalError

from tests.conftest import run_cli
from tests.reliability.conftest import (
    check_study,
    child_env,
    complete_values,
    noop_space,
    run_cmd,
    write_space,
)

pytestmark = pytest.mark.slow  # whole `autotune run`s on Ray, ~20 s a case: not in the quick loop; CI runs it

TARGET = 6
ONE_LINE = "error: no space left on device writing "


def _sqlite_full(statement: str) -> sqlalchemy.exc.OperationalError:
    """What SQLAlchemy raises when SQLite cannot grow its file (SQLITE_FULL)."""
    return sqlalchemy.exc.OperationalError(statement, {}, sqlite3.OperationalError("database or disk is full"))


def _enospc(path: str) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def _on_call(n: int, fault: Callable[..., BaseException], real: Callable[..., Any],
             when: Callable[..., bool] = lambda *a, **k: True) -> Callable[..., Any]:
    """``real``, except that its ``n``-th call for which ``when`` holds raises ``fault(...)``."""
    seen = [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        if when(*args, **kwargs):
            seen[0] += 1
            if seen[0] == n:
                raise fault(*args, **kwargs)
        return real(*args, **kwargs)

    return call


def _tell_fails(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """Optuna's tell of the 3rd finished trial: the trial stays RUNNING in storage."""
    from optuna.trial import TrialState

    from autotune.study.storages.storage import RetryingRDBStorage

    def fault(*_: Any, **__: Any) -> BaseException:
        err = StorageInternalError("An exception is raised during the commit. This typically happens due to "
                                   "invalid data in the commit, e.g. exceeding max length.")
        err.__cause__ = _sqlite_full("UPDATE trials SET state=?")
        return err

    real = RetryingRDBStorage.set_trial_state_values
    monkeypatch.setattr(RetryingRDBStorage, "set_trial_state_values",
                        _on_call(3, fault, real, lambda self, tid, state, *a, **k: state == TrialState.COMPLETE))


def _mlflow_metrics_fail(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """The 3rd child run's params and metrics: the run is created, then left RUNNING, empty."""
    def fault(*_: Any, **__: Any) -> BaseException:
        err = MlflowException(str(_sqlite_full("INSERT INTO metrics")))
        err.__cause__ = _sqlite_full("INSERT INTO metrics")
        return err

    real = MlflowClient.log_batch
    monkeypatch.setattr(MlflowClient, "log_batch",
                        _on_call(3, fault, real, lambda self, run_id, metrics=(), params=(), tags=(), **k:
                                 bool(metrics) and bool(params)))  # a child run's one batch


def _artifact_fails(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """The 8th artifact copied into the run directory's artifact store (the 3rd trial's 2nd file)."""
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    real = LocalArtifactRepository.log_artifact
    monkeypatch.setattr(LocalArtifactRepository, "log_artifact",
                        _on_call(8, lambda self, local_file, *a, **k: _enospc(str(Path(self.artifact_dir) /
                                                                                Path(local_file).name)), real))


def _trial_files_fail(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """The 3rd trial's files, half written (before Optuna is told)."""
    from autotune.study.loop import trial_files

    real = trial_files.write_trial_files

    def half(trial_dir: Path, *_: Any, **__: Any) -> BaseException:
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "flags.yaml").write_text("gpu_memory_")  # as far as the disk let it get
        return _enospc(str(trial_dir / "flags.yaml"))

    monkeypatch.setattr(trial_files, "write_trial_files", _on_call(3, half, real))


FAULTS = {"optuna-tell": _tell_fails, "mlflow-metrics": _mlflow_metrics_fail, "artifact-copy": _artifact_fails,
          "trial-files": _trial_files_fail}


def check_mlflow_repaired(out: Path, name: str, study: Any, first_invocation: tuple[str, ...]) -> None:
    """Every finished trial has exactly one finished child run, with its metrics; nothing is
    left RUNNING (the stopped driver's invocation is one of ``first_invocation``: FAILED when
    it could still say so, KILLED by the resume when the disk let it write nothing); what was
    discarded is deleted, not shown."""
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=5000)
    trials = [r for r in runs if r.data.tags.get("autotune.kind") == "trial"]
    by_number = Counter(int(r.data.tags["autotune.trial_number"]) for r in trials)
    finished = {t.number: t for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    assert set(by_number) == set(finished) and set(by_number.values()) == {1}, by_number
    for r in trials:
        assert r.info.status in ("FINISHED", "FAILED"), (r.data.tags["autotune.trial_number"], r.info.status)
        t = finished[int(r.data.tags["autotune.trial_number"])]
        if t.values:  # a COMPLETE trial: the values Optuna holds are the run's objectives
            assert [v for k, v in sorted(r.data.metrics.items()) if k.startswith("objective.")], r.data.metrics
            assert "trial_elapsed_s" in r.data.metrics
    invocations = sorted((r for r in runs if r.data.tags.get("autotune.kind") == "invocation"),
                         key=lambda r: r.info.start_time)
    assert len(invocations) == 2 and invocations[1].info.status == "FINISHED"
    assert invocations[0].info.status in first_invocation
    # The discarded half-logged run's artifacts went with it.
    deleted = client.search_runs([exp.experiment_id], run_view_type=ViewType.DELETED_ONLY)
    for r in deleted:
        assert r.info.artifact_uri.startswith((out / "mlartifacts").resolve().as_uri())
        assert not (out / "mlartifacts" / r.info.run_id).exists()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_full_disk_is_one_line_and_a_resume_loses_nothing(fault, ray_cluster, tmp_path, monkeypatch, capsys):
    name = f"full_{fault.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    space = write_space(tmp_path / "space.yaml", noop_space(name, TARGET, workers=2, confirm={"finalists": 0}))
    out = tmp_path / "run"
    args = ["run", "--space", str(space), "--out", str(out), "--address", ray_cluster, "--quiet"]
    with monkeypatch.context() as m:
        FAULTS[fault](m, out)
        code, _, err = run_cli(args, capsys)
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note:")]  # a budget note may precede
    assert len(lines) == 1 and lines[0].startswith(ONE_LINE), err[-3000:]
    storage = f"sqlite:///{out / 'optuna.db'}"
    kept = complete_values(storage, name)
    assert kept, "the fault hit before any trial completed: it tests nothing"

    # The resume runs in this same process: the first driver's pid is alive, so say it is gone,
    # as it would be (its trials are orphans, its invocation run dead).
    from autotune.study.storages import recovery

    real_alive = recovery._pid_alive
    monkeypatch.setattr(recovery, "_pid_alive", lambda pid: pid != os.getpid() and real_alive(pid))
    code, _, err = run_cli(args, capsys)
    assert code == 0, err[-3000:]
    study = check_study(storage, name, out, TARGET, kept)
    check_mlflow_repaired(out, name, study, ("FAILED",))


# --- a real full filesystem -----------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 2 MB tmpfs (the size the issue's repro filled), grown to 64 MB by calling the result."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root; the injected cases cover CI without it")
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=30)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        pytest.skip(f"cannot mount a tmpfs here ({e}); the injected cases cover CI without it")

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True, capture_output=True, timeout=30)

    yield mnt, grow
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def test_a_real_full_filesystem_then_room_resumes_with_nothing_lost(ray_cluster, small_tmpfs, tmp_path):
    mnt, grow = small_tmpfs
    name = "realfull"
    target = 30  # more than 2 MB of trial files, artifacts and databases
    space = write_space(tmp_path / "space.yaml", noop_space(name, target, workers=2, confirm={"finalists": 0}))
    out = mnt / "run"
    full = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert full.returncode == 2, full.stderr[-3000:]
    errors = [ln for ln in full.stderr.splitlines() if not ln.startswith(("20", "note:"))]  # Ray's dated notices
    assert len(errors) == 1 and errors[0] == (
        f"{ONE_LINE}{out}; free space there and run the same command again: the study resumes where it stopped "
        "(completed trials are kept, MLflow is repaired)"), full.stderr[-3000:]
    kept = complete_values(f"sqlite:///{out / 'optuna.db'}", name)

    grow()
    done = subprocess.run(run_cmd(space, out, ray_cluster), capture_output=True, text=True, timeout=300,
                          env=child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    study = check_study(f"sqlite:///{out / 'optuna.db'}", name, out, target, kept)
    check_mlflow_repaired(out, name, study, ("FAILED", "KILLED"))
