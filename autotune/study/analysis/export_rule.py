"""The rule that picks one config to deploy, from what the data supports (docs/export.md).

1. Candidates: every config run in full whose every run served and met the study's
   constraints (:mod:`autotune.study.analysis.evidence`).
2. OOMs: the configs whose OOM rate is *shown* to be within the limit (exact one-sided 95 %
   upper bound over all their requests) come first; if there is none, those whose measured
   rate is within it (and the export says what is not shown, and how many more requests
   would show it); with ``export.oom_model``, a config the hazard refitted to the study's engine
   deaths predicts over the limit (:mod:`autotune.calibrate.hazard`) comes after both; if
   there is none either, the lowest measured rate.
3. Confirmed first: when configs among those were measured again by confirmation runs,
   only they compete. The others lost to them on the search's single measurements already,
   and the best of many single measurements is the luckiest as much as the best (the
   winner's curse), which no interval of one run accounts for. A config whose confirmation run
   is under way counts as confirmed already: otherwise, while the finalists' repeats run, the
   export would jump to whichever finalist's repeat happened to finish first and back when the
   better one's lands (seen on the reality-gap benchmark's development truths).
   Rank: among them, by the space's first objective other than OOMs (:class:`Ranking`;
   p99_e2e_s when there is none), at the pessimistic end of its 95 % interval: the lowest
   upper end for a latency, for goodput or throughput the mean divided by (1 + the interval's
   relative half-width) (with the pooled run-to-run spread, so among configs run equally
   often this is the best mean, and a config run fewer times pays for its wider interval).
   With no config measured twice there is no interval; the measured value ranks.
4. Margin: a config whose memory headroom per GPU is below ``export.min_headroom_gib``, or
   whose gpu_memory_utilization is at ``export.gmu_edge`` or above (when set), is passed over
   while a config with that margin has a mean within the interval of the best one.

Ties fall to the lower trial number. The same rule, applied again to what is left (and
without step 3's preference), names the finalists confirmation measures again (:func:`finalists`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

import optuna

from autotune.space import SearchSpace
from autotune.study.analysis.evidence import OOM_METRIC, ConfigEvidence, StudyEvidence, summarize
from autotune.study.trials import Role, State, TrialRecord, records

LATENCY = "p99_e2e_s"
GMU = "gpu_memory_utilization"
# The OOM limit confirmation chooses its finalists for: `autotune export`'s default.
DEFAULT_MAX_OOM_PER_1K = 1.0

# OOM tiers: within the limit with 95 % confidence; as measured; as measured but predicted over it by
# the hazard refitted to the study's engine deaths (export.oom_model); over it as measured.
SHOWN, MEASURED, PREDICTED_OVER, OVER = 0, 1, 2, 3


@dataclass(frozen=True)
class Choice:
    config: ConfigEvidence
    rule: str  # what picked it, in words
    tier: int  # SHOWN, MEASURED, PREDICTED_OVER or OVER (of the OOM limit)
    notes: list[str] = field(default_factory=list)  # what the data does not support, and why this one anyway

    @property
    def trial(self) -> TrialRecord:
        """The trial that stands for the config (its first full run)."""
        return self.config.first


@dataclass(frozen=True)
class Ranking:
    """What the export ranks configs by once OOMs are settled: the space's first objective
    other than ``oom_per_1k``, in its direction (a goodput study must not deploy the
    lowest-latency config); p99_e2e_s when the objectives name no other metric."""

    metric: str = LATENCY
    maximize: bool = False

    @classmethod
    def for_space(cls, space: SearchSpace) -> Ranking:
        for o in space.objectives:
            if o.metric != OOM_METRIC:
                return cls(o.metric, o.direction == "maximize")
        return cls()

    def cost(self, c: ConfigEvidence) -> float:
        """The pessimistic end of the metric's 95 % interval, as a cost (lower is better).

        The interval is the mean times (1 +- r), r its relative half-width (a run-to-run
        spread relative to the mean, pooled). A latency's pessimistic end is the mean times
        (1 + r). A maximised metric's is the mean divided by (1 + r), not times (1 - r). Once
        r passes 1 (one pair of runs either side of a KV cliff, 5.2 and 0.6 requests/s, gives
        every single run r of about 14), the lower end mean x (1 - r) is below zero and falls
        the further the higher the mean: the worst configs would rank first. The mean over
        (1 + r) keeps the same multiplicative margin as the latency's, stays positive, and
        ranks configs run equally often by their means, as the lower end does while r is small."""
        i = c.interval(self.metric)
        if not self.maximize:
            return math.inf if math.isnan(i.high) else i.high
        if math.isnan(i.low):
            return math.inf
        r = (i.mean - i.low) / abs(i.mean) if i.mean else 0.0
        return -(i.mean / (1.0 + r))

    def mean_within(self, c: ConfigEvidence, best: ConfigEvidence) -> bool:
        """Whether ``c``'s mean is as good as ``best``'s pessimistic end."""
        m = c.interval(self.metric).mean
        return (-m if self.maximize else m) <= self.cost(best)

    @property
    def words(self) -> str:
        return f"highest {self.metric} pessimistic end" if self.maximize else f"lowest {self.metric} upper bound"


P99 = Ranking()


def measured_tier(c: ConfigEvidence, limit: float) -> int:
    """SHOWN, MEASURED or OVER: what the config's own runs say about the OOM limit."""
    if c.oom.shown_within(limit):
        return SHOWN
    if c.oom.rate_per_1k <= limit:
        return MEASURED
    return OVER  # over the limit, or no rate at all (NaN)


