"""Run one study through autotune's StudyDriver, in-process, on a simulated clock.

The search itself is the driver's own code: ``StudyDriver._loop``, ``_next_launchable``
(ask -> suggest_params -> declarative constraints -> strategy.prune_reason -> reject/tell),
``_request`` (strategy.early_stop_rule at dispatch) and ``_finish`` (constraints and
objective values told to Optuna). Only the plumbing around it is replaced:

* Ray workers -> :class:`SimClockPool`, which runs each trial on the sim backend when it is
  dispatched and hands results back in order of *simulated* finish time, as N GPU workers
  would: a worker is busy for the trial's ``gpu_time_s`` (startup + benchmark + restarts; an
  early stop shortens it). The sampler therefore sees exactly what it would see with N
  workers (results arrive while other trials still run; constant liar matters).
* SQLite storage -> in-memory Optuna storage; MLflow and trial files -> not written.

Measured with the full driver (Ray + MLflow + SQLite) on this 2-core machine the plumbing
costs ~0.5-1 s per trial on top of the 30-300 ms simulation (experiments/search/README.md),
which would make 10 seeds x 12 strategies x 50 trials take hours instead of minutes.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.backends.sim import SimBackend
from autotune.space import SearchSpace
from autotune.study import seeding
from autotune.study.driver import RunOptions, StudyDriver
from autotune.study.pareto import FrontCache
from autotune.study.progress import Progress
from autotune.study.samplers import make_sampler
from autotune.workers.pool import Finished

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
logging.getLogger("autotune").setLevel(logging.WARNING)


@dataclass
class Dispatch:
    order: int  # dispatch index among launched trials (0-based)
    trial: int  # Optuna trial number
    worker: int
    start_s: float  # simulated wall clock
    end_s: float


@dataclass
class SimClockPool:
    """WorkerPool's interface; trials run in-process, time is the simulator's gpu_time_s."""

    size: int
    backend: Any = field(default_factory=SimBackend)
    now: float = 0.0
    log: list[Dispatch] = field(default_factory=list)
    _busy: dict[int, tuple[float, int, Any, Any]] = field(default_factory=dict)  # wid -> (end, order, key, result)

    def start(self) -> None:
        pass

    def idle_workers(self) -> list[int]:
        return [w for w in range(self.size) if w not in self._busy]

    @property
    def running(self) -> int:
        return len(self._busy)

    def submit(self, worker_id: int, key: Any, request: Any) -> None:
        result = self.backend.run_trial(request)
        end = self.now + float(result.gpu_time_s)
        d = Dispatch(len(self.log), request.trial_number, worker_id, self.now, end)
        self.log.append(d)
        self._busy[worker_id] = (end, d.order, key, result)

    def wait(self, timeout: float | None = None) -> list[Finished]:
        if not self._busy:
            return []
        wid = min(self._busy, key=lambda w: self._busy[w][:2])
        end, _, key, result = self._busy.pop(wid)
        self.now = max(self.now, end)
        return [Finished(key, wid, result=result)]

    def shutdown(self) -> None:
        self._busy.clear()


class _NullTracker:
    def log_trial(self, entry: Any) -> str:
        return ""


class BenchDriver(StudyDriver):
    """StudyDriver with in-memory storage, no tracking, and a simulated-clock pool."""

    def __init__(self, space: SearchSpace, trials: int, seed: int, workers: int, name: str = "bench") -> None:
        super().__init__(space, Path(name + ".yaml"), RunOptions(out=Path("/nonexistent-bench"), study_name=name,
                                                                 trials=trials, seed=seed, progress=False))
        self.workers = workers

    def _open_study(self) -> optuna.Study:
        sampler = make_sampler(self.space.study.sampler, self.space, self.seed)
        study = optuna.create_study(directions=[o.direction for o in self.space.objectives], sampler=sampler,
                                    study_name=self.name)
        if self.space.study.strategy.warm_start:
            seeding.enqueue_warm_start(study, self.space)
        return study

    def _heartbeat(self) -> None:
        pass

    def _log(self, frozen: Any, artifacts: Any) -> None:
        pass

    def _write_trial_files(self, request: Any, result: Any, metrics: Any) -> list[Path]:
        return []

    def run_bench(self) -> tuple[optuna.Study, SimClockPool]:
        self.study = self._open_study()
        self.front = FrontCache(self.study, self.space)
        self.tracker = _NullTracker()
        self._logged = {}
        self.progress = Progress(self.target, self.space.objective_names, False)
        pool = SimClockPool(self.workers)
        self._pool = pool
        self._loop(pool)
        return self.study, pool


def run_study(space: SearchSpace, trials: int, seed: int, workers: int = 4) -> tuple[optuna.Study, SimClockPool]:
    return BenchDriver(space, trials, seed, workers).run_bench()
