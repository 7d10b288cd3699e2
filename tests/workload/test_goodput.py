"""Goodput (DistServe): requests per second per GPU meeting both the TTFT and the TPOT SLO."""

from __future__ import annotations

import math

import pytest

from autotune.metrics import names as metric_names
from autotune.results import GoodputSLO, RequestRecord, RequestStatus, TrialResult, TrialStatus

SLO = GoodputSLO(ttft_s=0.5, tpot_s=0.05)


def rec(i, ttft, e2e, out, status=RequestStatus.OK, **kw) -> RequestRecord:
    return RequestRecord(i, 0.0, ttft, e2e, 100, out, status, **kw)


def result(records, gpus=2, duration=10.0, slo=SLO) -> TrialResult:
    return TrialResult(TrialStatus.OK, "test", records=records, gpus=gpus, duration_s=duration, goodput_slo=slo)


RECORDS = [
    rec(0, 0.4, 0.4 + 0.04 * 9, 10),  # good: ttft 0.4, tpot 0.04
    rec(1, 0.6, 0.6 + 0.04 * 9, 10),  # TTFT too slow
    rec(2, 0.4, 0.4 + 0.06 * 9, 10),  # TPOT too slow
    rec(3, 0.3, 0.3, 1),  # one token: no TPOT, judged on TTFT alone (as vllm bench serve)
    rec(4, None, None, 0, RequestStatus.OOM),  # failed: never good
    rec(5, 0.1, 0.1 + 0.04 * 9, 40, n=4),  # n=4: TPOT per sequence is 0.04 over 10 tokens each
    rec(6, None, 0.5 + 0.05 * 9 - 0.01, 10, prompt_logprobs=5, streamed=False),  # not streamed, within budget
    rec(7, None, 0.5 + 0.05 * 9 + 0.01, 10, prompt_logprobs=5, streamed=False),  # not streamed, over budget
]


def test_goodput_counts_requests_meeting_both_slos_per_second_per_gpu():
    good = [SLO.met_by(r) for r in RECORDS]
    assert good == [True, False, False, True, False, True, True, False]
    m = result(RECORDS).metrics()
    assert m["goodput_rps_per_gpu"] == pytest.approx(4 / 10.0 / 2)
    assert m["slo_attainment"] == pytest.approx(4 / 8)
    assert {"goodput_rps_per_gpu", "slo_attainment"} <= metric_names()  # selectable as objective or SLO


def test_tpot_is_per_sequence_with_n():
    r = rec(0, 1.0, 1.0 + 0.1 * 9, 40, n=4)
    assert r.tpot_s == pytest.approx(0.1)


def test_goodput_is_nan_when_it_cannot_be_computed_and_zero_when_nothing_was_good():
    m = result(RECORDS, slo=None).metrics()
    assert math.isnan(m["goodput_rps_per_gpu"]) and math.isnan(m["slo_attainment"])
    assert math.isnan(result(RECORDS, gpus=0).metrics()["goodput_rps_per_gpu"])  # GPU count unknown
    assert result([rec(1, 0.6, 1.0, 10)], gpus=0).metrics()["goodput_rps_per_gpu"] == 0.0
