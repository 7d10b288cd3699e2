"""Confirmation runs in the trial loop: which configs, how many runs, and what a crash leaves.

In-process (an in-memory study, a pool that runs each request at once); each trial's p99 is
a fixed function of its flags times noise drawn from its seed, so repeats of one config
differ as fresh server starts do. The real-subprocess kill test is in
tests/reliability/test_confirm_kill.py.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable

import optuna

from autotune.backends.base import TrialRequest
from autotune.results import RequestRecord, TrialResult, TrialStatus
from autotune.space.schema import SearchSpace
from autotune.study.analysis.evidence import summarize
from autotune.study.analysis.export_rule import DEFAULT_MAX_OOM_PER_1K, finalists
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.confirm import (
    Kind,
    confirm_trials,
    leader_repeat_after,
    leader_repeats,
    next_step,
    race,
    search_quota,
)
from autotune.study.search.samplers import make_sampler
from autotune.study.trials.record import Role, State, enqueue_attrs, records
from tests.fakes.pools import InlinePool

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space(confirm: dict | None = None, params: dict | None = None, leader_repeats: int = 0) -> SearchSpace:
    """The final race alone unless ``leader_repeats`` (the search's leader measured again
    while it runs: test_the_search_repeats_its_lucky_leader_while_it_runs)."""
    confirm = {"leader_repeats": leader_repeats, **(confirm or {})}
    return SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "noop", "model": "m"},
        "params": params or {"max_num_seqs": {"type": "int", "low": 16, "high": 256},
                             "block_size": {"type": "categorical", "choices": [16, 32]}},
        "workload": {"num_requests": 50},
        "study": {"sampler": "random", "strategy": {"warm_start": False}, "confirm": confirm},
    })


def _noisy(request: TrialRequest) -> TrialResult:
    h = int(hashlib.sha256(repr(sorted(request.flags.items())).encode()).hexdigest()[:8], 16)
    speed = random.Random(request.seed).lognormvariate(0.0, 0.03)  # a server start's luck
    base = (20.0 + (h % 1000) / 100.0) * speed
    n = request.workload.num_requests
    recs = [RequestRecord(i, 0.0, 0.1, base * (0.5 + i / (2 * n)), 10, 10) for i in range(n)]
    return TrialResult(TrialStatus.OK, "inline", records=recs, requests_issued=n, duration_s=base)


def two_workers(die: frozenset[int] | set[int] = frozenset(), run: Callable[[TrialRequest], TrialResult] = _noisy) -> InlinePool:
    """Two workers; ``die`` names trial numbers whose worker dies under them."""
    return InlinePool(lambda r: "worker 0 died: killed" if r.trial_number in die else run(r), size=2)


def _run(space: SearchSpace, target: int, pool: InlinePool | None = None, study: optuna.Study | None = None) -> optuna.Study:
    study = study or open_study(space, "t", None, make_sampler("random", space, 0)).study
    TrialLoop(study, space, pool or two_workers(), target=target, seed=0).run()
    return study


def _expected_finalists(study: optuna.Study, space: SearchSpace) -> list[int]:
    search = [r for r in records(study.trials) if r.role != Role.CONFIRM]
    return [c.first.number for c in finalists(summarize(search, space).configs, space.study.confirm.finalists,
                                              DEFAULT_MAX_OOM_PER_1K, space.export.min_headroom_gib)]


def _confirm_counts(recs, complete_only: bool = False) -> Counter:
    return Counter(r.repeat_of for r in recs if r.role == Role.CONFIRM and (r.state == State.COMPLETE or not complete_only))


def test_the_last_trials_race_the_finalists_with_fresh_seeds_and_no_early_stop():
    space = _space()  # defaults: 3 finalists x 2 repeats = 6 confirmation runs, a quarter of 24 trials
    pool = two_workers()
    study = _run(space, 24, pool)
    recs = records(study.trials)
    assert all(r.state == State.COMPLETE for r in recs)
    search, confirm = recs[:18], recs[18:]
    assert all(r.role == Role.SEARCH for r in search) and confirm and all(r.role == Role.CONFIRM for r in confirm)
    final = _expected_finalists(study, space)
    assert len(final) == 3
    counts = _confirm_counts(recs)
    assert set(counts) == set(final) and all(n >= 1 for n in counts.values())  # each finalist at least once
    assert sum(counts.values()) <= 6  # the budget, or less when the race was decided early
    if sum(counts.values()) < 6:
        evidence = [c for c in summarize(recs, space).configs if c.first.number in final]
        assert race(evidence, recs, space, counts) is None
    for r in confirm:
        assert r.flags == recs[r.repeat_of].flags and r.params == recs[r.repeat_of].params
    by_number = {q.trial_number: q for q in pool.requests}
    assert all(by_number[r.number].early_stop is None for r in confirm)
    assert len({q.seed for q in pool.requests}) == len(recs)  # every run draws its own noise
    repeated = [c for c in summarize(recs, space).configs if c.n > 1]
    assert sorted(c.first.number for c in repeated) == sorted(final)


def test_the_search_repeats_its_lucky_leader_while_it_runs():
    """Up to ``leader_repeats`` confirmation runs go to the search's leader while the search
    runs, each when the leader stands on one run, out of the same budget; the final race
    gets the rest."""
    space = _space(leader_repeats=2)
    confirm = space.study.confirm
    assert [leader_repeats(t, confirm) for t in (7, 8, 12, 24, 40)] == [0, 0, 1, 2, 2]  # the race keeps 2
    assert [leader_repeat_after(space, 24, k) for k in (1, 2)] == [6, 12]  # 18 searched: thirds
    study = _run(space, 24)
    recs = records(study.trials)
    assert all(r.state == State.COMPLETE for r in recs) and len(recs) <= 24  # fewer: the race was decided
    assert sum(r.role != Role.CONFIRM for r in recs) == search_quota(24, confirm) == 18
    last_search = max(r.number for r in recs if r.role != Role.CONFIRM)
    early = [r for r in recs if r.role == Role.CONFIRM and r.number < last_search]
    assert 1 <= len(early) <= 2
    for k, r in enumerate(early, start=1):
        before = [q for q in recs if q.role != Role.CONFIRM and q.finished_at < r.started_at]  # what it was decided on
        assert len(before) >= leader_repeat_after(space, 24, k)
        lead = finalists(summarize(before, space).configs, 1, DEFAULT_MAX_OOM_PER_1K, space.export.min_headroom_gib)[0]
        assert r.repeat_of == lead.first.number and lead.n == 1  # the leader, on one run
    assert sum(r.role == Role.CONFIRM for r in recs) <= confirm_trials(24, confirm)
    counts = _confirm_counts(recs)
    assert all(counts[n] >= 1 for n in _expected_finalists(study, space))  # the final race ran as well


def test_a_worker_dying_under_a_leader_repeat_reruns_it_and_the_study_completes():
    space = _space(leader_repeats=2)
    first = next(r.number for r in records(_run(space, 24).trials) if r.role == Role.CONFIRM)
    study = _run(space, 24, two_workers(die={first}))  # the same study, its first leader repeat's worker dies
    recs = records(study.trials)
    failed = [r for r in recs if r.state == State.FAILED]
    assert [r.number for r in failed] == [first] and failed[0].role == Role.CONFIRM
    rerun = next(r for r in recs if r.requeued_from == first)
    assert rerun.role == Role.CONFIRM and rerun.repeat_of == failed[0].repeat_of and rerun.state == State.COMPLETE
    assert sum(r.role != Role.CONFIRM and r.state == State.COMPLETE for r in recs) == 18
    done = [r for r in recs if r.role == Role.CONFIRM and r.state == State.COMPLETE]
    assert 1 <= len(done) <= confirm_trials(24, space.study.confirm)


def test_the_race_repeats_contenders_and_stops_once_the_intervals_separate():
    """Two finalists 1 % apart keep being raced; one 40 % behind drops out after one repeat."""
    space = _space(params={"block_size": {"type": "categorical", "choices": [16, 32]},
                           "max_num_seqs": {"type": "categorical", "choices": [16, 64, 256]}})

    def three_levels(request: TrialRequest) -> TrialResult:
        base = {16: 20.0, 64: 20.2, 256: 28.0}[request.flags["max_num_seqs"]] + (request.flags["block_size"] == 32) * 9
        speed = random.Random(request.seed).lognormvariate(0.0, 0.03)
        n = request.workload.num_requests
        recs = [RequestRecord(i, 0.0, 0.1, base * speed * (0.5 + i / (2 * n)), 10, 10) for i in range(n)]
        return TrialResult(TrialStatus.OK, "inline", records=recs, requests_issued=n, duration_s=base)

    study = _run(space, 40, two_workers(run=three_levels))
    recs = records(study.trials)
    counts = _confirm_counts(recs)
    seqs = {n: recs[n].flags["max_num_seqs"] for n in counts}
    by_seqs = {seqs[n]: k for n, k in counts.items()}
    assert by_seqs[256] == 1  # clearly behind: measured once more, then out of the race
    assert by_seqs[16] + by_seqs[64] == sum(counts.values()) - 1 >= 3  # the close two share the rest


def test_small_studies_and_zero_switch_confirmation_off():
    confirm = _space().study.confirm
    assert [confirm_trials(t, confirm) for t in (7, 8, 12, 24, 40)] == [0, 2, 3, 6, 6]  # a quarter, at most 6
    assert search_quota(11, confirm) == 9
    for space, target in ((_space(), 7), (_space({"finalists": 0}), 12), (_space({"repeats": 0}), 12)):
        study = _run(space, target)
        assert all(r.role == Role.SEARCH for r in records(study.trials))
        assert len(study.trials) == target


def test_fewer_configs_than_finalists_share_the_confirmation_budget():
    # Two configs in the whole space: 2 finalists share the 6 repeats.
    space = _space(params={"block_size": {"type": "categorical", "choices": [16, 32]}})
    study = _run(space, 24)
    recs = records(study.trials)
    assert all(r.state == State.COMPLETE for r in recs)
    counts = _confirm_counts(recs)
    assert len(counts) == 2 and all(n >= 1 for n in counts.values()) and sum(counts.values()) <= 6


def test_a_worker_dying_under_a_repeat_reruns_that_repeat_once():
    space = _space()
    pool = two_workers(die={18})  # the first confirmation run of a 24-trial study
    study = _run(space, 24, pool)
    recs = records(study.trials)
    failed = [r for r in recs if r.state == State.FAILED]
    assert [r.number for r in failed] == [18] and failed[0].role == Role.CONFIRM
    rerun = next(r for r in recs if r.requeued_from == 18)
    assert rerun.role == Role.CONFIRM and rerun.repeat_of == failed[0].repeat_of and rerun.state == State.COMPLETE
    final = _expected_finalists(study, space)
    done = _confirm_counts(recs, complete_only=True)
    assert set(done) == set(final) and sum(done.values()) <= 6
    assert sum(r.state == State.COMPLETE for r in recs) == 18 + sum(done.values())


def test_a_repeat_left_enqueued_by_a_killed_driver_is_run_not_duplicated():
    space = _space()
    study = _run(_space({"finalists": 0}), 18)  # the search of the 24-trial study alone
    final = _expected_finalists(study, space)
    # A driver of the 24-trial study was killed between enqueueing a repeat and asking it.
    study.enqueue_trial(records(study.trials)[final[1]].params,
                        user_attrs=enqueue_attrs(Role.CONFIRM, repeat_of=final[1]))
    assert next_step(records(study.trials), space, 24).kind == Kind.ASK
    _run(space, 24, study=study)
    recs = records(study.trials)
    assert not [r for r in recs if r.state in (State.WAITING, State.RUNNING)]
    counts = _confirm_counts(recs)
    assert set(counts) == set(final) and sum(counts.values()) <= 6
    assert counts[final[1]] >= 1 and len(recs) == 18 + sum(counts.values())  # the enqueued repeat ran, once
    assert next_step(recs, space, 24).kind == Kind.DONE
