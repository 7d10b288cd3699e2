"""Live progress inside trials: events folded on the worker, polled across Ray, shown two ways.

The trials here are the noop backend's with ``NOOP_DELAY_S``: they take seconds and emit a
server start, the server ready and one event per request, so a test sees a trial in flight.
The vLLM backend's own events are checked against its result on the fake vLLM server (a CUDA
OOM while serving cannot happen on vLLM's CPU build).
"""

from __future__ import annotations

import io
import re

import numpy as np
import optuna
import pytest
from rich.console import Console

from autotune.backends.base import Phase, TrialProgress
from autotune.backends.vllm import VllmBackend
from autotune.results import RequestStatus
from autotune.space.schema import SearchSpace
from autotune.study.display.progress import Progress, describe, duration, human
from autotune.study.loop.callbacks import Callback, StudyContext, Tally
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.workers.pool import WorkerPool
from autotune.workers.progress import ProgressTracker
from tests.fakes.helpers import fake_request

optuna.logging.set_verbosity(optuna.logging.WARNING)

# A float that printing naively shows as 0.9199999999999999 (0.85 + 7 * 0.01, as a stepped range makes).
UGLY = 0.85 + 7 * 0.01


def slow_noop_space(delay_s: float = 3.0, trials: int = 3, requests: int = 8) -> SearchSpace:
    return SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "noop", "model": "tiny/noop", "gpu": "A100-80GB",
                   "flags": {"tensor_parallel_size": 2, "max_model_len": 4096},
                   "env": {"NOOP_DELAY_S": str(delay_s)}},
        "params": {"gpu_memory_utilization": {"type": "float", "low": 0.80, "high": 0.95, "step": 0.01},
                   "max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True}},
        "workload": {"num_requests": requests, "concurrency": 4},
        "study": {"name": "progress", "trials": trials, "sampler": "random",
                  "strategy": {"warm_start": False, "early_stop": False}},
        "cluster": {"gpus_per_worker": 2, "workers": 2},
    })


# ---- the worker's fold ---------------------------------------------------------------------


def test_tracker_folds_events_into_a_snapshot():
    t = [100.0]
    tr = ProgressTracker(clock=lambda: t[0])
    assert tr.snapshot() is None  # no trial yet
    tr.begin(7, total=10)
    assert tr.snapshot().phase == Phase.DISPATCHED
    tr.event("loading_weights", {})
    assert tr.snapshot().phase == Phase.LOADING_WEIGHTS
    tr.event("server_started", {"start": 0})
    assert tr.snapshot().phase == Phase.STARTING
    tr.event("server_ready", {"start": 0, "startup_s": 3.0})
    for i, e2e in enumerate([1.0, 2.0, 3.0]):
        tr.event("request_done", {"index": i, "ok": True, "e2e_s": e2e})
    tr.event("request_done", {"index": 3, "ok": False, "e2e_s": None})
    tr.event("engine_died", {"start": 0, "failure_class": "runtime_oom", "casualties": 2})
    tr.event("server_started", {"start": 1})
    tr.event("some_future_event", {"x": 1})  # ignored
    t[0] = 161.5
    s = tr.snapshot()
    assert s == TrialProgress(7, Phase.RESTARTING, done=6, total=10, ooms=2, restarts=1,
                              p99_s=pytest.approx(float(np.percentile([1.0, 2.0, 3.0], 99))), elapsed_s=61.5)
    tr.event("engine_died", {"start": 1, "failure_class": "crash", "casualties": 1})
    assert tr.snapshot().ooms == 2 and tr.snapshot().done == 7  # a crash is not an OOM
    tr.end()
    assert tr.snapshot() is None
    tr.begin(8, total=5)  # a new trial starts from nothing
    assert tr.snapshot() == TrialProgress(8, Phase.DISPATCHED, 0, 5, 0, 0, None, 0.0)


def test_vllm_backend_events_add_up_to_its_result(tmp_path):
    """On the fake vLLM server (fake because a CUDA OOM while serving cannot happen on the CPU
    build): the snapshot at the end agrees with the trial's own records."""
    tracker = ProgressTracker()
    phases: list[Phase] = []

    def hook(name: str, info: dict) -> None:
        tracker.event(name, info)
        phases.append(tracker.snapshot().phase)

    backend = VllmBackend(hang_timeout_s=2.0, stop_grace_s=5.0, watch_interval_s=0.2, metrics_interval_s=0.2,
                          events=hook)
    req = fake_request(tmp_path, scenario="runtime_oom", fail_after=6, fail_starts=1, token_delay_s=0.01)
    tracker.begin(req.trial_number, req.workload.num_requests)
    try:
        res = backend.run_trial(req)
    finally:
        backend.close()
    s = tracker.snapshot()
    ok = [r.e2e_s for r in res.records if r.status == RequestStatus.OK]
    assert s.ooms == sum(r.status == RequestStatus.OOM for r in res.records) > 0
    assert s.restarts == res.extra["restarts"] == 1
    assert s.done == s.total == len(res.records)
    assert s.p99_s == pytest.approx(float(np.percentile(ok, 99)))
    seen = list(dict.fromkeys(phases))  # in order of first appearance
    assert seen == [Phase.LOADING_WEIGHTS, Phase.STARTING, Phase.BENCHMARK, Phase.RESTARTING]


