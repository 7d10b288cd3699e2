"""The trial loop with its inputs in hand: an in-memory study, an in-process pool, callbacks.

No Ray, no MLflow: the loop is given a pool that runs each trial's request through a
function at once, which is how it is meant to be embedded (the search benchmark does the
same on a simulated clock).
"""

from __future__ import annotations

import os
from typing import Any

import optuna
import pytest

from autotune.backends.base import TrialProgress, TrialRequest
from autotune.backends.sim import SimBackend
from autotune.results import FailureClass, RequestRecord, TrialResult, TrialStatus, startup_failure
from autotune.space.schema import SearchSpace
from autotune.study.loop.callbacks import Callback, StudyContext
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.proposal import server_spec
from autotune.study.search.samplers import make_sampler
from autotune.study.storages.storage import storage_from_url
from autotune.study.trials.objectives import objective_values, penalty
from autotune.study.trials.record import Role, State, TrialRecord
from tests.fakes.pools import InlinePool

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space(objectives: list[dict] | None = None, **study: Any) -> SearchSpace:
    return SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "noop", "model": "m", "flags": {"max_model_len": 4096}},
        "params": {"max_num_seqs": {"type": "int", "low": 16, "high": 256},
                   "max_num_batched_tokens": {"type": "int", "low": 1024, "high": 8192, "step": 1024}},
        "constraints": [{"left": "max_num_batched_tokens", "op": ">=", "right": "max_model_len", "action": "repair"}],
        "workload": {"num_requests": 20, "request_timeout_s": 300},
        "objectives": objectives or [{"metric": "oom_per_1k"}, {"metric": "p99_e2e_s"}],
        "study": {"sampler": "random", "strategy": {"prune_startup_failures": False, "warm_start": False,
                                                    "early_stop": False}, **study},
    })


class Recorder(Callback):
    def __init__(self) -> None:
        self.events: list[tuple[str, int | str]] = []
        self.ended: list[TrialRecord] = []
        self.stored_when_measured: list[bool] = []

    def on_study_start(self, ctx: StudyContext) -> None:
        self.ctx = ctx
        self.events.append(("study_start", ctx.target))

    def on_trial_start(self, record: TrialRecord) -> None:
        self.events.append(("start", record.number))

    def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
        self.events.append(("measured", record.number))
        # Before tell: Optuna still holds the trial as RUNNING.
        self.stored_when_measured.append(self.ctx.study.trials[record.number].state == optuna.trial.TrialState.RUNNING)

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        self.events.append(("end", record.number))
        self.ended.append(record)

    def on_study_end(self, status: str) -> None:
        self.events.append(("study_end", status))


def _ok(request: TrialRequest) -> TrialResult:
    n = request.workload.num_requests
    return TrialResult(TrialStatus.OK, "inline", records=[RequestRecord(i, 0.0, 0.1, 1.0 + i / 100, 10, 10)
                                                          for i in range(n)], requests_issued=n, duration_s=2.0)


def _loop(space: SearchSpace, pool: InlinePool, target: int, callbacks=(), secrets=()) -> optuna.Study:
    study = open_study(space, "t", None, make_sampler("random", space, 0)).study
    TrialLoop(study, space, pool, target=target, seed=0, callbacks=callbacks, secrets=secrets).run()
    return study


def test_hooks_follow_the_crash_safety_order():
    rec = Recorder()
    _loop(_space(), InlinePool(_ok), target=3, callbacks=[rec])
    assert rec.events[0] == ("study_start", 3) and rec.events[-1] == ("study_end", "FINISHED")
    assert rec.events[1:-1] == [(k, n) for n in range(3) for k in ("start", "measured", "end")]
    assert rec.stored_when_measured == [True, True, True]  # files go in before tell
    assert all(r.state == State.COMPLETE for r in rec.ended)


def test_the_loop_hands_its_pool_a_progress_sink_only_when_a_callback_shows_progress():
    """Issue 22: the loop wires its progress hook through the pool's protocol (no one pokes
    an attribute of the pool), and only when a callback does something with progress: a
    pool given None never polls its workers."""
    quiet = InlinePool(_ok)
    _loop(_space(), quiet, target=1, callbacks=[Recorder()])
    assert quiet.sinks == [None]

    class Shows(Callback):
        def on_trial_progress(self, number: int, progress: TrialProgress) -> None:
            pass

    watched = InlinePool(_ok)
    _loop(_space(), watched, target=1, callbacks=[Recorder(), Shows()])
    assert len(watched.sinks) == 1 and watched.sinks[0] is not None
    assert isinstance(watched.sinks[0].__self__, TrialLoop) and watched.sinks[0].__name__ == "trial_progress"


