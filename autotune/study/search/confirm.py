"""Confirmation runs: after the search, the finalists are measured again with fresh server starts.

One measurement of a config is partly luck (the server start, the GPU's clocks): picking the
lowest p99 of 40 single measurements picks the luckiest as much as the best (the winner's
curse). So the last trials of ``study.trials`` are not sampled: the ``finalists`` configs the
export rule would pick from the search (:func:`autotune.study.analysis.export_rule.finalists`) are
measured again, as trials with role ``confirm`` and ``repeat_of`` = the search trial whose
config they repeat, each a new server start and seed on the same fixed benchmark. They are
*raced* (:func:`race`): each finalist once, then whichever contender of the leader has the
fewest runs, until the 95 % intervals separate or the budget (``confirm_trials``: the space's
``finalists x repeats``, at most a quarter of the trial budget) is spent. A race decided
early leaves the rest of the budget unspent. The sampler sees the repeats as more
measurements of the same point.

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
from autotune.study.analysis import ConfigEvidence, config_key, summarize
from autotune.study.analysis.export_rule import Ranking, finalists_in_space
from autotune.study.trials import Role, State, TrialRecord


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


BUDGET_SHARE = 4  # confirmation, and the warm start, each take at most 1/4 of the trial budget
MIN_CONFIRM = 2  # fewer confirmation runs than this tell nothing: none then


def confirm_trials(target: int, confirm: ConfirmSection) -> int:
    """Launched trials confirmation takes from a budget of ``target``: the space's
    ``finalists x repeats``, scaled down to a quarter of the budget (a 12-trial study that
    spent 6 on repeats and 5 on the warm start searched with 1); none when scaling leaves fewer
    than ``MIN_CONFIRM`` of a larger configured number."""
    n = min(confirm.trials, target // BUDGET_SHARE)
    return n if n >= min(MIN_CONFIRM, confirm.trials) else 0


def search_quota(target: int, confirm: ConfirmSection) -> int:
    """Launched trials the search may use out of ``target``; the rest confirm."""
    return target - confirm_trials(target, confirm)


def warm_start_references(target: int, references: int) -> int:
    """References the warm start measures in a budget of ``target`` (the baseline always):
    together at most a quarter of the budget, in the space's order."""
    return max(0, min(references, target // BUDGET_SHARE - 1))


@dataclass(frozen=True)
class BudgetPlan:
    """How a trial budget is spent: the warm start, the search, confirmation."""

    target: int
    warm: int
    search: int
    confirm: int
    searched_flags: int

    @property
    def enough(self) -> bool:
        """Whether the search has a sample per searched flag and one more: fewer cannot vary
        every flag once beyond the warm start, which is no search."""
        return self.search >= self.searched_flags + 1

    def note(self, needed: int | None) -> str:
        """One line for the start, status and the export header ('' when the budget is enough)."""
        if self.enough:
            return ""
        more = f"; --trials {needed} gives it {self.searched_flags + 1}" if needed else ""
        return (f"budget too small to search every flag: {self.target} trials = {self.warm} warm start + "
                f"{self.search} sampled + {self.confirm} confirmation, for {self.searched_flags} searched flags "
                f"(a search needs {self.searched_flags + 1} samples){more}")


def budget_plan(space: SearchSpace, target: int) -> BudgetPlan:
    confirm = confirm_trials(target, space.study.confirm)
    warm = (1 + warm_start_references(target, len(space.references))) if space.study.strategy.warm_start else 0
    return BudgetPlan(target, warm, max(target - confirm - warm, 0), confirm, len(space.params))


def budget_needed(space: SearchSpace, target: int) -> int | None:
    """The smallest budget from ``target`` up that is enough to search (None past 1000)."""
    for t in range(target, 1001):
        if budget_plan(space, t).enough:
            return t
    return None


def budget_note(space: SearchSpace, target: int) -> str:
    """'' or the line saying the budget is too small to search, and what would be enough."""
    plan = budget_plan(space, target)
    return "" if plan.enough else plan.note(budget_needed(space, target))


def leader_repeats(target: int, confirm: ConfirmSection) -> int:
    """Confirmation runs that may go to the search's leader while the search runs: the
    space's ``leader_repeats``, leaving the final race at least ``MIN_CONFIRM``."""
    return max(0, min(confirm.leader_repeats, confirm_trials(target, confirm) - MIN_CONFIRM))


def leader_repeat_after(space: SearchSpace, target: int, k: int) -> int:
    """Finished search trials before the ``k``-th leader repeat (1-based) may come: the
    sampled part of the search split evenly, so the first comes once the sampler has had a
    share of it and the last well before the end."""
    plan = budget_plan(space, target)
    n = leader_repeats(target, space.study.confirm)
    return plan.warm + k * plan.search // (n + 1)


def leader_repeat(recs: Sequence[TrialRecord], space: SearchSpace, target: int) -> TrialRecord | None:
    """The search trial whose config to measure again now, while the search runs, or None.

    The export rule's pick among the finished search trials (the leader) is repeated when it
    stands on one run, up to :func:`leader_repeats` times, each once the search has reached
    :func:`leader_repeat_after`. Until some config is measured twice a study does not know
    its run-to-run spread: the early-stop margin and the sweep's GP assume 5 %, and where
    one run is 10-20 % off its config's mean, the luckiest early run becomes the front that
    every later benchmark is stopped against. One repeat of the leader measures the spread
    and tells luck from merit before the final race, whose budget it comes out of."""
    n = leader_repeats(target, space.study.confirm)
    # A FAILED repeat measured nothing and has been re-enqueued: the re-run counts, not it.
    confirms = [r for r in recs if r.role == Role.CONFIRM and r.state != State.FAILED]
    if len(confirms) >= n:
        return None
    search = [r for r in recs if r.role != Role.CONFIRM and r.state == State.COMPLETE]
    if len(search) < leader_repeat_after(space, target, len(confirms) + 1):
        return None
    lead = finalists_in_space(summarize(search, space).configs, space, 1)
    if not lead or lead[0].n > 1 or any(r.repeat_of == lead[0].first.number for r in confirms):
        return None
    return lead[0].first


def next_step(recs: Sequence[TrialRecord], space: SearchSpace, target: int) -> Step:
    """What a driver should launch next in a study of ``target`` launched trials."""
    quota = search_quota(target, space.study.confirm)
    search = [r for r in recs if r.role != Role.CONFIRM]
    done = sum(r.state == State.COMPLETE for r in search)
    running = sum(r.state == State.RUNNING for r in search)
    if done + running < quota:
        if any(r.role == Role.CONFIRM and r.state == State.WAITING for r in recs):
            return Step(Kind.ASK)
        lead = leader_repeat(recs, space, target)
        return Step(Kind.CONFIRM, lead) if lead is not None else Step(Kind.SEARCH)
    if quota == target:  # no confirmation
        return Step(Kind.WAIT if running else Kind.DONE)
    if running:
        return Step(Kind.WAIT)  # the finalists are chosen from every search result
    final = finalists_in_space(summarize(search, space).configs, space, space.study.confirm.finalists)
    if not final:  # nothing served: the budget goes back to the search
        return Step(Kind.SEARCH if done < target else Kind.DONE)
    confirms = [r for r in recs if r.role == Role.CONFIRM]
    if any(r.state == State.WAITING for r in confirms):
        return Step(Kind.ASK)
    # A FAILED repeat has been re-enqueued (WAITING above, then counted here once it runs).
    spent = [r for r in confirms if r.state in (State.RUNNING, State.COMPLETE, State.REJECTED)]
    pick = None
    if len(spent) < confirm_trials(target, space.study.confirm):
        pick = race(final, recs, space, Counter(r.repeat_of for r in spent))
    if pick is not None:
        return Step(Kind.CONFIRM, pick.first)
    return Step(Kind.WAIT if any(r.state == State.RUNNING for r in confirms) else Kind.DONE)


def race(final: Sequence[ConfigEvidence], recs: Sequence[TrialRecord], space: SearchSpace,
         repeats_of: Counter[int | None]) -> ConfigEvidence | None:
    """The finalist to measure again, or None once the race is decided.

    Every finalist is repeated once first (the best first). Then the leader (the best
    pessimistic end of the ranked metric's 95 % interval, as the export ranks) and the
    finalists whose optimistic end still reaches past it are the contenders: the one with the
    fewest runs goes again (the leader on a tie), until no finalist overlaps the leader (the
    intervals separate: the remaining budget is not spent) or the budget is. A lone finalist
    gets the whole budget."""
    for f in final:
        if repeats_of[f.first.number] == 0:
            return f
    if len(final) == 1:  # no race to decide: the budget tightens the one finalist's interval
        return final[0]
    rank = Ranking.for_space(space)
    keys = {config_key(f.flags) for f in final}
    now = {config_key(c.flags): c for c in summarize(recs, space).configs if config_key(c.flags) in keys}
    current = [now.get(config_key(f.flags), f) for f in final]
    leader = min(current, key=rank.cost)
    contenders = [leader, *(c for c in current if c is not leader and _reaches(c, leader, rank))]
    if len(contenders) == 1:
        return None
    runs = {config_key(c.flags): c.n + repeats_of[c.first.number] - _done_repeats(c) for c in contenders}
    best = min(contenders, key=lambda c: (runs[config_key(c.flags)], c is not leader))
    return next(f for f in final if config_key(f.flags) == config_key(best.flags))


def _reaches(c: ConfigEvidence, leader: ConfigEvidence, rank: Ranking) -> bool:
    """Whether ``c``'s optimistic end is better than the leader's pessimistic end."""
    i = c.interval(rank.metric)
    optimistic = i.high if rank.maximize else i.low
    if optimistic != optimistic:  # NaN: nothing measured to judge by
        return True
    return (-optimistic if rank.maximize else optimistic) < rank.cost(leader)


def _done_repeats(c: ConfigEvidence) -> int:
    """Confirmation runs of ``c`` already among its full runs (counted once with the running)."""
    return sum(1 for r in c.runs if r.role == Role.CONFIRM)
