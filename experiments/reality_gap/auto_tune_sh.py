"""vLLM's ``benchmarks/auto_tune/auto_tune.sh`` as a baseline, through autotune's own trial loop.

The script (vLLM repository, benchmarks/auto_tune/auto_tune.sh and its README):

1. ``gpu_memory_utilization=0.98``; start the server with the *last* (largest) values of
   ``NUM_SEQS_LIST`` and ``NUM_BATCHED_TOKENS_LIST``; if it fails to start, lower gmu by 0.01
   and try again, down to 0.90; one start at a time;
2. at the gmu found, for every ``max_num_seqs`` x ``max_num_batched_tokens`` of the lists,
   start the server (prefix caching on) and benchmark it;
3. keep the best throughput whose p99 E2E latency is under ``MAX_LATENCY_ALLOWED_MS``.

Here the benchmark is the scenario's fixed one and step 3 is the export rule, as for every
strategy. The probe that starts is also the benchmark of the largest combination (the
script restarts the server for it; this saves the baseline one startup). Probes run on one
worker, as the script does; the combinations on all of them. Each phase is a run of
``TrialLoop`` over enqueued trials on the same simulated clock. SIMULATED.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotune.space import SearchSpace
from autotune.study.loop import TrialLoop, open_study
from autotune.study.trials import Role, enqueue_attrs, records
from experiments.reality_gap.strategies import AUTO_TUNE_BATCHED_TOKENS, AUTO_TUNE_GMU, AUTO_TUNE_SEQS
from experiments.search.harness import SimClockPool


def probes() -> list[dict[str, Any]]:
    """Step 1's configs, in the order the script starts them."""
    return [{"gpu_memory_utilization": g, "max_num_seqs": AUTO_TUNE_SEQS[-1],
             "max_num_batched_tokens": AUTO_TUNE_BATCHED_TOKENS[-1]} for g in AUTO_TUNE_GMU]


def combinations(gmu: float) -> list[dict[str, Any]]:
    """Step 2's configs at ``gmu``, in the script's loop order."""
    return [{"gpu_memory_utilization": gmu, "max_num_seqs": s, "max_num_batched_tokens": t}
            for s in AUTO_TUNE_SEQS for t in AUTO_TUNE_BATCHED_TOKENS]


def _run(study: optuna.Study, space: SearchSpace, pool: SimClockPool, configs: list[dict[str, Any]],
         workers: int, seed: int) -> None:
    for c in configs:
        study.enqueue_trial(c, user_attrs=enqueue_attrs(Role.SEARCH))
    pool.size = workers
    launched = sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished())
    TrialLoop(study, space, pool, target=launched + len(configs), seed=seed).run()


def run(space: SearchSpace, backend: Any, seed: int, workers: int) -> tuple[optuna.Study, SimClockPool]:
    """The procedure on ``space`` (the auto_tune lists' space) against ``backend``."""
    study = open_study(space, f"auto-tune-sh-{seed}", None, optuna.samplers.RandomSampler(seed=seed)).study
    pool = SimClockPool(1, backend=backend)
    found: dict[str, Any] | None = None
    for probe in probes():
        _run(study, space, pool, [probe], 1, seed)
        if records(study.get_trials(deepcopy=False))[-1].started:
            found = probe
            break
    if found is not None:
        rest = [c for c in combinations(found["gpu_memory_utilization"]) if c != found]
        _run(study, space, pool, rest, workers, seed)
    return study, pool