def tier(c: ConfigEvidence, limit: float) -> int:
    measured = measured_tier(c, limit)
    # A NaN prediction (export.oom_model off, no death to fit, an unmodelled config) compares False.
    return PREDICTED_OVER if measured != OVER and c.oom.predicted_per_1k > limit else measured


def _order(c: ConfigEvidence, t: int, rank: Ranking) -> tuple[float, float, int]:
    if t == OVER:
        return c.oom.rate_per_1k, rank.cost(c), c.first.number
    return rank.cost(c), c.oom.rate_per_1k, c.first.number


def choose(configs: Sequence[ConfigEvidence], max_oom_per_1k: float, min_headroom_gib: float,
           confirmed_first: bool = True, rank: Ranking = P99, repeating: Collection[int] = (),
           gmu_edge: float | None = None) -> Choice | None:
    """The export rule over ``configs`` (steps 2-4 of the module's docstring). ``repeating``: the
    trial numbers whose configs have a confirmation run under way (:func:`repeats_under_way`);
    ``gmu_edge``: ``export.gmu_edge``."""
    usable = [c for c in configs if c.usable]
    if not usable:
        return None
    best_tier = min(tier(c, max_oom_per_1k) for c in usable)
    pool = [c for c in usable if tier(c, max_oom_per_1k) == best_tier]

    def is_confirmed(c: ConfigEvidence) -> bool:
        return c.confirmed or any(n in repeating for n in c.numbers)

    confirmed = confirmed_first and any(is_confirmed(c) for c in pool)
    pool = sorted((c for c in pool if is_confirmed(c) or not confirmed), key=lambda c: _order(c, best_tier, rank))
    best = pool[0]
    lim = f"{max_oom_per_1k:g}"
    among = "confirmed configs" if confirmed else "configs"
    rule = {
        SHOWN: f"{rank.words} among {among} shown (95 %) to have oom_per_1k <= {lim}",
        MEASURED: f"{rank.words} among {among} measured with oom_per_1k <= {lim} "
                  + ("(those shown within it with 95 % confidence are predicted over it by the hazard refitted "
                     "to the study's engine deaths)" if any(measured_tier(c, max_oom_per_1k) == SHOWN
                                                            for c in usable)
                     else "(none is shown within it with 95 % confidence)"),
        PREDICTED_OVER: f"{rank.words} among {among} measured with oom_per_1k <= {lim}; every one is predicted "
                        f"over it by the hazard refitted to the study's engine deaths",
        OVER: f"no config has oom_per_1k <= {lim}: lowest oom_per_1k",
    }[best_tier]
    notes: list[str] = []
    chosen = best
    short = _short_of_margin(best, min_headroom_gib, gmu_edge)
    if short:
        within = [c for c in pool if _has_margin(c, min_headroom_gib, gmu_edge) and rank.mean_within(c, best)]
        if within:
            chosen = within[0]
            notes.append(f"trial {best.first.number}'s config ranked first but {short}; this config has the margin "
                         f"and its mean {rank.metric} is within the first's 95 % interval")
        else:
            notes.append(f"this config {short}, and no config with the margin is within its 95 % interval of "
                         f"{rank.metric}")
    contender = is_confirmed if confirmed else (lambda c: True)
    notes += _passed_for_predicted_ooms(usable, chosen, max_oom_per_1k, rank, contender)
    return Choice(chosen, rule, best_tier, notes)


