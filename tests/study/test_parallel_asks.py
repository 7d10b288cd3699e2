"""Parallel asks (one per idle worker) must not collapse onto the same point."""

from __future__ import annotations

import itertools
import math
import statistics
import warnings

import optuna

from autotune.space.schema import SearchSpace
from autotune.study.search.samplers import make_sampler

SPACE = SearchSpace.model_validate({
    "version": 1,
    "engine": {"backend": "noop", "model": "m"},
    "params": {"gpu_memory_utilization": {"type": "float", "low": 0.8, "high": 0.98},
               "max_num_seqs": {"type": "int", "low": 16, "high": 256}},
})


def _spread(sampler: optuna.samplers.BaseSampler) -> float:
    """Smallest pairwise distance among 4 trials asked while none of them is told."""
    study = optuna.create_study(sampler=sampler)
    for _ in range(15):
        t = study.ask()
        a = t.suggest_float("gpu_memory_utilization", 0.8, 0.98)
        b = t.suggest_int("max_num_seqs", 16, 256)
        study.tell(t, (a - 0.9) ** 2 * 100 + ((b - 64) / 240) ** 2)
    asked = [study.ask() for _ in range(4)]
    pts = [((t.suggest_float("gpu_memory_utilization", 0.8, 0.98) - 0.8) / 0.18,
            (t.suggest_int("max_num_seqs", 16, 256) - 16) / 240) for t in asked]
    return min(math.dist(p, q) for p, q in itertools.combinations(pts, 2))


def test_autotune_sampler_spreads_concurrent_asks():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = [_spread(make_sampler("autotune", SPACE, seed)) for seed in range(8)]
        no_liar = [_spread(optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=False,
                                                      n_startup_trials=8)) for seed in range(8)]
    # Without the liar, concurrent asks pile onto the current best region.
    assert statistics.median(ours) > 2 * statistics.median(no_liar)
