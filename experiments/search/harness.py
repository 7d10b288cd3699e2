"""Run one study through autotune's trial loop, in-process, on a simulated clock.

The search itself is autotune's own code, unchanged: ``autotune.study.loop.opening.open_study``
(the warm start) and ``autotune.study.loop.driver.TrialLoop`` (ask -> suggest_params ->
declarative constraints -> strategy.prune_reason -> reject/tell; strategy.early_stop_rule
at dispatch; constraints and objective values told to Optuna). The loop is given:

* an in-memory Optuna study instead of SQLite;
* :class:`SimClockPool` instead of Ray workers: it runs each trial on the sim backend when
  it is dispatched and hands results back in order of *simulated* finish time, as N GPU
  workers would: a worker is busy for the trial's ``gpu_time_s`` (startup + benchmark +
  restarts; an early stop shortens it). The sampler therefore sees exactly what it would
  see with N workers (results arrive while other trials still run; constant liar matters);
* no callbacks: MLflow, trial files and progress are not written.

Measured with the full driver (Ray + MLflow + SQLite) on this 2-core machine the plumbing
costs ~0.5-1 s per trial on top of the 30-300 ms simulation (experiments/search/README.md),
which would make 10 seeds x 12 strategies x 50 trials take hours instead of minutes.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna

from autotune.backends.base import TrialRequest
from autotune.backends.sim import SimBackend
from autotune.results import TrialResult
from autotune.space import SearchSpace
from autotune.study.loop import TrialLoop, open_study
from autotune.study.search import make_sampler

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
class Returned:
    """A trial back from a simulated worker (the loop's FinishedTrial)."""

    key: int
    worker_id: int
    result: TrialResult | None
    worker_died: str | None = None


@dataclass
class SimClockPool:
    """A worker pool for the trial loop; trials run in-process, time is the simulator's gpu_time_s."""

    size: int
    backend: Any = field(default_factory=SimBackend)  # SimBackend, or one with run_on_worker
    now: float = 0.0
    log: list[Dispatch] = field(default_factory=list)
    _busy: dict[int, tuple[float, int, int, TrialResult]] = field(default_factory=dict)  # wid -> (end, order, key, result)

    def set_progress_sink(self, sink: Any) -> None:
        pass  # trials run inside submit, on a simulated clock: nothing in flight to report

    def start(self) -> None:
        pass

    def idle_workers(self) -> list[int]:
        return [w for w in range(self.size) if w not in self._busy]

    @property
    def running(self) -> int:
        return len(self._busy)

    def submit(self, worker_id: int, key: int, request: TrialRequest) -> None:
        # A backend that models its nodes (the reality gap's truths: a speed offset per node,
        # drift over the clock) is told where and when the trial runs.
        on_worker = getattr(self.backend, "run_on_worker", None)
        result = on_worker(request, worker_id, self.now) if on_worker else self.backend.run_trial(request)
        end = self.now + float(result.gpu_time_s)
        d = Dispatch(len(self.log), request.trial_number, worker_id, self.now, end)
        self.log.append(d)
        self._busy[worker_id] = (end, d.order, key, result)

    def wait(self, timeout: float | None = None) -> list[Returned]:
        if not self._busy:
            return []
        wid = min(self._busy, key=lambda w: self._busy[w][:2])
        end, _, key, result = self._busy.pop(wid)
        self.now = max(self.now, end)
        return [Returned(key, wid, result)]

    def shutdown(self) -> None:
        self._busy.clear()


def open_bench_study(space: SearchSpace, seed: int, name: str = "bench") -> optuna.Study:
    """An in-memory study, created (and warm-started) as `autotune run` creates one."""
    return open_study(space, name, None, make_sampler(space.study.sampler, space, seed)).study


def run_loop(study: optuna.Study, space: SearchSpace, trials: int, seed: int, workers: int) -> SimClockPool:
    """autotune's trial loop on ``study`` until it holds ``trials`` launched trials."""
    pool = SimClockPool(workers)
    TrialLoop(study, space, pool, target=trials, seed=seed).run()
    return pool


def run_study(space: SearchSpace, trials: int, seed: int, workers: int = 4) -> tuple[optuna.Study, SimClockPool]:
    study = open_bench_study(space, seed)
    return study, run_loop(study, space, trials, seed, workers)
