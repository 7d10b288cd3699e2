"""GPU-hours to 2 %, wrongly rejected and wasted launches, on hand-made trial sequences.

The export rule applied along the way is the product's (autotune.study.analysis.export_rule); the
"truth" here is a hand-written table of which configs are good.
"""

from __future__ import annotations

import math

import pytest

from autotune.study.trials.record import Role, State, TrialRecord
from experiments.reality_gap import score as S
from experiments.reality_gap.truth import scenario_space
from experiments.search.harness import Dispatch

H = 3600.0
SPACE = scenario_space("trace-replay")


def _flags(seqs: int, **over) -> dict:
    params = {"gpu_memory_utilization": 0.88, "max_num_seqs": seqs, "max_num_batched_tokens": 512,
              "enable_prefix_caching": True, "enforce_eager": False, **over}
    return {**SPACE.fixed_flags(), **params}


def _done(number: int, seqs: int, p99: float, *, role: Role = Role.SEARCH, started: bool = True,
          repeat_of: int | None = None) -> TrialRecord:
    flags = _flags(seqs)
    metrics = {"requests": 1000.0, "requests_oom": 0.0, "oom_per_1k": 0.0, "p99_e2e_s": p99,
               "gpu_time_s": 600.0, "kv_cache_tokens": 100000.0}
    if not started:
        metrics = {"gpu_time_s": 60.0}
    params = {k: flags[k] for k in SPACE.params}
    return TrialRecord(number, State.COMPLETE, role, params=params, flags=flags, metrics=metrics,
                       values=[0.0, p99] if started else [1000.0, 600.0], started=started, repeat_of=repeat_of)


def _log(*spans: tuple[int, float, float]) -> list[Dispatch]:
    return [Dispatch(i, trial, i % 4, start * H, end * H) for i, (trial, start, end) in enumerate(spans)]


GOOD = {32}  # max_num_seqs of the one config that is truly within 2 %


def _within(flags) -> bool:
    return flags["max_num_seqs"] in GOOD


def test_first_and_stable_hours_follow_the_export_along_the_clock():
    # trial 0: seqs 16, measured 30 s, 0 -> 1 h; trial 1: seqs 32 (truly good), 25 s, 0 -> 2 h;
    # trial 2: seqs 64, 28 s, 1 -> 3 h; trial 3: seqs 128 measured 24 s (lucky, truly bad), 2 -> 2.5 h.
    recs = [_done(0, 16, 30.0), _done(1, 32, 25.0), _done(2, 64, 28.0), _done(3, 128, 24.0)]
    log = _log((0, 0, 1), (1, 0, 2), (2, 1, 3), (3, 2, 2.5))
    timed = S.timeline(recs, log)
    assert [x.record.number for x in timed] == [0, 1, 3, 2]  # the order results reach the loop
    # At 2 h: trial 0 ran 1 h, trial 1 2 h, trial 2 1 h of its 2, trial 3 not yet: 4 worker-hours.
    assert S.gpu_hours_by(2 * H, timed, gpus=2) == pytest.approx(8.0)
    assert S.gpu_hours_by(math.inf, timed, gpus=1) == pytest.approx(1 + 2 + 2 + 0.5)
    p = S.hours_to_within(timed, SPACE, 1, _within)
    # The export picks trial 1 at 2 h (within), then the lucky trial 3 from 2.5 h (not).
    assert p.first == pytest.approx(4.0)
    assert p.stable is None


def test_stable_counts_from_the_export_that_stays_within():
    # trial 0: seqs 32 (truly good) 26 s, 0 -> 1 h; trial 1: seqs 128, a lucky 24 s, 0 -> 1.5 h;
    # trial 2: a confirmation run of trial 0's config, 25 s, 1.5 -> 2.5 h. The export rule picks
    # 32 at 1 h, the lucky 128 at 1.5 h, and the confirmed 32 from 2.5 h on.
    recs = [_done(0, 32, 26.0), _done(1, 128, 24.0), _done(2, 32, 25.0, role=Role.CONFIRM, repeat_of=0)]
    timed = S.timeline(recs, _log((0, 0, 1), (1, 0, 1.5), (2, 1.5, 2.5)))
    assert [S.export_choice(recs[:k], SPACE).flags["max_num_seqs"] for k in (1, 2, 3)] == [32, 128, 32]
    p = S.hours_to_within(timed, SPACE, 1, _within)
    assert p.first == pytest.approx(1.0 + 1.0)  # at 1 h: trial 0's hour and trial 1's first hour
    assert p.stable == pytest.approx(1.0 + 1.5 + 1.0)  # at 2.5 h, everything that ran


