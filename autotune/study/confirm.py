"""Confirmation runs: after the search, the finalists are measured again with fresh server starts.

One measurement of a config is partly luck (the server start, the GPU's clocks): picking the
lowest p99 of 40 single measurements picks the luckiest as much as the best (the winner's
curse). So the last ``finalists x repeats`` trials of ``study.trials`` (``study.confirm``)
are not sampled: the ``finalists`` configs the export rule would pick from the search
(:func:`autotune.study.export_rule.finalists`) are enqueued again, ``repeats`` times each,
as trials with role ``confirm`` and ``repeat_of`` = the search trial whose config they
repeat. Each is a new trial, so a new server start and a new seed on the same fixed
benchmark; the sampler sees them as more measurements of the same point. A study with fewer
than twice that many trials runs no confirmation (it would be mostly confirmation).

Crash safety needs no state of its own: what to do next is decided from the stored trials
alone (:func:`next_step`), before every launch. A repeat is enqueued just before it is
asked; a driver killed between the two leaves a WAITING repeat that the next driver asks
first; one killed while a repeat runs leaves a RUNNING trial that recovery fails and
re-enqueues with the same ``repeat_of`` (recovery.fail_and_requeue). The finalists are a
function of the search's trials, which are all finished before confirmation starts, so a
resumed driver computes the same ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from autotune.space import SearchSpace
from autotune.space.schema import ConfirmSection
from autotune.study.evidence import summarize
from autotune.study.export_rule import DEFAULT_MAX_OOM_PER_1K, Ranking, finalists
from autotune.study.record import Role, State, TrialRecord


class Kind(StrEnum):
    SEARCH = "search"  # ask the sampler (or a re-run the storage holds)
    ASK = "ask"  # a confirmation run is already enqueued: ask it
    CONFIRM = "confirm"  # enqueue a confirmation run of ``finalist``, then ask it
    WAIT = "wait"  # trials still running decide what comes next
    DONE = "done"


@dataclass(frozen=True)
class Step:
    kind: Kind
    finalist: TrialRecord | None = None  # CONFIRM: the first run of the config to measure again


def search_quota(target: int, confirm: ConfirmSection) -> int:
    """Launched trials the search may use out of ``target``; the rest confirm."""
    n = confirm.trials
    return target - n if n and target >= 2 * n else target


def repeats(n_finalists: int, confirm: ConfirmSection) -> list[int]:
    """Repeats per finalist: ``repeats`` each; with fewer finalists than asked for, the
    confirmation budget is shared out among those there are, so the study's total holds."""
    base, extra = divmod(confirm.trials, n_finalists)
    return [base + (i < extra) for i in range(n_finalists)]


def next_step(recs: Sequence[TrialRecord], space: SearchSpace, target: int) -> Step:
    """What a driver should launch next in a study of ``target`` launched trials."""
    quota = search_quota(target, space.study.confirm)
    search = [r for r in recs if r.role != Role.CONFIRM]
    done = sum(r.state == State.COMPLETE for r in search)
    running = sum(r.state == State.RUNNING for r in search)
    if done + running < quota:
        return Step(Kind.SEARCH)
    if quota == target:  # no confirmation
        return Step(Kind.WAIT if running else Kind.DONE)
    if running:
        return Step(Kind.WAIT)  # the finalists are chosen from every search result
    final = finalists(summarize(search, space).configs, space.study.confirm.finalists, DEFAULT_MAX_OOM_PER_1K,
                      space.export.min_headroom_gib, Ranking.for_space(space))
    if not final:  # nothing served: the budget goes back to the search
        return Step(Kind.SEARCH if done < target else Kind.DONE)
    confirms = [r for r in recs if r.role == Role.CONFIRM]
    if any(r.state == State.WAITING for r in confirms):
        return Step(Kind.ASK)
    # A FAILED repeat has been re-enqueued (WAITING above, then counted here once it runs).
    have = Counter(r.repeat_of for r in confirms if r.state in (State.RUNNING, State.COMPLETE, State.REJECTED))
    short = [(want - have[f.first.number], -i) for i, (f, want) in enumerate(zip(final, repeats(len(final), space.study.confirm), strict=True))]
    missing, neg_i = max(short)
    if missing > 0:
        return Step(Kind.CONFIRM, final[-neg_i].first)
    return Step(Kind.WAIT if any(r.state == State.RUNNING for r in confirms) else Kind.DONE)