# ---- formatting for people ------------------------------------------------------------------


def test_numbers_are_for_people():
    assert repr(UGLY) == "0.9199999999999999"
    assert human(UGLY) == "0.92" and human(UGLY, digits=6) == "0.92"
    assert human(0.9125, digits=6) == "0.9125"  # a flag keeps the digits it was set with
    assert human(4.2149) == "4.21" and human(123.4) == "123" and human(1234.7) == "1235"
    assert human(float("nan")) == "nan" and human(None) == "nan" and human(64) == "64" and human(True) == "True"
    assert [duration(s) for s in (0.4, 59.9, 125, 3725)] == ["0s", "59s", "2m05s", "1h02m"]


def test_describe_a_running_trial():
    p = TrialProgress(3, Phase.BENCHMARK, done=340, total=1000, ooms=3, restarts=1, p99_s=4.2149, elapsed_s=125.2)
    assert describe(p) == "benchmark 340 of 1000, OOMs 3, restarts 1, p99 4.21 s (2m05s)"
    starting = TrialProgress(3, Phase.STARTING, 0, 1000, 0, 0, None, 42.0)
    assert describe(starting) == "starting the server, OOMs 0, restarts 0 (42s)"
    # Before any server (or on the simulator) there are no OOMs or restarts to count.
    assert describe(TrialProgress(3, Phase.LOADING_WEIGHTS, 0, 1000, 0, 0, None, 5.0)) == "loading weights (5s)"
    assert describe(TrialProgress(3, Phase.SIMULATING, 0, 1000, 0, 0, None, 0.3)) == "simulating (0s)"


def test_plain_prints_changes_at_once_and_the_rest_at_most_every_interval():
    out = io.StringIO()
    now = [0.0]
    prog = Progress(mode="plain", console=Console(file=out, width=200), plain_every_s=30.0, clock=lambda: now[0])
    space = slow_noop_space()
    study = optuna.create_study(directions=["minimize", "minimize"])
    prog.on_study_start(StudyContext(study, space, 3, Tally(), None, None))  # type: ignore[arg-type]
    from autotune.study.trials.record import State, TrialRecord

    prog.on_trial_start(TrialRecord(5, State.RUNNING, params={"gpu_memory_utilization": UGLY, "max_num_seqs": 64}))

    def snap(phase: Phase, done: int, ooms: int = 0) -> TrialProgress:
        return TrialProgress(5, phase, done, 100, ooms, 0, 1.0 if done else None, now[0])

    prog.on_trial_progress(5, snap(Phase.STARTING, 0))
    now[0] = 1.0
    prog.on_trial_progress(5, snap(Phase.BENCHMARK, 1))  # phase changed: printed
    now[0] = 2.0
    prog.on_trial_progress(5, snap(Phase.BENCHMARK, 2))  # same headline, 1 s later: not printed
    now[0] = 3.0
    prog.on_trial_progress(5, snap(Phase.BENCHMARK, 3, ooms=1))  # an OOM: printed
    now[0] = 33.0
    prog.on_trial_progress(5, snap(Phase.BENCHMARK, 40, ooms=1))  # 30 s on: printed
    prog.on_trial_progress(6, snap(Phase.BENCHMARK, 41))  # a trial not started here: ignored
    lines = out.getvalue().splitlines()
    assert lines[1] == "trial 5 started: gpu_memory_utilization=0.92 max_num_seqs=64"
    assert lines[2:] == [
        "  trial 5: starting the server, OOMs 0, restarts 0 (0s)",
        "  trial 5: benchmark 1 of 100, OOMs 0, restarts 0, p99 1 s (1s)",
        "  trial 5: benchmark 3 of 100, OOMs 1, restarts 0, p99 1 s (3s)",
        "  trial 5: benchmark 40 of 100, OOMs 1, restarts 0, p99 1 s (33s)",
    ]


# ---- through the trial loop and real Ray workers ------------------------------------------


