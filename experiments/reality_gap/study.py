"""One study of the benchmark: autotune's own trial loop against a truth it cannot see.

The study is built as ``autotune run`` builds it (``study.samplers.make_sampler`` with ``calibrate.screen_wrapper``: the
strategy's sampler, behind the screen when ``study.strategy.screen``; ``open_study``: the
warm start) and run by ``study.driver.TrialLoop`` on experiments/search's simulated-clock
pool of 4 workers. The only difference from a real study is who answers a trial: the sim
backend running the TRUTH (``families.TruthBackend``: its profile, quirks and node noise). The space the loop,
the pruning, the screen and the export see is the scenario's own, whose
``engine.sim_profile`` is nominal: autotune's model starts from the nominal simulator
(``study.strategy.model_profile``) and learns only from what the trials measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.calibrate import screen_wrapper
from autotune.space import SearchSpace
from autotune.study.loop import TrialLoop, open_study
from autotune.study.search import make_sampler
from autotune.study.trials import TrialRecord, records
from experiments.search.harness import SimClockPool

WORKERS = 4  # GPU workers (pairs for TP 2) the team runs trials on in parallel


@dataclass
class BenchStudy:
    space: SearchSpace  # what autotune sees: the strategy's variant of the scenario
    study: optuna.Study
    pool: SimClockPool
    loop: TrialLoop | None  # None: a procedure that ran its own loops (auto_tune_sh.py)

    def run(self) -> BenchStudy:
        if self.loop is not None:
            self.loop.run()
        return self

    def records(self) -> list[TrialRecord]:
        return records(self.study.get_trials(deepcopy=False))


def build(space: SearchSpace, backend: Any, seed: int, trials: int, workers: int = WORKERS,
          wrap_sampler: Callable[[optuna.samplers.BaseSampler], optuna.samplers.BaseSampler] | None = None,
          ) -> BenchStudy:
    """An in-memory study of ``space`` whose trials ``backend`` (the truth's) answers; not run yet.
    ``wrap_sampler``: put in front of the strategy's sampler (the measured table's replay makes every
    proposal one of its configs: experiments/vllm_cpu/replay.py)."""
    sampler = make_sampler(space.study.sampler, space, seed, wrap=screen_wrapper)
    if wrap_sampler is not None:
        sampler = wrap_sampler(sampler)
    study = open_study(space, f"{space.study.name or 'reality-gap'}-{seed}", None, sampler, target=trials).study
    pool = SimClockPool(workers, backend=backend)
    return BenchStudy(space, study, pool, TrialLoop(study, space, pool, target=trials, seed=seed))