def test_the_export_timeline_keeps_each_change_and_scores_against_any_best():
    # The same study as above: the export is 32 at 1 h, the lucky 128 at 1.5 h, 32 again from 2.5 h.
    recs = [_done(0, 32, 26.0), _done(1, 128, 24.0), _done(2, 32, 25.0, role=Role.CONFIRM, repeat_of=0)]
    timed = S.timeline(recs, _log((0, 0, 1), (1, 0, 1.5), (2, 1.5, 2.5)))
    picks = S.export_timeline(timed, SPACE, 1)
    assert [(h, f["max_num_seqs"]) for h, f in picks] == [(pytest.approx(2.0), 32), (pytest.approx(2.5), 128),
                                                          (pytest.approx(3.5), 32)]
    assert S.progress(picks, _within) == S.hours_to_within(timed, SPACE, 1, _within)
    # Had trial 0's confirmation started before the lucky result came in (1 h instead of 1.5 h), it would
    # have been under way then, trial 0's config confirmed already, and the export would not have moved.
    early = S.timeline(recs, _log((0, 0, 1), (1, 0, 1.5), (2, 1, 2)))
    assert [f["max_num_seqs"] for _, f in S.export_timeline(early, SPACE, 1)] == [32]
    # Against a stricter best, under which only 128 would be within, the same timeline reads otherwise.
    p = S.progress(picks, lambda f: f["max_num_seqs"] == 128, lambda f: 0.0 if f["max_num_seqs"] == 128 else 0.5)
    assert p.first == pytest.approx(2.5) and p.stable is None
    assert [r for _, r in p.curve] == [0.5, 0.0, 0.5]
    # A pick that does not change is not written again: a repeat of the export adds nothing.
    more = [*recs, _done(3, 32, 25.5, role=Role.CONFIRM, repeat_of=0)]
    timed = S.timeline(more, _log((0, 0, 1), (1, 0, 1.5), (2, 1.5, 2.5), (3, 2, 3)))
    assert len(S.export_timeline(timed, SPACE, 1)) == 3


def test_never_within_is_none():
    recs = [_done(0, 16, 30.0), _done(1, 64, 25.0)]
    timed = S.timeline(recs, _log((0, 0, 1), (1, 0, 1)))
    p = S.hours_to_within(timed, SPACE, 2, _within)
    assert p.first is None and p.stable is None


def test_a_config_that_never_started_is_never_exported_and_rejections_cost_nothing():
    rejected = TrialRecord(1, State.REJECTED, Role.SEARCH, flags=_flags(32), started=False,
                           failure_reason="predicted startup failure: ...")
    recs = [_done(0, 16, 30.0, started=False), rejected, _done(2, 32, 25.0)]
    log = _log((0, 0, 0.5), (2, 0, 1))  # the rejected trial was never dispatched
    timed = S.timeline(recs, log)
    assert [x.record.number for x in timed] == [0, 2]
    assert S.export_choice(recs[:1], SPACE) is None
    p = S.hours_to_within(timed, SPACE, 1, _within)
    assert p.first == pytest.approx(1.5)


def test_wrongly_rejected_and_wasted_launches():
    def rejected(n, seqs, reason):
        return TrialRecord(n, State.REJECTED, Role.SEARCH, flags=_flags(seqs), started=False, failure_reason=reason)

    recs = [
        _done(0, 16, 0, role=Role.BASELINE, started=False),  # the warm start's, deliberate
        _done(1, 16, 0, started=False),  # a sampled launch that could not start: wasted
        _done(2, 32, 25.0),
        rejected(3, 64, "predicted startup failure, 0.50 GiB of KV memory short beyond ..."),  # starts in truth
        rejected(4, 128, "predicted startup failure: ..."),  # does not start in truth
        rejected(5, 256, "max_num_batched_tokens >= max_num_seqs"),  # a constraint, not the pruning
    ]
    starts_in_truth = {32, 64, 256}
    wrong = S.wrongly_rejected(recs, lambda f: f["max_num_seqs"] in starts_in_truth)
    assert wrong == [3]
    assert S.failed_launches(recs, warm_start=False) == [1]
    assert S.failed_launches(recs, warm_start=True) == [0]


def test_a_repeat_that_finishes_first_does_not_move_the_export_off_a_finalist_still_repeating():
    # Two finalists: trial 0 (seqs 32, truly good) 25 s, trial 1 (seqs 64) 27 s. Their repeats start
    # together at 2 h; 64's (trial 2) lands at 2.5 h, 32's (trial 3) at 3 h. 32's repeat is under way
    # when 64's lands, so 32 counts as confirmed and stays the export: the timeline has no dip to 64.
    recs = [_done(0, 32, 25.0), _done(1, 64, 27.0), _done(2, 64, 27.1, role=Role.CONFIRM, repeat_of=1),
            _done(3, 32, 25.1, role=Role.CONFIRM, repeat_of=0)]
    timed = S.timeline(recs, _log((0, 0, 1), (1, 0, 2), (2, 2, 2.5), (3, 2, 3)))
    assert [f["max_num_seqs"] for _, f in S.export_timeline(timed, SPACE, 1)] == [32]
    # Without the running repeat in view, the first confirmed finalist takes the export until the other's lands.
    assert S.export_choice(recs[:3], SPACE).flags["max_num_seqs"] == 64
    assert S.export_pick(recs[:3], SPACE, repeating={0}).config.flags["max_num_seqs"] == 32
