"""Scoring one study against its truth: what it exports, what that costs, what it threw away.

Everything is judged by the truth's noise-free values (:class:`experiments.reality_gap.truth.Truth`),
never by the study's own measurements, so a lucky measurement earns nothing.

* **Export**: autotune's export rule (``autotune.study.analysis.export_rule``: the confirmed and
  OOM-shown configs first, lowest p99 upper bound, headroom margin) with the OOM limit of 1
  per 1000, for every strategy alike: what a user of that study would deploy.
* **GPU-hours**: a worker holds its GPUs (2 for a TP 2 engine) for a trial's ``gpu_time_s``
  (startup, restarts, benchmark; an early stop shortens it). ``gpu_hours_to_2pct``: the
  trials complete in the order of the simulated clock; after each completion the export rule
  is applied to the trials completed so far; the first time its choice is truly within 2 %
  of the best and meets the OOM limit, the GPU-hours spent by then count, including the
  part of the trials still running that has elapsed. ``..._stable``: the same from the
  completion after which the choice stays within 2 % to the end. The choice after each
  completion where it changed is the row's ``export_timeline`` (``[GPU-hours, flags]``), from
  which these figures follow against any best (``..._space``: the refined best, refine.py).
* **Wrongly rejected**: samples the memory-model pruning rejected ("predicted startup
  failure") that start under the truth.
* **Wasted launches**: sampled or confirmation trials launched that could not start; the
  warm start's vLLM-defaults baseline and references are launched on purpose and counted
  apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.space import SearchSpace
from autotune.study.analysis import Choice, ConfigEvidence, config_key, summarize
from autotune.study.analysis.export_rule import choose_in_space, repeated_by
from autotune.study.trials import Role, State, TrialRecord
from experiments.reality_gap.truth import OOM_LIMIT
from experiments.search.harness import Dispatch

PRUNED = "predicted startup failure"  # how the pruning's rejection reasons begin (study/search/pruning.py)
WARM_START = (Role.BASELINE, Role.REFERENCE)


@dataclass(frozen=True)
class Timed:
    """A launched trial on the simulated clock."""

    record: TrialRecord
    start_s: float
    end_s: float


def timeline(recs: Sequence[TrialRecord], log: Sequence[Dispatch]) -> list[Timed]:
    """Launched trials in the order their results reached the loop (end time, then dispatch)."""
    by_number = {r.number: r for r in recs}
    ordered = sorted(log, key=lambda d: (d.end_s, d.order))
    return [Timed(by_number[d.trial], d.start_s, d.end_s) for d in ordered if by_number[d.trial].launched]


def gpu_hours_by(t: float, timed: Sequence[Timed], gpus: int) -> float:
    """GPU-hours spent up to simulated time ``t`` (running trials count their elapsed part)."""
    return gpus * sum(max(0.0, min(x.end_s, t) - x.start_s) for x in timed) / 3600.0


def export_pick(recs: Sequence[TrialRecord], space: SearchSpace, repeating: Collection[int] = ()) -> Choice | None:
    """autotune's export rule on ``recs`` (``choose_for_export``'s rule), with its reasons;
    ``repeating``: the trials whose configs a confirmation run still running measures again."""
    return choose_in_space(summarize(recs, space).configs, space, OOM_LIMIT, repeating)


def export_choice(recs: Sequence[TrialRecord], space: SearchSpace) -> ConfigEvidence | None:
    """The config autotune's export rule picks from ``recs``."""
    choice = export_pick(recs, space)
    return None if choice is None else choice.config


@dataclass(frozen=True)
class Progress:
    first: float | None  # GPU-hours until the export is first truly within 2 %
    stable: float | None  # GPU-hours from which it stays within 2 % to the end
    curve: tuple[tuple[float, float], ...] = ()  # (GPU-hours, true regret of the export from then), capped;
    # a point where the export changed (the regret is a step function between them)


REGRET_CAP = 1.0  # no export, one over the OOM limit, or one that does not serve: regret 100 %


Pick = tuple[float, "dict[str, Any] | None"]  # (GPU-hours spent, the export rule's pick from then on)

# Which rule :func:`export_changes` applied, written into each row as ``timeline_rule``: a row without
# it was timed before the rule counted a finalist whose repeat is running as confirmed (d48d57f), so
# its timeline and every GPU-hour figure read from it are the earlier rule's; its export is the same.
TIMELINE_RULE = "repeats-under-way"


