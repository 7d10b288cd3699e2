"""Helpers for the reliability suite: PostgreSQL, spaces on disk, store inspection."""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotune.study.storages.recovery import RERUN_OF_LAUNCHED_ATTR
from tests.conftest import AUTOTUNE, sqlite_study_ready

DATA = Path(__file__).resolve().parents[1] / "data"

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The test server's URL; skip without one, unless CI says it must be there.

    Held under an exclusive lock on a file beside the server's data: two tests restart the
    server, so no two PostgreSQL tests run at once, in this session's xdist workers
    (tests/conftest.py also keeps them on one) or in another session on this machine."""
    url = os.environ.get("AUTOTUNE_TEST_PG_URL")
    if not url:
        if os.environ.get("AUTOTUNE_REQUIRE_POSTGRES") == "1":
            pytest.fail("AUTOTUNE_REQUIRE_POSTGRES=1 but AUTOTUNE_TEST_PG_URL is unset; source scripts/start_postgres.sh")
        pytest.skip("no PostgreSQL: source scripts/start_postgres.sh to run the postgres tests")
    data = os.environ.get("AUTOTUNE_TEST_PG_DATA")
    lock = Path(data).parent / "tests.lock" if data else Path(tempfile.gettempdir()) / "autotune-pg-tests.lock"
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield url


@pytest.fixture
def pg_mlflow_url(pg_url: str) -> str:
    url = os.environ.get("AUTOTUNE_TEST_PG_MLFLOW_URL")
    if not url:
        pytest.skip("AUTOTUNE_TEST_PG_MLFLOW_URL unset (start_postgres.sh exports it)")
    return url


def pg_ctl(action: str, *args: str) -> None:
    """``pg_ctl ACTION`` on the test server's data dir, as the OS user the server runs as."""
    ctl, data = os.environ["AUTOTUNE_TEST_PG_CTL"], os.environ["AUTOTUNE_TEST_PG_DATA"]
    log = Path(data).parent / "server.log"
    cmd = [ctl, "-D", data, action, *args]
    if action in ("start", "restart"):
        # With a log file the server does not hold our pipes open (which would hang run()).
        cmd += ["-l", str(log)]
    user = os.environ.get("AUTOTUNE_TEST_PG_OS_USER")
    if os.geteuid() == 0 and user and user != "root":
        cmd = ["runuser", "-u", user, "--", *cmd]
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def noop_space(
    name: str, trials: int, delay_s: float = 0.0, storage: str | None = None, mlflow: str | None = None,
    env: dict[str, str] | None = None, workers: int = 2, gpus_per_worker: int = 2, **study: Any,
) -> dict[str, Any]:
    """A small no-op space; ``delay_s`` makes each trial sleep (for kills)."""
    e: dict[str, str] = {"NOOP_DELAY_S": str(delay_s)} if delay_s else {}
    e.update(env or {})
    st: dict[str, Any] = {"name": name, "trials": trials, "sampler": "random", **study}
    if storage:
        st["storage"] = storage
    if mlflow:
        st["mlflow_tracking_uri"] = mlflow
    return {
        "version": 1,
        "engine": {"backend": "noop", "model": "tiny/noop", "gpu": "A100-80GB",
                   "flags": {"tensor_parallel_size": 2, "max_model_len": 4096}, "env": e},
        "params": {
            "gpu_memory_utilization": {"type": "float", "low": 0.80, "high": 0.95, "step": 0.01},
            "max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True},
            "enable_prefix_caching": {"type": "bool"},
        },
        "workload": {"num_requests": 20, "concurrency": 4},
        "study": st,
        "cluster": {"gpus_per_worker": gpus_per_worker, "workers": workers},
    }


def write_space(path: Path, data: dict[str, Any] | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def run_cmd(space: Path, out: Path, address: str, *extra: str) -> list[str]:
    return [AUTOTUNE, "run", "--space", str(space), "--out", str(out), "--address", address, "--quiet", *extra]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    env.update(extra)
    return env


def load(storage: str, name: str) -> optuna.Study | None:
    if storage.startswith("sqlite:///") and not sqlite_study_ready(Path(storage.removeprefix("sqlite:///"))):
        return None  # not created yet; opening it here would race the driver creating it
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None


def complete_values(storage: str, name: str) -> dict[int, tuple[float, ...]]:
    s = load(storage, name)
    if s is None:
        return {}
    return {t.number: tuple(t.values) for t in s.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE}


def launched_complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False)
            if t.state == TrialState.COMPLETE and t.user_attrs.get("role") != "rejected"]


