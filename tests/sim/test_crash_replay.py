"""hazard.survives: a crash-free trial's logged crash draws tell, without simulating,
whether another seed of the same config would be that very trial (noise off). The brute
force of every reality-gap truth skips most of its repeat runs on this, so it must be exact."""

from __future__ import annotations

import math

from autotune.deploy import NOMINAL
from autotune.sim import simulate_trial
from autotune.sim.hazard import survives
from tests.sim.conftest import A100, GRAPHS_OUTSIDE, QWEN72B, chat_workload, qwen_flags

# Thin headroom: some seeds of this config crash, most do not (noise off).
FLAGS = qwen_flags(gpu_memory_utilization=0.973, enable_prefix_caching=False)
SEEDS = range(12)
QUIET = NOMINAL.without_noise()


def _trial(seed: int, record: bool = False, profile=QUIET):
    return simulate_trial(QWEN72B, A100, FLAGS, chat_workload(200, max_restarts=2), seed=seed, env=GRAPHS_OUTSIDE,
                          profile=profile, record_draws=record)


def _same(a, b) -> bool:
    ma, mb = a.metrics(), b.metrics()
    both_nan = [k for k in ma if isinstance(ma[k], float) and math.isnan(ma[k]) and math.isnan(mb.get(k, 0.0))]
    return ma.keys() == mb.keys() and all(ma[k] == mb[k] for k in ma if k not in both_nan) \
        and a.records == b.records


def test_a_seed_that_survives_the_log_is_the_logged_trial_and_one_that_does_not_crashes():
    trials = {s: _trial(s, record=True) for s in SEEDS}
    template = next(t for t in trials.values() if t.crashes == 0)
    draws = template.extra["crash_draws"]
    assert draws and all(0.0 <= p <= 1.0 and k >= 1 and u >= 0.0 for p, k, u in draws)
    wseed = chat_workload(200).seed
    verdicts = {s: survives(draws, wseed, s) for s in SEEDS}
    assert set(verdicts.values()) == {True, False}, "the config must split the seeds for the test to mean anything"
    for s, t in trials.items():
        if verdicts[s]:
            assert t.crashes == 0 and _same(t, template)
        else:
            assert t.crashes >= 1


def test_draws_are_logged_only_when_asked_and_never_with_noise():
    assert "crash_draws" not in _trial(0).extra
    assert "crash_draws" not in _trial(0, record=True, profile=NOMINAL).extra
