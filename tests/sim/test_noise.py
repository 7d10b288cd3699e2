"""Run-to-run noise: drawn per server start from the trial seed, and off for ground truths."""

from __future__ import annotations

import dataclasses
import statistics

from autotune.deploy import NOMINAL
from autotune.sim import simulate_trial
from tests.sim.conftest import A100, GRAPHS_OUTSIDE, QWEN72B, chat_workload, qwen_flags

QUIET = NOMINAL.without_noise()


def run(seed, profile=NOMINAL, wl=None, env=None, **over):
    return simulate_trial(QWEN72B, A100, qwen_flags(**over), wl or chat_workload(200), seed=seed, env=env,
                          profile=profile)


def test_noise_off_gives_the_same_trial_for_every_seed():
    """Without noise only the OOM hazard draws from the seed, and there is none here."""
    a, b = run(0, QUIET), run(7, QUIET)
    assert a.crashes == b.crashes == 0
    assert [r.e2e_s for r in a.records] == [r.e2e_s for r in b.records]
    assert a.startup_s == b.startup_s and a.extra["speed_factors"] == [1.0]


def test_each_seed_draws_its_own_speed_and_startup_and_the_same_seed_the_same():
    runs = [run(s) for s in range(8)]
    speeds = [r.extra["speed_factors"][0] for r in runs]
    assert len(set(speeds)) == 8 and len({r.startup_s for r in runs}) == 8
    assert run(3).to_dict() == runs[3].to_dict()
    # The speed factor moves every step: the slower start has the longer benchmark.
    slow, fast = max(runs, key=lambda r: r.extra["speed_factors"][0]), min(runs, key=lambda r: r.extra["speed_factors"][0])
    assert slow.duration_s > fast.duration_s
    p99 = [r.metrics()["p99_e2e_s"] for r in runs]
    assert statistics.pstdev(p99) > 0


def test_a_restart_draws_again():
    res = run(0, wl=chat_workload(400, max_restarts=2), env=GRAPHS_OUTSIDE, gpu_memory_utilization=0.975,
              enable_prefix_caching=False)
    starts = res.extra["speed_factors"]
    assert res.crashes >= 1 and len(starts) == min(res.crashes, 2) + 1 and len(set(starts)) == len(starts)
    assert res.extra["restart_s"] != (len(starts) - 1) * res.startup_s


def test_noise_sizes_come_from_the_profile():
    wide = dataclasses.replace(NOMINAL, run_speed_sigma=0.3)
    narrow = [run(s).extra["speed_factors"][0] for s in range(10)]
    broad = [run(s, wide).extra["speed_factors"][0] for s in range(10)]
    assert statistics.pstdev(broad) > 3 * statistics.pstdev(narrow)
