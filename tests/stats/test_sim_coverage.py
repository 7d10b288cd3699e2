"""The 95 % intervals on the simulator's own run-to-run noise: they hold the truth 90-99 % of the time.

Two configs of the flagship space (SIMULATED, a 200-request benchmark so the test is
quick), each run with fresh seeds as confirmation runs are (a new server start draws new
noise). A config's true p99 is the mean over 300 other seeds. 150 "studies" measure each
config 3 times; the interval of each config, from its own runs (Student t, 2 degrees of
freedom) and pooled over both configs (4), must hold the truth in 90-99 % of them. This
also checks the pooling's assumption on the simulator: the run-to-run spread is a similar
percentage for both.
"""

from __future__ import annotations

import statistics

import pytest

from autotune.sim.trial import simulate_trial
from autotune.space import load_space
from autotune.study.analysis.stats import mean_interval, pooled_relative_sd
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

STUDIES, RUNS, TRUTH_SEEDS = 150, 3, 300


def test_intervals_over_simulator_repeats_cover_the_true_p99():
    sp = load_space(REPO / "search_spaces" / "qwen72b.yaml")
    wl = sp.workload.model_copy(update={"num_requests": 200})
    configs = [
        {**sp.fixed_flags(), "gpu_memory_utilization": 0.92, "enable_prefix_caching": True},
        {**sp.fixed_flags(), "gpu_memory_utilization": 0.93, "enable_prefix_caching": True, "enforce_eager": True,
         "max_num_seqs": 64},
    ]

    def p99(flags: dict, seed: int) -> float:
        return simulate_trial(sp.engine.model, sp.engine.gpu, flags, wl, seed=seed).metrics()["p99_e2e_s"]

    truths = [statistics.fmean(p99(f, 1_000_000 + s) for s in range(TRUTH_SEEDS)) for f in configs]
    assert abs(truths[0] / truths[1] - 1) > 0.02  # two configs that really differ
    own = pooled = total = 0
    for study in range(STUDIES):
        # Every run its own seed, as every trial has (the same seed would draw the same noise).
        groups = [[p99(f, (study * len(configs) + k) * RUNS + r) for r in range(RUNS)] for k, f in enumerate(configs)]
        sd, df = pooled_relative_sd(groups)
        for truth, g in zip(truths, groups, strict=True):
            i, j = mean_interval(g), mean_interval(g, sd, df)
            own += i.low <= truth <= i.high
            pooled += j.low <= truth <= j.high
            total += 1
    assert 0.90 <= own / total <= 0.99, own / total
    assert 0.90 <= pooled / total <= 0.99, pooled / total
