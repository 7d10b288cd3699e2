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
from autotune.study.confirm import Kind, next_step, search_quota
from autotune.study.driver import TrialLoop
from autotune.study.evidence import summarize
from autotune.study.export_rule import DEFAULT_MAX_OOM_PER_1K, finalists
from autotune.study.opening import open_study
from autotune.study.record import Role, State, enqueue_attrs, records
from autotune.study.samplers import make_sampler
from tests.fakes.pools import InlinePool

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space(confirm: dict | None = None, params: dict | None = None) -> SearchSpace:
    return SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "noop", "model": "m"},
        "params": params or {"max_num_seqs": {"type": "int", "low": 16, "high": 256},
                             "block_size": {"type": "categorical", "choices": [16, 32]}},
        "workload": {"num_requests": 50},
        "study": {"sampler": "random", "strategy": {"warm_start": False},
                  **({"confirm": confirm} if confirm is not None else {})},
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


def test_the_last_trials_repeat_the_finalists_with_fresh_seeds_and_no_early_stop():
    space = _space()  # defaults: 3 finalists x 2 repeats out of the 12 trials
    pool = two_workers()
    study = _run(space, 12, pool)
    recs = records(study.trials)
    assert [r.state for r in recs] == [State.COMPLETE] * 12
    assert [r.role for r in recs] == [Role.SEARCH] * 6 + [Role.CONFIRM] * 6
    final = _expected_finalists(study, space)
    assert len(final) == 3
    assert Counter(r.repeat_of for r in recs if r.role == Role.CONFIRM) == {n: 2 for n in final}
    for r in recs[6:]:
        assert r.flags == recs[r.repeat_of].flags and r.params == recs[r.repeat_of].params
    by_number = {q.trial_number: q for q in pool.requests}
    assert all(by_number[r.number].early_stop is None for r in recs[6:])
    assert len({q.seed for q in pool.requests}) == 12  # every run draws its own noise
    # The evidence groups each finalist's three runs.
    repeated = [c for c in summarize(recs, space).configs if c.n > 1]
    assert sorted(c.first.number for c in repeated) == sorted(final) and all(c.n == 3 for c in repeated)


def test_small_studies_and_zero_switch_confirmation_off():
    assert search_quota(11, _space().study.confirm) == 11  # under 2 x 6: a study of mostly repeats
    for space, target in ((_space(), 8), (_space({"finalists": 0}), 12), (_space({"repeats": 0}), 12)):
        study = _run(space, target)
        assert all(r.role == Role.SEARCH for r in records(study.trials))
        assert len(study.trials) == target


def test_fewer_configs_than_finalists_share_the_confirmation_budget():
    # Two configs in the whole space: 2 finalists share the 6 repeats, 3 each.
    space = _space(params={"block_size": {"type": "categorical", "choices": [16, 32]}})
    study = _run(space, 12)
    recs = records(study.trials)
    assert len(recs) == 12 and all(r.state == State.COMPLETE for r in recs)
    counts = Counter(r.repeat_of for r in recs if r.role == Role.CONFIRM)
    assert sorted(counts.values()) == [3, 3]


def test_a_worker_dying_under_a_repeat_reruns_that_repeat_once():
    space = _space()
    pool = two_workers(die={7})
    study = _run(space, 12, pool)
    recs = records(study.trials)
    failed = [r for r in recs if r.state == State.FAILED]
    assert [r.number for r in failed] == [7] and failed[0].role == Role.CONFIRM
    rerun = next(r for r in recs if r.requeued_from == 7)
    assert rerun.role == Role.CONFIRM and rerun.repeat_of == failed[0].repeat_of and rerun.state == State.COMPLETE
    final = _expected_finalists(study, space)
    done = Counter(r.repeat_of for r in recs if r.role == Role.CONFIRM and r.state == State.COMPLETE)
    assert done == {n: 2 for n in final}
    assert sum(r.state == State.COMPLETE for r in recs) == 12


def test_a_repeat_left_enqueued_by_a_killed_driver_is_run_not_duplicated():
    space = _space()
    study = _run(space, 6)  # the search alone (6 < 2 x 6: no confirmation in a 6-trial study)
    final = _expected_finalists(study, space)
    # A driver of the 12-trial study was killed between enqueueing a repeat and asking it.
    study.enqueue_trial(records(study.trials)[final[1]].params,
                        user_attrs=enqueue_attrs(Role.CONFIRM, repeat_of=final[1]))
    assert next_step(records(study.trials), space, 12).kind == Kind.ASK
    _run(space, 12, study=study)
    recs = records(study.trials)
    assert not [r for r in recs if r.state in (State.WAITING, State.RUNNING)]
    assert Counter(r.repeat_of for r in recs if r.role == Role.CONFIRM) == {n: 2 for n in final}
    assert sum(r.state == State.COMPLETE for r in recs) == 12
    assert next_step(recs, space, 12).kind == Kind.DONE