def mlflow_trial_numbers(tracking_uri: str, experiment: str) -> list[int]:
    """Trial numbers of the experiment's active child runs (duplicates kept, to be caught)."""
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        return []
    numbers: list[int] = []
    token = None
    while True:
        page = c.search_runs([exp.experiment_id], filter_string="tags.`autotune.kind` = 'trial'",
                             max_results=1000, page_token=token)
        numbers += [int(r.data.tags["autotune.trial_number"]) for r in page]
        token = page.token
        if not token:
            return numbers


def finished_numbers(study: optuna.Study) -> set[int]:
    return {t.number for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.FAIL)}


def check_study(storage: str, name: str, out: Path, target: int, kept: dict[int, tuple[float, ...]]) -> optuna.Study:
    """What must hold after kills, resumes and lost workers: nothing lost, re-run once, logged once."""
    study = load(storage, name)
    assert study is not None
    trials = study.get_trials(deepcopy=False)
    # Nothing left dangling, and the study reached its count exactly (one driver: no overshoot).
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert len(launched_complete(study)) == target
    # Every trial that was COMPLETE at some kill is still COMPLETE with the same values.
    now = {t.number: tuple(t.values) for t in trials if t.state == TrialState.COMPLETE}
    lost = {n: v for n, v in kept.items() if now.get(n) != v}
    assert not lost, f"completed trials lost or changed: {lost}"
    # Each failed trial was re-run exactly once with the same params; nothing else repeats.
    failed = [t for t in trials if t.state == TrialState.FAIL]
    reruns = Counter(t.user_attrs["requeued_from"] for t in trials if "requeued_from" in t.user_attrs)
    assert sorted(reruns) == sorted(t.number for t in failed)
    assert all(c == 1 for c in reruns.values()), reruns
    by_number = {t.number: t for t in trials}
    for t in trials:
        if "requeued_from" in t.user_attrs:
            # What the failed trial measured (a launched config) or, killed before launch, what
            # it was enqueued with: values a sampler drew for a trial killed mid-suggestion are
            # half a sample and are drawn afresh (test_recovery pins that rule).
            orig = by_number[t.user_attrs["requeued_from"]]
            launched = bool(t.user_attrs.get(RERUN_OF_LAUNCHED_ATTR))
            assert not launched or orig.user_attrs.get("flags"), (orig.number, t.number)  # launched ones stored flags
            meant = {**orig.system_attrs.get("fixed_params", {}), **(orig.params if launched else {})}
            # (A re-run itself killed mid-suggestion has only some params; what it was
            # enqueued with, its fixed params, is what it would have measured.)
            got = {**t.system_attrs.get("fixed_params", {}), **t.params}
            assert {k: got.get(k) for k in meant} == meant, (orig.number, t.number)
            # A re-run of a launched config is measured (never rejected by the memory model);
            # one killed before its config was let through is a fresh proposal.
            assert launched or not orig.user_attrs.get("metrics"), (orig.number, t.number)  # it was measured
            allowed = {orig.user_attrs.get("role", "search")} | (set() if launched else {"rejected"})
            assert t.user_attrs.get("role", "search") in allowed, (orig.number, t.number, t.user_attrs.get("role"))
    # The trial files of every launched trial are on disk (written before tell).
    for t in launched_complete(study):
        assert (out / "trials" / f"{t.number:05d}" / "result.json").exists(), t.number
    # One MLflow child run per finished Optuna trial, none twice, including after resumes.
    numbers = mlflow_trial_numbers(f"sqlite:///{out / 'mlflow.db'}", name)
    dupes = sorted(n for n, c in Counter(numbers).items() if c > 1)
    assert not dupes, f"trials with more than one MLflow child run: {dupes}"
    assert set(numbers) == finished_numbers(study)
    return study