def test_record_holds_the_flags_as_run_after_a_repair():
    rec = Recorder()
    pool = InlinePool(_ok)
    # Twelve sampled trials, as before confirmation runs existed (they would take the last six).
    study = _loop(_space(confirm={"finalists": 0}), pool, target=12, callbacks=[rec])
    for r, req in zip(rec.ended, pool.requests, strict=True):
        assert r.flags == req.flags and r.flags["max_num_batched_tokens"] >= 4096  # repaired up to max_model_len
        stored = TrialRecord.from_frozen(study.trials[r.number])
        assert stored.flags == r.flags and stored.params == study.trials[r.number].params
    assert any(r.params["max_num_batched_tokens"] < 4096 for r in rec.ended), "no sample needed a repair"


def test_a_startup_failure_gets_the_penalty_for_every_objective_whatever_its_class():
    """The simulator counts a startup OOM's requests as OOMs; real vLLM counts a startup
    crash's as errors (oom_per_1k 0). The vllm backend builds that result with
    results.startup_failure, as here; with feasibility constraints off, 0 OOMs would have
    put a dead server on the front."""
    sp = _space(objectives=[{"metric": "oom_per_1k"}, {"metric": "p99_e2e_s"},
                            {"metric": "output_tok_per_s", "direction": "maximize"}],
                strategy={"feasibility_constraints": False, "prune_startup_failures": False, "warm_start": False,
                          "early_stop": False})
    worst = [1000.0, 300.0, 0.0]
    assert [penalty(o.metric, sp) for o in sp.objectives] == worst
    crash = startup_failure("vllm", FailureClass.CRASH, "engine core died", [], 20)
    oom = startup_failure("sim", FailureClass.STARTUP_OOM, "no memory for KV cache", [], 20)
    assert crash.metrics()["oom_per_1k"] == 0.0 and oom.metrics()["oom_per_1k"] == 1000.0  # what backends count
    outcomes = [crash, oom]
    rec = Recorder()
    study = _loop(sp, InlinePool(lambda req: outcomes.pop(0) if outcomes else _ok(req)), target=3, callbacks=[rec])
    dead, dead_too, alive = rec.ended
    assert dead.values == worst and dead_too.values == worst
    assert not dead.started and dead.failure_class == "crash" and dead.metrics["oom_per_1k"] == 0.0  # as measured
    assert alive.values != worst and alive.started
    assert {t.number for t in study.best_trials} == {alive.number}


def test_a_real_simulator_startup_failure_measures_the_same():
    sp = SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "sim", "model": "Qwen/Qwen2.5-72B-Instruct", "gpu": "A100-80GB",
                   "flags": {"tensor_parallel_size": 2, "max_model_len": 8192}},
        "params": {"gpu_memory_utilization": {"type": "float", "low": 0.5, "high": 0.6}},  # bf16 weights do not fit
        "workload": {"num_requests": 20},
        "study": {"sampler": "random", "strategy": {"prune_startup_failures": False, "warm_start": False,
                                                    "feasibility_constraints": False}},
    })
    rec = Recorder()
    _loop(sp, InlinePool(SimBackend().run_trial), target=1, callbacks=[rec])
    (r,) = rec.ended
    assert not r.started and r.values == objective_values({}, False, sp) == [1000.0, sp.workload.request_timeout_s]


def test_worker_death_fails_and_requeues_the_same_config_once():
    calls = []

    def run(req: TrialRequest) -> TrialResult | str:
        calls.append(req.flags)
        return "worker 0 died: ActorDiedError: killed" if len(calls) == 1 else _ok(req)

    rec = Recorder()
    study = _loop(_space(), InlinePool(run), target=2, callbacks=[rec])
    failed = study.trials[0]
    assert failed.state == optuna.trial.TrialState.FAIL
    r0 = TrialRecord.from_frozen(failed)
    assert r0.state == State.FAILED and "worker 0 died" in r0.failure_reason and r0.failure_class == "driver"
    reruns = [TrialRecord.from_frozen(t) for t in study.trials if t.user_attrs.get("requeued_from") == 0]
    assert len(reruns) == 1 and reruns[0].params == r0.params and reruns[0].state == State.COMPLETE
    assert calls[1] == calls[0]  # the re-run measured the same flags
    assert rec.ended[0].state == State.FAILED


