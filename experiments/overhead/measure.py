"""Orchestration overhead per trial: ask, dispatch, tell, MLflow logging, on the no-op backend.

    .venv/bin/python experiments/overhead/measure.py --trials 500 --workers 8 --sampler random
    .venv/bin/python experiments/overhead/measure.py --trials 300 --workers 8 --sampler autotune

The no-op backend returns at once, so everything measured is the driver's own work. The
run is assembled like `autotune run` (autotune/service.py: SQLite Optuna storage, the Ray
worker pool, trial files and MLflow callbacks) and the trial loop runs unchanged; it is
timed through the loop's own seams, nothing is patched:

  dispatch  the worker pool's submit     (a wrapper pool: actor.run.remote)
  wait      the worker pool's wait       (ray.wait + ray.get; the no-op trial itself)
  files     the trial-files callback     (a wrapper callback)
  mlflow    the MLflow callback          (child run, params, metrics, artifacts)
  finalize  the MLflow callback at the end of the run (Pareto tags, plots), once

and the loop's own work between those events is attributed by what comes next (a marker
callback notes when each hook fires), so every second of the run lands in one column:

  ask       before a trial starts: storage count sync, study.ask, owner attr, suggest_*,
            constraints, flags/role attrs, the early-stop rule
  attrs     after a result is back and before the trial files: constraints and the
            record's attributes, one SQLite commit each
  tell      after the trial files, before on_trial_end: study.tell
  sync      before each wait: the loop's bookkeeping and heartbeats

Each event is attributed to the number of trials finished when it started, so the table
shows the cost per trial in windows (1-100, 101-250, ...) and whether it grows.
8 logical workers: a local Ray with num_gpus=8 (logical; none are real) and num_cpus=8,
gpus_per_worker=1, so the GPU placement path is the one real studies use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import optuna  # noqa: E402
import ray  # noqa: E402
import yaml  # noqa: E402

from autotune.backends.base import TrialRequest  # noqa: E402
from autotune.results import TrialResult  # noqa: E402
from autotune.rundir import RunDir  # noqa: E402
from autotune.space import SearchSpace, load_space  # noqa: E402
from autotune.study.loop.callbacks import Callback, StudyContext  # noqa: E402
from autotune.study.loop.driver import TrialLoop  # noqa: E402
from autotune.study.loop.opening import open_study  # noqa: E402
from autotune.study.loop.pool import FinishedTrial, WorkerPool  # noqa: E402
from autotune.study.loop.trial_files import TrialFiles  # noqa: E402
from autotune.study.search.samplers import make_sampler  # noqa: E402
from autotune.study.storages.storage import storage_from_url  # noqa: E402
from autotune.study.trials.record import State, TrialRecord  # noqa: E402
from autotune.tracking.callback import MlflowLogger  # noqa: E402
from autotune.workers.pool import WorkerPool as RayWorkerPool  # noqa: E402

PHASES = ["ask", "dispatch", "wait", "attrs", "files", "tell", "mlflow", "sync"]
# The loop's own work before an event, named by the event that ends it.
GAP_BEFORE = {"start": "ask", "dispatch": "ask", "measured": "attrs", "files": "attrs", "end": "tell",
              "mlflow": "tell", "wait": "sync"}


@dataclass
class Timeline:
    """Events (name, start, end, trials finished at start), in the order they happened."""

    events: list[tuple[str, float, float, int]] = field(default_factory=list)
    finished: int = 0

    def timed(self, name: str, fn: Any, *args: Any) -> Any:
        at, t0 = self.finished, time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.events.append((name, t0, time.perf_counter(), at))

    def mark(self, name: str) -> None:
        t = time.perf_counter()
        self.events.append((name, t, t, self.finished))


@dataclass
class TimedPool:
    """The Ray pool, its submit and wait timed."""

    inner: WorkerPool
    timeline: Timeline

    def set_progress_sink(self, sink: Any) -> None:
        self.inner.set_progress_sink(sink)

    def start(self) -> None:
        self.inner.start()

    def idle_workers(self) -> list[int]:
        return self.inner.idle_workers()

    @property
    def running(self) -> int:
        return self.inner.running

    def submit(self, worker_id: int, key: Any, request: TrialRequest) -> None:
        self.timeline.timed("dispatch", self.inner.submit, worker_id, key, request)

    def wait(self, timeout: float | None = None) -> Sequence[FinishedTrial]:
        return self.timeline.timed("wait", self.inner.wait, timeout)

    def shutdown(self) -> None:
        self.inner.shutdown()


class Marks(Callback):
    """Notes when each hook fires; counts finished trials. Goes first in the callback list."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    def on_trial_start(self, record: TrialRecord) -> None:
        self.timeline.mark("start")

    def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
        self.timeline.mark("measured")

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        self.timeline.mark("end")
        if record.state == State.COMPLETE:
            self.timeline.finished += 1


class Timed(Callback):
    """Another callback, passed every hook; the one that does its per-trial work is timed
    as ``name``, and its end of study as finalize."""

    def __init__(self, inner: Callback, hook: str, name: str, timeline: Timeline) -> None:
        self.inner, self.hook, self.name, self.timeline = inner, hook, name, timeline

    def on_study_start(self, ctx: StudyContext) -> None:
        self.inner.on_study_start(ctx)

    def on_notice(self, message: str) -> None:
        self.inner.on_notice(message)

    def on_trial_start(self, record: TrialRecord) -> None:
        self.inner.on_trial_start(record)

    def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
        self._call("on_trial_measured", record, result)

    def on_trial_end(self, record: TrialRecord, result: TrialResult | None) -> None:
        self._call("on_trial_end", record, result)

    def on_study_end(self, status: str) -> None:
        self.timeline.timed("finalize", self.inner.on_study_end, status)

    def _call(self, hook: str, *args: Any) -> None:
        fn = getattr(self.inner, hook)
        if hook == self.hook:
            self.timeline.timed(self.name, fn, *args)
        else:
            fn(*args)


