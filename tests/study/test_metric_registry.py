"""The metric registry: one declaration per metric, and everything that reads metric names
(the aggregates, the schema, penalties, early stopping, docs) reads it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autotune import metrics
from autotune.backends.vllm.metrics import HISTOGRAMS, Histogram, MetricsDelta
from autotune.cli.metrics_doc import DOC, regenerated
from autotune.early_stop import EarlyStopRule, StopTally, quantile_rank_bound, unboundable
from autotune.errors import UserError
from autotune.results import RequestRecord, RequestStatus, TrialResult, TrialStatus
from autotune.space import load_space
from autotune.space.schema import Objective
from autotune.study.loop.validate import validate_for_backend
from autotune.study.search.strategy import early_stop_notice, early_stop_rule
from autotune.study.trials.objectives import penalty
from tests.study.test_e2e_run import DATA
from tests.study.test_space_schema import _with, _write


def _space(tmp_path, **changes):
    return load_space(_write(tmp_path, _with(**changes)))


def test_docs_table_is_the_registry():
    assert DOC.read_text() == regenerated(DOC.read_text()), "run: python -m autotune.cli.metrics_doc"


def test_every_registered_metric_is_reported_and_nothing_else():
    res = TrialResult(TrialStatus.OK, "sim", records=[RequestRecord(0, 0.0, 0.1, 1.0, 10, 20)],
                      duration_s=1.0, peak_mem_gib=[1.0, 2.0])
    got = set(res.metrics())
    assert got - {"peak_mem_gib_gpu0", "peak_mem_gib_gpu1"} == set(metrics.names())
    assert all(metrics.is_registered(n) for n in got)


def test_server_metrics_are_keys_the_vllm_backend_summarises():
    """A typo in a server metric's key would make it NaN on every trial: the keys must be
    those autotune.backends.vllm.metrics produces when vLLM exports every histogram."""
    delta = MetricsDelta()
    delta.histograms = {k: Histogram({1.0: 1.0, float("inf"): 1.0}, 0.5, 1.0) for k in HISTOGRAMS}
    summary = delta.summary()
    server = [n for n, m in metrics.REGISTRY.items() if m.source == metrics.Source.SERVER and n != "preemptions"]
    assert server and all(n.removeprefix(metrics.SERVER_PREFIX) in summary for n in server)
    res = TrialResult(TrialStatus.OK, "vllm", server_metrics=summary)
    assert res.metrics()["server_queue_p99_s"] == pytest.approx(summary["queue_p99_s"])
    assert np.isnan(TrialResult(TrialStatus.OK, "vllm").metrics()["server_queue_p99_s"])  # unmeasured, not 0


def test_any_percentile_is_numpy_over_successes():
    e2e = [0.5 + i / 100 for i in range(100)]
    recs = [RequestRecord(i, 0.0, v / 4, v, 10, 11) for i, v in enumerate(e2e)]
    recs.append(RequestRecord(100, 0.0, None, None, 10, 0, RequestStatus.ERROR))
    m = TrialResult(TrialStatus.OK, "sim", records=recs, duration_s=2.0).metrics()
    for q in metrics.PERCENTILES:
        assert m[metrics.percentile_name("e2e", q)] == pytest.approx(np.percentile(e2e, q))
        assert m[metrics.percentile_name("ttft", q)] == pytest.approx(np.percentile([v / 4 for v in e2e], q))
    assert m["p99.9_e2e_s"] >= m["p99_e2e_s"] >= m["p95_e2e_s"] >= m["p75_e2e_s"]
    assert m["error_per_1k"] == pytest.approx(1000 / 101)


def test_penalties_and_directions_come_from_the_registry(tmp_path):
    sp = _space(tmp_path, objectives=[{"metric": "oom_per_1k"}, {"metric": "p95_ttft_s"}],
                slo={"server_prefix_cache_hit_rate": {"min": 0.1}})
    assert [o.direction for o in sp.objectives] == ["minimize", "minimize"]  # not written: the registry's
    assert penalty("p95_ttft_s", sp) == sp.workload.request_timeout_s
    assert penalty("oom_per_1k", sp) == 1000.0
    assert penalty("server_prefix_cache_hit_rate", sp) == 0.0  # a ratio to maximise: its worst is 0
    assert Objective(metric="goodput_rps_per_gpu").direction == "maximize"


def test_an_objective_in_the_wrong_direction_is_refused():
    with pytest.raises(ValueError, match=r"p99_e2e_s is to be minimized.*remove `direction: maximize`"):
        Objective(metric="p99_e2e_s", direction="maximize")


def test_an_unknown_metric_names_the_nearest(tmp_path):
    with pytest.raises(UserError, match=r"unknown metric 'p95_ttf_s'; did you mean 'p95_ttft_s'"):
        _space(tmp_path, objectives=[{"metric": "oom_per_1k"}, {"metric": "p95_ttf_s"}])


def test_a_simulated_study_refuses_a_server_metric_the_simulator_does_not_report(tmp_path):
    sp = _space(tmp_path, engine__backend="sim", slo={"server_queue_p99_s": {"max": 1.0}})
    with pytest.raises(UserError, match="server_queue_p99_s: the simulator does not report"):
        validate_for_backend(sp)


@pytest.mark.parametrize("q", [50, 90, 95, 99, 99.9])
def test_quantile_lower_bound_holds_whatever_the_rest_do(q):
    """For any q, the m-th largest of the first latencies is <= the final percentile, however
    the remaining requests end (fast, slow or failed)."""
    rng = random.Random(int(q * 10))
    for _ in range(60):
        total = rng.randint(1, 300)
        seen = [rng.lognormvariate(0, 1) for _ in range(rng.randint(0, total))]
        rest = [rng.choice([0.0, 1e-3, 100.0, None]) for _ in range(total - len(seen))]
        final = seen + [v for v in rest if v is not None]
        m = quantile_rank_bound(total, q)
        if len(seen) >= m and final:
            assert sorted(seen)[-m] <= np.percentile(final, q) + 1e-12


def _rec(i: int, ttft: float, status: RequestStatus = RequestStatus.OK) -> RequestRecord:
    return RequestRecord(i, 0.0, ttft, ttft * 3, 10, 20, status)


def test_the_rule_bounds_a_ttft_percentile_objective():
    objectives = ("oom_per_1k", "p95_ttft_s")
    beaten = StopTally(EarlyStopRule(front=((0.0, 0.1),), min_requests=20, objectives=objectives), 200)
    kept = StopTally(EarlyStopRule(front=((0.0, 10.0),), min_requests=20, objectives=objectives), 200)
    for i in range(40):
        for t in (beaten, kept):
            t.add(_rec(i, 1.0))
    assert beaten.should_stop() and not kept.should_stop()
    assert beaten.bounds() == [0.0, 1.0]
    # A front point with more OOMs than the trial's floor does not dominate it, however fast.
    worse_oom = StopTally(EarlyStopRule(front=((50.0, 0.1),), min_requests=20, objectives=objectives), 200)
    for i in range(40):
        worse_oom.add(_rec(i, 1.0))
    assert not worse_oom.should_stop()


def test_early_stop_works_for_what_it_can_bound_and_says_when_it_cannot(tmp_path):
    sp = _space(tmp_path, objectives=[{"metric": "oom_per_1k"}, {"metric": "p95_ttft_s"}])
    assert unboundable(sp.objective_names, [o.direction for o in sp.objectives]) == []
    assert early_stop_notice(sp) == ""
    tp = _space(tmp_path, objectives=[{"metric": "oom_per_1k"}, {"metric": "output_tok_per_s"}])
    assert early_stop_rule([], tp) is None
    assert "early stopping is off: the objective output_tok_per_s cannot be bounded" in early_stop_notice(tp)


def test_flagship_space_keeps_its_rule():
    sp = load_space(DATA / "sim_small.yaml")
    assert early_stop_notice(sp) == "" and sp.objective_names == ["oom_per_1k", "p99_e2e_s"]