def _passed_for_predicted_ooms(usable: Sequence[ConfigEvidence], chosen: ConfigEvidence, limit: float,
                               rank: Ranking, contender: Callable[[ConfigEvidence], bool]) -> list[str]:
    """A note naming the configs that would have ranked ahead of ``chosen`` and were passed over only
    because the refitted hazard predicts them over the OOM limit (none without export.oom_model):
    their own runs stand as well as the chosen one's on the limit, they would have competed
    (``contender``: confirmed where only confirmed configs compete), and they cost less."""
    if tier(chosen, limit) == PREDICTED_OVER:
        return []
    bar = measured_tier(chosen, limit)
    passed = [c for c in usable if tier(c, limit) == PREDICTED_OVER and measured_tier(c, limit) <= bar
              and contender(c) and rank.cost(c) < rank.cost(chosen)]
    if not passed:
        return []
    trials = ", ".join(str(c.first.number) for c in passed[:5]) + (", ..." if len(passed) > 5 else "")
    low, high = min(c.oom.predicted_per_1k for c in passed), max(c.oom.predicted_per_1k for c in passed)
    rates = f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
    return [f"trials {trials} ranked ahead on {rank.metric} but were passed over: the runtime-OOM hazard refitted to "
            f"the study's engine deaths predicts {rates} OOMs per 1000 for them, over the "
            f"limit of {limit:g}, where their own runs are within it as measured (export.oom_model)"
            + _what_safety_costs(passed, chosen, rank)]


def _what_safety_costs(passed: Sequence[ConfigEvidence], chosen: ConfigEvidence, rank: Ranking) -> str:
    """How much better the best passed-over config's mean of the ranked metric is than the chosen one's:
    what the user gives up for the prediction. '' where no mean is better (the rule ranks by an
    interval's pessimistic end, so a config with fewer runs can rank ahead on a worse mean) or missing."""
    c = chosen.interval(rank.metric).mean
    if math.isnan(c) or c == 0:
        return ""

    def gain(e: ConfigEvidence) -> float:
        m = e.interval(rank.metric).mean
        return -math.inf if math.isnan(m) else ((m - c) if rank.maximize else (c - m)) / c

    best = max(passed, key=gain)
    if gain(best) <= 0:
        return ""
    return (f"; the best of them, trial {best.first.number}, measured a mean {rank.metric} "
            f"{100 * gain(best):.1f} % {'higher' if rank.maximize else 'lower'} than the chosen config's")


def _short_of_margin(c: ConfigEvidence, min_headroom_gib: float, gmu_edge: float | None) -> str:
    """How ``c`` lacks the export's margin from the memory edge, in words ('' when it does not)."""
    why = []
    if c.headroom.below(min_headroom_gib):
        why.append(f"has {c.headroom.gib:.2f} GiB of headroom per GPU, below the {min_headroom_gib:g} GiB margin")
    if _at_edge(c, gmu_edge):
        why.append(f"has {GMU} {c.flags[GMU]:g}, at or above export.gmu_edge {gmu_edge:g}")
    return " and ".join(why)


def _at_edge(c: ConfigEvidence, gmu_edge: float | None) -> bool:
    gmu = c.flags.get(GMU)
    return gmu_edge is not None and isinstance(gmu, int | float) and gmu >= gmu_edge


