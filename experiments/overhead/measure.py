"""Orchestration overhead per trial: ask, dispatch, tell, MLflow logging, on the no-op backend.

    .venv/bin/python experiments/overhead/measure.py --trials 500 --workers 8 --sampler random
    .venv/bin/python experiments/overhead/measure.py --trials 300 --workers 8 --sampler autotune

The no-op backend returns at once, so everything measured is the driver's own work. The
real StudyDriver runs unchanged; its phases are timed by wrapping methods from outside:

  ask       StudyDriver._next_launchable  (study.ask + suggest + constraints + owner attr)
  dispatch  WorkerPool.submit             (actor.run.remote)
  wait      WorkerPool.wait               (ray.wait + ray.get; the no-op trial itself)
  files     StudyDriver._write_trial_files
  tell      optuna.Study.tell
  mlflow    StudyTracker.log_trial        (child run, params, metrics, 3 artifacts)
  sync      StudyDriver._heartbeat        (heartbeat + count sync from storage)
  attrs     the rest of StudyDriver._finish (user attrs and constraints, one commit each)

Each call is attributed to the number of trials finished when it started, so the table
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
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import optuna  # noqa: E402
import ray  # noqa: E402
import yaml  # noqa: E402

from autotune.space import load_space  # noqa: E402
from autotune.study import driver as driver_mod  # noqa: E402
from autotune.study.driver import RunOptions, StudyDriver  # noqa: E402
from autotune.tracking.mlflow_tracker import MlflowTracker  # noqa: E402
from autotune.workers.pool import WorkerPool  # noqa: E402

PHASES = ["ask", "dispatch", "wait", "files", "tell", "mlflow", "sync", "attrs"]


class Timings:
    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.finished = 0

    def wrap(self, owner: Any, attr: str, phase: str, counts_finish: bool = False) -> None:
        fn = getattr(owner, attr)
        timings = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            at = timings.finished
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings.calls[phase].append((at, time.perf_counter() - t0))
                if counts_finish:
                    timings.finished += 1

        setattr(owner, attr, timed)


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


def windows(n: int) -> list[tuple[int, int]]:
    edges = [0, 100, 250, 500, 1000, 2000]
    out = [(a, min(b, n)) for a, b in zip(edges, edges[1:], strict=False) if a < n]
    return out


def summarise(t: Timings, n: int, wall_s: float) -> dict[str, Any]:
    rows = []
    for lo, hi in windows(n):
        row: dict[str, Any] = {"trials": f"{lo + 1}-{hi}"}
        total = 0.0
        t.calls["attrs"] = [(at, d) for at, d in t.calls["finish"]]
        for ph in ("files", "tell", "mlflow"):  # attrs = _finish minus its timed parts
            t.calls["attrs"] += [(at, -d) for at, d in t.calls[ph]]
        for ph in PHASES:
            secs = sum(d for at, d in t.calls[ph] if lo <= at < hi)
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
    ap.add_argument("--profile", type=Path, help="cProfile the driver into this .prof file")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    t = Timings()
    t.wrap(StudyDriver, "_next_launchable", "ask")
    t.wrap(WorkerPool, "submit", "dispatch")
    t.wrap(WorkerPool, "wait", "wait")
    t.wrap(StudyDriver, "_write_trial_files", "files")
    t.wrap(optuna.Study, "tell", "tell", counts_finish=True)
    t.wrap(MlflowTracker, "log_trial", "mlflow")
    t.wrap(StudyDriver, "_heartbeat", "sync")
    t.wrap(StudyDriver, "_finish", "finish")
    t.wrap(StudyDriver, "_finalize", "finalize")  # once per run: Pareto tags on every run, plots
    assert driver_mod.StudyDriver is StudyDriver

    ray.init(num_cpus=args.workers, num_gpus=args.workers, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="autotune-overhead-") as d:
        tmp = Path(d)
        path = space_file(tmp, args.trials, args.workers, args.sampler)
        drv = StudyDriver(load_space(path), path, RunOptions(out=tmp / "run", progress=False,
                                                              address=ray.get_runtime_context().gcs_address))
        t0 = time.perf_counter()
        if args.profile:
            import cProfile

            cProfile.runctx("drv.run()", globals(), {"drv": drv}, str(args.profile))
        else:
            drv.run()
        wall = time.perf_counter() - t0
    res = summarise(t, args.trials, wall)
    res.update(sampler=args.sampler, workers=args.workers, cpus=os.cpu_count(),
               finalize_s=sum(d for _, d in t.calls["finalize"]))
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
