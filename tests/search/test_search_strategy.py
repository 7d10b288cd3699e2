"""autotune's strategy parts do what they claim; the benchmark's hypervolume and grid baseline.

Fast (a 200-request benchmark, in-process driver on the simulator); no wall-clock assertions.
"""

from __future__ import annotations

import itertools
import math

import optuna
import pytest

from autotune.early_stop import EarlyStopRule
from autotune.sim import predict_startup, simulate_trial
from autotune.space.schema import StrategySection
from autotune.study.search.samplers import make_sampler
from autotune.study.trials.objectives import (
    SERVING_CONSTRAINT,
    STARTUP_CONSTRAINT,
    constraint_values,
    objective_values,
)
from autotune.study.trials.params import suggest_params
from experiments.search import common as C
from experiments.search import evaluate as E
from experiments.search import harness as H
from experiments.search import run as R

BAD = {  # the field report's "tuned" config: bf16 weights alone exceed 0.85 x 79 GiB
    "gpu_memory_utilization": 0.85, "max_num_seqs": 128, "block_size": 32, "enforce_eager": True,
    "enable_prefix_caching": False, "max_num_batched_tokens": 2048, "kv_cache_dtype": "auto",
}
GOOD = {**BAD, "gpu_memory_utilization": 0.92, "enable_prefix_caching": True}


def small_space(**strategy):
    sp = C.space()
    wl = sp.workload.model_copy(update={"num_requests": 200})
    study = sp.study.model_copy(update={"sampler": "autotune", "strategy": StrategySection(**strategy)})
    return sp.model_copy(update={"workload": wl, "study": study})


def enqueue_run(sp, configs, trials):
    """Run the driver's loop with ``configs`` enqueued as search samples (not references)."""
    study = H.open_bench_study(sp, seed=0)
    for c in configs:
        study.enqueue_trial(c, user_attrs={"role": "search"})
    return study, H.run_loop(study, sp, trials=trials, seed=0, workers=1)


def test_pruning_rejects_a_predicted_failure_and_never_launches_it():
    sp = small_space(warm_start=False, early_stop=False)
    assert not predict_startup(sp.engine.model, sp.engine.gpu, C.resolved_flags(sp, BAD)).ok
    study, pool = enqueue_run(sp, [BAD, GOOD], trials=1)
    bad, good = study.trials[0], study.trials[1]
    assert bad.user_attrs["role"] == "rejected"
    assert "predicted startup failure" in bad.user_attrs["failure_reason"]
    assert bad.values == [1000.0, float(sp.workload.request_timeout_s)]
    assert study.trials[0].user_attrs.get("metrics") is None  # nothing was measured
    launched = [d.trial for d in pool.log]
    assert bad.number not in launched and launched == [good.number]
    assert good.user_attrs["role"] == "search"


def test_rejected_sample_is_told_infeasible_to_optuna():
    sp = small_space(warm_start=False, early_stop=False)
    study, _ = enqueue_run(sp, [BAD, GOOD], trials=1)
    bad, good = study.trials[0], study.trials[1]
    assert bad.constraints[STARTUP_CONSTRAINT] > 0
    assert good.constraints[STARTUP_CONSTRAINT] <= 0


def test_crash_loops_and_startup_failures_are_infeasible():
    sp = small_space()
    limit = sp.workload.max_restarts
    assert constraint_values({}, started=False, space=sp).values == {STARTUP_CONSTRAINT: 1.0, SERVING_CONSTRAINT: 1.0}
    ok = constraint_values({"crashes": float(limit)}, started=True, space=sp)
    assert ok.feasible  # restarted after each OOM and finished: OOMs stay in the objective
    loop = constraint_values({"crashes": float(limit + 1)}, started=True, space=sp)
    assert not loop.feasible and loop.values[SERVING_CONSTRAINT] > 0
    off = small_space(feasibility_constraints=False)
    assert constraint_values({}, started=False, space=off).values == {}


def test_without_pruning_the_failure_is_launched_and_wasted():
    sp = small_space(warm_start=False, early_stop=False, prune_startup_failures=False)
    study, pool = enqueue_run(sp, [BAD], trials=1)
    t = study.trials[0]
    assert [d.trial for d in pool.log] == [t.number]
    assert t.user_attrs["metrics"]["duration_s"] == 0 and t.user_attrs["metrics"]["gpu_time_s"] > 0