def finalists(configs: Sequence[ConfigEvidence], k: int, max_oom_per_1k: float = DEFAULT_MAX_OOM_PER_1K,
              min_headroom_gib: float = 0.0, rank: Ranking = P99, gmu_edge: float | None = None) -> list[ConfigEvidence]:
    """The ``k`` configs the export rule would pick one after another: what confirmation
    measures again. When none of them has the headroom margin and a config that has it
    could be picked too (same OOM tier), the best such one takes the last place, so the
    margin rule has a confirmed config to fall back on."""
    left = list(configs)
    out: list[ConfigEvidence] = []
    while len(out) < k:
        c = choose(left, max_oom_per_1k, min_headroom_gib, confirmed_first=False, rank=rank, gmu_edge=gmu_edge)
        if c is None:
            break
        out.append(c.config)
        left = [x for x in left if x is not c.config]
    if out and not any(_has_margin(c, min_headroom_gib, gmu_edge) for c in out):
        top = tier(out[0], max_oom_per_1k)
        spare = [c for c in left
                 if c.usable and _has_margin(c, min_headroom_gib, gmu_edge) and tier(c, max_oom_per_1k) == top]
        if spare:
            out[-1] = min(spare, key=lambda c: _order(c, top, rank))
    return out


def _has_margin(c: ConfigEvidence, min_headroom_gib: float, gmu_edge: float | None = None) -> bool:
    """Whether ``c`` may stand in for a config that lacks the margin. Below ``gmu_edge`` with
    its headroom unknown (no measured peak and no memory model, e.g. an unmodelled model), the
    gmu edge the user set is the margin that can be judged; without an edge, an unknown
    headroom is no known margin."""
    if _at_edge(c, gmu_edge):
        return False
    if c.headroom.known:
        return not c.headroom.below(min_headroom_gib)
    return gmu_edge is not None


def study_evidence(study: optuna.Study, space: SearchSpace) -> StudyEvidence:
    return summarize(records(study.get_trials(deepcopy=False)), space)


def repeated_by(recs: Iterable[TrialRecord]) -> set[int]:
    """The trials whose configs the confirmation runs among ``recs`` measure again (their ``repeat_of``)."""
    return {r.repeat_of for r in recs if r.role == Role.CONFIRM and r.repeat_of is not None}


def repeats_under_way(recs: Sequence[TrialRecord]) -> set[int]:
    """The trials whose configs a running confirmation run measures again: ``choose``'s ``repeating``."""
    return repeated_by(r for r in recs if r.state == State.RUNNING)


def choose_in_space(configs: Sequence[ConfigEvidence], space: SearchSpace, max_oom_per_1k: float,
                    repeating: Collection[int] = ()) -> Choice | None:
    """:func:`choose` with the space's export settings (margin, gmu edge, ranked objective)."""
    return choose(configs, max_oom_per_1k, space.export.min_headroom_gib, rank=Ranking.for_space(space),
                  repeating=repeating, gmu_edge=space.export.gmu_edge)


def finalists_in_space(configs: Sequence[ConfigEvidence], space: SearchSpace, k: int,
                       max_oom_per_1k: float = DEFAULT_MAX_OOM_PER_1K) -> list[ConfigEvidence]:
    """:func:`finalists` with the space's export settings, as :func:`choose_in_space` is
    :func:`choose` with them: confirmation races what the export rule would pick."""
    return finalists(configs, k, max_oom_per_1k, space.export.min_headroom_gib, Ranking.for_space(space),
                     space.export.gmu_edge)


def choose_in_records(recs: Sequence[TrialRecord], space: SearchSpace, max_oom_per_1k: float,
                      evidence: StudyEvidence | None = None) -> Choice | None:
    """The documented export rule on a study's records (``evidence``: their summary, when the
    caller has it already). A config whose confirmation repeat is running counts as confirmed,
    so status, MLflow and `autotune export` of a running study name one config."""
    configs = (evidence or summarize(recs, space)).configs
    return choose_in_space(configs, space, max_oom_per_1k, repeats_under_way(recs))


def choose_for_export(study: optuna.Study, space: SearchSpace, max_oom_per_1k: float) -> Choice | None:
    """The documented export rule on a stored study, with the space's margin."""
    return choose_in_records(records(study.get_trials(deepcopy=False)), space, max_oom_per_1k)


def recommendation(study: optuna.Study, space: SearchSpace) -> Choice | None:
    """*The* recommended config: what `autotune export` writes with its default OOM limit.

    `autotune status`, the MLflow experiment's tags and compare view, and the export header
    all name this one (docs/status.md), so a user asking "which config?" gets one answer."""
    return choose_for_export(study, space, DEFAULT_MAX_OOM_PER_1K)