def test_secrets_are_scrubbed_before_any_callback_sees_them():
    secret = "hf_SECRETsecret123"

    def run(req: TrialRequest) -> TrialResult:
        r = startup_failure("vllm", FailureClass.CRASH, f"bad token {secret}", [f"log {secret}"], 5)
        r.artifacts.server_log = f"HF_TOKEN={secret}\n"
        return r

    seen: list[str] = []

    class Peek(Callback):
        def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
            seen.extend([record.failure_reason, result.failure_reason, *result.failure_evidence,
                         result.artifacts.server_log])

    study = _loop(_space(), InlinePool(run), target=1, callbacks=[Peek()], secrets=[secret])
    assert seen and not any(secret in s for s in seen)
    assert secret not in repr(study.trials[0].user_attrs)


def test_relative_engine_paths_become_absolute_without_following_symlinks(tmp_path, monkeypatch):
    """A venv's bin/python is a symlink to the base interpreter, which cannot import the
    venv's vLLM: the path must stay the symlink's."""
    real = tmp_path / "base" / "python3.11"
    real.parent.mkdir()
    real.write_text("")
    venv_bin = tmp_path / "work" / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(real)
    (tmp_path / "work" / "models" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    sp = SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "vllm", "model": "models/tiny", "python": ".venv/bin/python", "download_dir": "models"},
        "params": {"max_num_seqs": {"type": "int", "low": 1, "high": 8}},
    })
    s = server_spec(sp)
    assert s.python == os.path.join(str(tmp_path), "work", ".venv", "bin", "python")
    assert os.path.islink(s.python) and s.python != str(real)
    assert s.model == os.path.join(str(tmp_path), "work", "models", "tiny")
    assert s.download_dir == os.path.join(str(tmp_path), "work", "models")
    hub = sp.model_copy(update={"engine": sp.engine.model_copy(update={"model": "Qwen/Qwen2.5-72B-Instruct"})})
    assert server_spec(hub).model == "Qwen/Qwen2.5-72B-Instruct"  # not a local path: a hub id


def test_record_round_trips_through_optuna(tmp_path):
    storage = storage_from_url(f"sqlite:///{tmp_path / 'o.db'}")
    study = optuna.create_study(storage=storage, study_name="rt", directions=["minimize", "minimize"])
    r = TrialRecord(0, State.COMPLETE, Role.REFERENCE, "field-report", params={"max_num_seqs": 64},
                    flags={"max_num_seqs": 64, "max_model_len": 4096}, failure_class="runtime_oom",
                    failure_reason="CUDA out of memory", metrics={"oom_per_1k": 5.0, "p99_e2e_s": float("nan")},
                    values=[5.0, 300.0], constraints={"startup_ok": -1.0}, early_stopped=True, worker=3,
                    requeued_from=7, warnings=["flag x is not modelled"])
    study.add_trial(optuna.trial.create_trial(
        params=r.params, distributions={"max_num_seqs": optuna.distributions.IntDistribution(1, 256)},
        values=r.values, user_attrs=r.user_attrs(), constraints=r.constraints))
    back = TrialRecord.from_frozen(study.trials[0])
    for f in ("state", "role", "reference", "params", "flags", "failure_class", "failure_reason", "values",
              "constraints", "early_stopped", "worker", "requeued_from", "warnings"):
        assert getattr(back, f) == getattr(r, f), f
    assert back.metrics["oom_per_1k"] == 5.0 and back.metrics["p99_e2e_s"] != back.metrics["p99_e2e_s"]  # NaN kept
    assert back.started_at is not None and back.finished_at is not None and back.elapsed_s >= 0


@pytest.mark.parametrize(("reference", "role"), [("vllm-defaults", Role.BASELINE), ("field-report", Role.REFERENCE),
                                                  ("", Role.SEARCH)])
def test_a_rejected_trial_keeps_the_role_it_was_sampled_as(reference, role):
    r = TrialRecord(4, State.REJECTED, role, reference, flags={"max_num_seqs": 8}, failure_class="rejected",
                    failure_reason="predicted startup failure", started=False, values=[1000.0, 600.0])
    attrs = r.user_attrs()
    assert attrs["role"] == "rejected" and "metrics" not in attrs  # the stored format older readers know
    t = optuna.trial.create_trial(values=r.values, user_attrs=attrs)
    back = TrialRecord.from_frozen(t)
    assert back.state == State.REJECTED and back.role == role and not back.started and not back.launched