def test_early_stop_stops_a_dominated_trial_with_conservative_objectives():
    sp = small_space()
    flags = C.resolved_flags(sp, {**GOOD, "enable_prefix_caching": False})  # ~40 s p99 vs ~27 s
    full = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=1)
    front_pt = (0.0, 20.0)  # a front point with no OOMs and a much lower p99
    rule = EarlyStopRule(front=(front_pt,), min_requests=50)
    res = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=1, early_stop=rule)
    assert not full.early_stopped and res.early_stopped
    m = res.metrics()
    assert m["requests_not_run"] > 0  # the requests not run are reported
    assert res.gpu_time_s < full.gpu_time_s
    oom, p99 = objective_values(m, True, sp)
    # Conservative: what Optuna is told keeps the trial dominated by the point that stopped it.
    assert oom >= front_pt[0] and p99 >= rule.margin * front_pt[1]
    assert full.metrics()["p99_e2e_s"] >= rule.margin * front_pt[1]  # and it really was dominated


def test_early_stop_rule_bounds():
    rule = EarlyStopRule(front=((0.0, 10.0), (5.0, 8.0)), min_requests=100)
    # bounds: (OOM floor per 1k = 1000 x OOMs so far / total, p99 lower bound)
    assert not rule.dominated(50, 1000, (0.0, 100.0))  # too few requests yet
    assert rule.dominated(200, 1000, (0.0, 10.6))  # 0 OOMs, p99 >= 1.05 x 10: dominated by (0, 10)
    assert not rule.dominated(200, 1000, (0.0, 10.4))  # within the margin
    assert not rule.dominated(200, 1000, (4.0, 8.5))  # floor 4/1k < 5: (5, 8) is not better on OOMs
    assert rule.dominated(200, 1000, (5.0, 8.9))  # floor 5/1k: (5, 8) dominates with margin
    assert not EarlyStopRule(front=((0.0, 1e9),)).dominated(500, 1000, (0.0, 50.0))


def test_early_stopped_trials_never_enter_the_front_in_a_study():
    sp = small_space()
    study, pool = H.run_study(sp, trials=10, seed=1, workers=2)
    stopped = [t for t in study.trials if t.user_attrs.get("early_stopped")]
    front = {t.number for t in study.best_trials}
    assert all(t.number not in front for t in stopped)


def test_hypervolume_of_a_hand_made_front():
    assert E.hypervolume_2d([]) == 0.0
    assert E.hypervolume_2d([(0.5, 0.5)]) == pytest.approx(0.25)
    two = [(0.2, 0.6), (0.6, 0.2)]
    assert E.hypervolume_2d(two) == pytest.approx(0.32 + 0.32 - 0.16)
    # A dominated point and points beyond the reference add nothing.
    assert E.hypervolume_2d([*two, (0.7, 0.7), (1.2, 0.1), (0.1, 1.5)]) == pytest.approx(0.48)
    assert E.hypervolume_2d([(0.0, 0.0)]) == pytest.approx(1.0)


def test_hv_transform_reference_point():
    x, y = E.hv_transform(0.0, 27.0, 27.0)
    assert x == 0.0 and y == pytest.approx(1 / C.P99_REF_FACTOR)
    assert E.hv_transform(1000.0, 54.0, 27.0) == pytest.approx((1.0, 1.0))
    assert E.hv_transform(1.0, 1.0, 1.0)[0] == pytest.approx(math.log10(2) / math.log10(1001))
    assert math.isinf(E.hv_transform(1000.0, math.nan, 27.0)[1])


def test_grid_baseline_is_the_cartesian_product_of_fixed_lists():
    sp = R.grid_space(C.space())
    lists = {n: p.choices for n, p in sp.params.items()}
    assert lists == {
        "gpu_memory_utilization": [0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.91, 0.9],
        "max_num_seqs": [128, 256],
        "max_num_batched_tokens": [512, 1024, 2048, 4096],
    }
    assert sp.engine.flags["enable_prefix_caching"] is True
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=make_sampler("grid", sp, 0))
    seen = []
    for _ in range(72):
        t = study.ask()
        p = suggest_params(t, sp)
        seen.append(tuple(p[n] for n in lists))
        study.tell(t, [0.0, 1.0])
    assert sorted(seen) == sorted(itertools.product(*lists.values()))