def _run_loop(progress: Callback, space: SearchSpace) -> None:
    study = open_study(space, "progress", None, make_sampler("random", space, 0)).study
    pool = WorkerPool("noop", 2, 2, 0.5)
    loop = TrialLoop(study, space, pool, target=space.study.trials, seed=0, callbacks=[progress])
    loop.run()


def _first(lines: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(lines) if re.search(pattern, line))


def _in_trial_before_end(lines: list[str], update: str) -> list[int]:
    """Trials with an in-flight line matching ``update`` before their end line."""
    shown = []
    for n in range(3):
        end = _first(lines, rf"\] trial {n} (\[\w+\] )?complete")
        if any(re.search(rf"trial {n}: {update}", line) for line in lines[:end]):
            shown.append(n)
    return shown


def test_plain_mode_shows_trials_in_flight(ray_cluster):
    out = io.StringIO()
    _run_loop(Progress(mode="plain", console=Console(file=out, width=200)), slow_noop_space())
    lines = out.getvalue().splitlines()
    assert not re.search(r"\d\.\d{7,}", out.getvalue()), "a number printed with float noise"
    assert "\x1b[" not in out.getvalue()  # plain: no terminal control codes
    for n in range(3):
        assert _first(lines, rf"^trial {n} started: gpu_memory_utilization=") < _first(lines, rf"\] trial {n} complete")
    # Every trial takes 3 s and the pool polls every 0.5 s: the benchmark shows up in flight.
    assert _in_trial_before_end(lines, r"benchmark \d+ of 8, OOMs 0, restarts 0")


def test_rich_mode_updates_running_trials_in_place(ray_cluster):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    _run_loop(Progress(mode="rich", console=console), slow_noop_space())
    raw = out.getvalue()
    # Live redraws its region: cursor up and erase line between updates.
    assert "\x1b[1A" in raw and "\x1b[2K" in raw
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw).replace("\r", "\n")
    lines = text.splitlines()
    assert _in_trial_before_end(lines, r"benchmark \d+ of 8, OOMs 0, restarts 0")
    assert not re.search(r"\d\.\d{7,}", text)
    # The permanent lines are all there, once each.
    for n in range(3):
        assert sum(bool(re.search(rf"\] trial {n} complete", line)) for line in lines) == 1
        assert sum(line.startswith(f"trial {n} started:") for line in lines) == 1


def test_snapshots_stop_once_a_trial_is_measured(ray_cluster):
    """No progress for a trial arrives after the loop took its result."""
    events: list[tuple[str, int]] = []

    class Order(Callback):
        def on_trial_progress(self, number: int, progress: TrialProgress) -> None:
            events.append(("progress", number))

        def on_trial_measured(self, record, result) -> None:
            events.append(("measured", record.number))

    _run_loop(Order(), slow_noop_space(delay_s=2.0))
    for n in range(3):
        measured = events.index(("measured", n))
        assert ("progress", n) in events[:measured]
        assert ("progress", n) not in events[measured:]


def test_no_polling_without_a_consumer(ray_cluster, monkeypatch):
    """A pool nobody reads progress from never asks its workers for it."""
    import ray

    from autotune.backends.base import ServerSpec, TrialRequest
    from autotune.workload import WorkloadSpec

    pool = WorkerPool("noop", 1, 2, 0.5)
    pool.start()
    try:
        polled = []
        monkeypatch.setattr(WorkerPool, "_poll_progress", lambda self: polled.append(1))
        wid = pool.idle_workers()[0]
        pool.submit(wid, "k", TrialRequest(1, ServerSpec("tiny/noop", env={"NOOP_DELAY_S": "1.5"}), {},
                                           WorkloadSpec(num_requests=4, concurrency=2)))
        done = []
        while pool.running:
            done += pool.wait(timeout=10)
        assert [d.key for d in done] == ["k"] and done[0].result is not None and not polled
        assert ray.get(pool.actor(wid).progress.remote()) is None  # between trials
    finally:
        pool.shutdown()


def test_loop_forwards_progress_only_for_its_running_trials():
    space = slow_noop_space()
    study = open_study(space, "fwd", None, make_sampler("random", space, 0)).study
    got: list[int] = []

    class Sink(Callback):
        def on_trial_progress(self, number: int, progress: TrialProgress) -> None:
            got.append(number)

    loop = TrialLoop(study, space, pool=None, target=1, seed=0,  # type: ignore[arg-type]
                     callbacks=[Sink()])
    loop.trial_progress(4, TrialProgress(4, Phase.BENCHMARK, 1, 8, 0, 0, None, 1.0))
    assert got == []  # not one of this loop's running trials