def export_changes(timed: Sequence[Timed], space: SearchSpace) -> list[tuple[Timed, Choice | None]]:
    """The export rule's pick (with its reasons) after each completion where it changed: the completion
    and the pick, None while nothing is exportable."""
    out: list[tuple[Timed, Choice | None]] = []
    done: list[TrialRecord] = []
    last: object = object()  # no pick seen yet, not even "none"
    for i, x in enumerate(timed):
        done.append(x.record)
        c = export_pick(done, space, _repeating_at(x.end_s, timed[i + 1:]))
        key = None if c is None else config_key(c.config.flags)
        if key != last:
            out.append((x, c))
            last = key
    return out


def _repeating_at(t: float, later: Sequence[Timed]) -> set[int]:
    """What ``repeats_under_way`` sees when a result arrives at simulated time ``t``: the
    confirmation runs started before it that finish later (one dispatched at ``t`` is dispatched
    after that result, by the loop that took it in)."""
    return repeated_by(y.record for y in later if y.start_s < t)


def export_timeline(timed: Sequence[Timed], space: SearchSpace, gpus: int) -> list[Pick]:
    """:func:`export_changes` as (GPU-hours spent by then, the pick's flags or None). Written into each
    row, so a row can be scored against another best (refine.py's) without running its study again."""
    return [(gpu_hours_by(x.end_s, timed, gpus), None if c is None else dict(c.config.flags))
            for x, c in export_changes(timed, space)]


def progress(picks: Sequence[Pick], within: Callable[[Mapping[str, Any]], bool],
             regret: Callable[[Mapping[str, Any]], float] | None = None) -> Progress:
    """First and stable GPU-hours to within 2 %, and the regret curve, along an export timeline.
    ``within(flags)``: whether a config is truly within 2 % and the OOM limit; ``regret(flags)``:
    its true regret (NaN or over the limit: capped), for the curve."""
    first = stable = None
    curve: list[tuple[float, float]] = []
    for hours, flags in picks:
        ok = flags is not None and within(flags)
        curve.append((hours, _capped(regret(flags)) if flags is not None and regret else REGRET_CAP))
        if ok and first is None:
            first = hours
        stable = (stable if stable is not None else hours) if ok else None
    return Progress(first, stable, tuple(curve))


def hours_to_within(timed: Sequence[Timed], space: SearchSpace, gpus: int,
                    within: Callable[[Mapping[str, Any]], bool],
                    regret: Callable[[Mapping[str, Any]], float] | None = None) -> Progress:
    """:func:`progress` along the study's own export timeline."""
    return progress(export_timeline(timed, space, gpus), within, regret)


def true_regret(truth: Any, flags: Mapping[str, Any], best: Mapping[str, Any] | None = None) -> float:
    """The true regret of exporting ``flags`` against the truth's best (or ``best``); NaN when it
    does not serve or is over the OOM limit (the regret curve caps both)."""
    row = truth.value(flags)
    if not row["started"] or float(row["oom_per_1k"]) > OOM_LIMIT:
        return math.nan
    return truth.regret(row) if best is None else truth.regret(row, best)  # a replayed table has one best


def _capped(r: float) -> float:
    return REGRET_CAP if r is None or math.isnan(r) else min(max(r, 0.0), REGRET_CAP)


def regret_auc(curve: Sequence[tuple[float, float]], budget_hours: float) -> float:
    """Area under the regret-vs-GPU-hours step curve from 0 to ``budget_hours``, divided by
    ``budget_hours`` (0: truly best from the start; 1: nothing within reach). The regret is
    ``REGRET_CAP`` until the first export and keeps its last value after the study ends."""
    if budget_hours <= 0:
        return math.nan
    area, h0, r0 = 0.0, 0.0, REGRET_CAP
    for h, r in curve:
        h = min(h, budget_hours)
        area += r0 * max(h - h0, 0.0)
        h0, r0 = max(h0, h), r
    area += r0 * max(budget_hours - h0, 0.0)
    return area / budget_hours


def wrongly_rejected(recs: Sequence[TrialRecord], starts: Callable[[Mapping[str, Any]], bool]) -> list[int]:
    """Trials the pruning rejected although the config starts under the truth."""
    return [r.number for r in recs
            if r.state == State.REJECTED and r.failure_reason.startswith(PRUNED) and starts(r.flags)]


def failed_launches(recs: Sequence[TrialRecord], warm_start: bool) -> list[int]:
    """Launched trials that could not start: the warm start's (``warm_start``) or the others."""
    return [r.number for r in recs if r.launched and not r.started and (r.role in WARM_START) == warm_start]


def finite_or_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