def space_file(tmp: Path, trials: int, workers: int, sampler: str) -> Path:
    d = {
        "version": 1,
        "engine": {"backend": "noop", "model": "tiny/noop", "gpu": "A100-80GB",
                   "flags": {"tensor_parallel_size": 1, "max_model_len": 4096}},
        "params": {
            "gpu_memory_utilization": {"type": "float", "low": 0.80, "high": 0.95, "step": 0.01},
            "max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True},
            "max_num_batched_tokens": {"type": "int", "low": 1024, "high": 8192, "step": 1024},
            "enable_prefix_caching": {"type": "bool"},
            "enable_chunked_prefill": {"type": "bool"},
            "block_size": {"type": "categorical", "choices": [16, 32]},
        },
        "workload": {"num_requests": 10, "concurrency": 4},
        "study": {"name": "overhead", "trials": trials, "sampler": sampler,
                  "strategy": {"prune_startup_failures": False, "early_stop": False, "warm_start": False}},
        "cluster": {"gpus_per_worker": 1, "workers": workers},
    }
    p = tmp / "space.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def run(space: SearchSpace, run_dir: RunDir, workers: int, timeline: Timeline) -> None:
    """`autotune run`'s assembly (autotune/service.py), with the timing seams in place."""
    run_dir.ensure()
    seed = space.study.seed
    study = open_study(space, space.study.name or "overhead", storage_from_url(run_dir.optuna_url),
                       make_sampler(space.study.sampler, space, seed)).study
    pool = TimedPool(RayWorkerPool(space.engine.backend, workers, space.cluster.gpus_per_worker,
                                   space.cluster.cpus_per_worker), timeline)
    mlflow = MlflowLogger(run_dir.mlflow_url, run_dir, {"study": study.study_name}, {})
    callbacks = [Marks(timeline), Timed(TrialFiles(run_dir), "on_trial_measured", "files", timeline),
                 Timed(mlflow, "on_trial_end", "mlflow", timeline)]
    TrialLoop(study, space, pool, target=space.study.trials, seed=seed, callbacks=callbacks).run()


def attribute(timeline: Timeline) -> dict[str, list[tuple[int, float]]]:
    """Phase -> [(trials finished at the time, seconds)]: events, and the gaps between them."""
    calls: dict[str, list[tuple[int, float]]] = defaultdict(list)
    prev_end = None
    for name, t0, t1, at in timeline.events:
        if name == "finalize":
            calls[name].append((at, t1 - t0))
            continue
        if prev_end is not None and name in GAP_BEFORE:
            calls[GAP_BEFORE[name]].append((at, max(0.0, t0 - prev_end)))
        if name in PHASES:
            calls[name].append((at, t1 - t0))
        prev_end = t1
    return calls


def windows(n: int) -> list[tuple[int, int]]:
    edges = [0, 100, 250, 500, 1000, 2000]
    return [(a, min(b, n)) for a, b in zip(edges, edges[1:], strict=False) if a < n]


def summarise(calls: dict[str, list[tuple[int, float]]], n: int, wall_s: float) -> dict[str, Any]:
    rows = []
    for lo, hi in windows(n):
        row: dict[str, Any] = {"trials": f"{lo + 1}-{hi}"}
        total = 0.0
        for ph in PHASES:
            secs = sum(d for at, d in calls[ph] if lo <= at < hi)
            row[ph] = secs / (hi - lo)
            if ph != "wait":
                total += secs
        row["overhead"] = total / (hi - lo)
        rows.append(row)
    return {"trials": n, "wall_s": wall_s, "wall_per_trial_s": wall_s / n, "windows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sampler", default="random")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    ap.add_argument("--profile", type=Path, help="cProfile the run into this .prof file")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    timeline = Timeline()
    ray.init(num_cpus=args.workers, num_gpus=args.workers, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="autotune-overhead-") as d:
        tmp = Path(d)
        space = load_space(space_file(tmp, args.trials, args.workers, args.sampler))
        run_dir = RunDir(tmp / "run")
        t0 = time.perf_counter()
        if args.profile:
            import cProfile

            cProfile.runctx("run(space, run_dir, args.workers, timeline)", globals(),
                            {"space": space, "run_dir": run_dir, "args": args, "timeline": timeline}, str(args.profile))
        else:
            run(space, run_dir, args.workers, timeline)
        wall = time.perf_counter() - t0
    calls = attribute(timeline)
    res = summarise(calls, args.trials, wall)
    res.update(sampler=args.sampler, workers=args.workers, cpus=os.cpu_count(),
               finalize_s=sum(d for _, d in calls["finalize"]))
    print(f"{args.trials} trials, {args.workers} logical workers, sampler {args.sampler}: "
          f"{wall:.1f}s wall, {wall / args.trials:.3f}s per trial (driver-bound: no-op trials take ~0 s)")
    print(f"{'trials':>10} " + " ".join(f"{p:>9}" for p in [*PHASES, "overhead"]) + "   (seconds per trial)")
    for r in res["windows"]:
        print(f"{r['trials']:>10} " + " ".join(f"{r[p]:9.4f}" for p in [*PHASES, "overhead"]))
    print(f"finalize (once, end of run): {res['finalize_s']:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
