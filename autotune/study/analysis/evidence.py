"""Per-config evidence: every full run of one config, summarised with its uncertainty.

A *config* is the flags as run (after repair); every launched trial that ran them to the
end of the benchmark is one run of it, whatever its role (a search sample, the baseline,
a confirmation run, a sample that happened to repeat a config). Trials stopped early are
left out (their figures are estimates), as are trials that never launched.

For each config: the mean and 95 % interval of every reported metric over its runs
(:mod:`autotune.study.analysis.stats`; the relative run-to-run spread pooled over the study's
configs measured more than once), OOMs counted over all its requests with an exact upper
bound, and its memory headroom (:mod:`autotune.study.analysis.headroom`); with export.oom_model,
the OOM rate the study's engine deaths predict (:mod:`autotune.calibrate.hazard`). Status, the export rule,
the choice of finalists and the export header all read these, for every backend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.space import SearchSpace
from autotune.study.analysis import stats
from autotune.study.analysis.headroom import Headroom, headroom
from autotune.study.trials import Role, TrialRecord

# Metrics given an interval besides the objectives and SLO metrics (what the export header shows).
SHOWN_METRICS = ("p99_e2e_s", "p50_e2e_s", "p99_ttft_s", "output_tok_per_s")
OOM_METRIC = "oom_per_1k"  # counted, not averaged: see OomEvidence


@dataclass(frozen=True)
class OomEvidence:
    """OOMs over every request a config served, and what they show (one-sided 95 %)."""

    events: int
    requests: int  # 0 when the runs did not report their request counts (then events is 0 too)
    rate_per_1k: float  # over all requests; the mean of the runs' rates when counts are unknown
    # Runs, and those in which the engine died at least once (None: not recorded). An engine
    # death fails every request in flight at once, so OOMs come in clusters and the request
    # count overstates what clean requests show; runs are the independent unit.
    runs: int
    runs_with_death: int | None
    # The rate the runtime-OOM hazard refitted to the study's engine deaths predicts
    # (:mod:`autotune.calibrate.hazard`; export.oom_model). NaN: not asked for, the simulator
    # does not model the config, or the study saw no death to fit to.
    predicted_per_1k: float = math.nan

    @property
    def upper_per_1k(self) -> float:
        """With 95 % confidence the config's OOM rate is at most this (NaN: counts unknown)."""
        return 1000.0 * stats.clopper_pearson_upper(self.events, self.requests) if self.requests else math.nan

    def shown_within(self, limit_per_1k: float) -> bool:
        return self.requests > 0 and self.upper_per_1k <= limit_per_1k

    def requests_to_show(self, limit_per_1k: float) -> int | None:
        """Requests in all (with no further OOM) that would show the limit; None if none can."""
        return stats.trials_needed(self.events, limit_per_1k / 1000.0)

    @property
    def death_chance_upper(self) -> float:
        """With 95 % confidence one run's chance of an engine death is at most this (NaN: not recorded)."""
        if self.runs_with_death is None or not self.runs:
            return math.nan
        return stats.clopper_pearson_upper(self.runs_with_death, self.runs)


@dataclass(frozen=True)
class ConfigEvidence:
    flags: dict[str, Any]
    runs: tuple[TrialRecord, ...]  # full runs, by trial number
    usable: bool  # every run served and met the study's constraints (SLOs, startup, serving)
    oom: OomEvidence
    intervals: dict[str, stats.Interval]  # metric -> mean and 95 % interval over the runs
    headroom: Headroom
    center: str = "mean"  # the space's export.center: how ``intervals`` summarise the runs

    @property
    def center_word(self) -> str:
        """What ``intervals``' value is, for people: "median" where the runs were summarised by
        their median (export.center median, three runs up: stats.center_of), else "mean"."""
        return stats.center_used(self.n, self.center)

    @property
    def first(self) -> TrialRecord:
        """The config's first run: the trial that stands for it (in status, MLflow, links)."""
        return self.runs[0]

    @property
    def confirmed(self) -> bool:
        """Measured again by confirmation runs (a finalist of the search)."""
        return any(r.role == Role.CONFIRM for r in self.runs)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def numbers(self) -> list[int]:
        return [r.number for r in self.runs]

    def interval(self, metric: str) -> stats.Interval:
        return self.intervals.get(metric) or stats.Interval(math.nan, math.nan, math.nan, 0, False)

    def to_dict(self) -> dict[str, Any]:
        """For `autotune status --json`: plain numbers, NaN as None."""
        return {
            "trials": self.numbers,
            "runs": self.n,
            "flags": self.flags,
            "usable": self.usable,
            "confirmed": self.confirmed,
            "requests": self.oom.requests,
            "ooms": self.oom.events,
            "oom_per_1k": _clean(self.oom.rate_per_1k),
            "oom_per_1k_upper95": _clean(self.oom.upper_per_1k),
            "runs_with_engine_death": self.oom.runs_with_death,
            "engine_death_chance_upper95": _clean(self.oom.death_chance_upper),
            "oom_per_1k_predicted": _clean(self.oom.predicted_per_1k),
            "metrics": {k: {"mean": _clean(i.mean), "ci95": [_clean(i.low), _clean(i.high)] if i.known else None}
                        for k, i in self.intervals.items()},
            "headroom_gib": _clean(self.headroom.gib),
            "headroom": self.headroom.detail,
        }


@dataclass(frozen=True)
class StudyEvidence:
    configs: list[ConfigEvidence]  # by first trial number
    spread: dict[str, tuple[float, int]]  # metric -> (pooled relative sd, degrees of freedom)

    def pooled(self) -> list[ConfigEvidence]:
        """The configs the run-to-run spread is estimated from: usable, measured more than once."""
        return [c for c in self.configs if c.usable and c.n > 1]


def config_key(flags: dict[str, Any]) -> str:
    """Identity of a config: its flags as run, order-free."""
    return json.dumps(flags, sort_keys=True, default=str)


def full_runs(records: Iterable[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """Launched trials that ran the whole benchmark, grouped by config, in trial order."""
    groups: dict[str, list[TrialRecord]] = {}
    for r in sorted(records, key=lambda x: x.number):
        if r.launched and not r.early_stopped and r.flags:
            groups.setdefault(config_key(r.flags), []).append(r)
    return groups


def summarize(records: Iterable[TrialRecord], space: SearchSpace) -> StudyEvidence:
    """Every config the study ran in full, with its statistics."""
    groups = list(full_runs(records).values())
    usable = [all(r.started and r.feasible for r in g) for g in groups]
    metrics = [m for m in dict.fromkeys([*space.objective_names, *space.slo, *SHOWN_METRICS]) if m != OOM_METRIC]
    # The spread is pooled over usable configs only: a crash loop's latency is not a config's noise.
    spread = {m: stats.pooled_relative_sd([_values(g, m) for g, ok in zip(groups, usable, strict=True) if ok])
              for m in metrics}
    predicted = _predicted_ooms(groups, space)
    configs = []
    for g, ok, p in zip(groups, usable, predicted, strict=True):
        intervals = {m: stats.mean_interval(_values(g, m), *spread[m], center=space.export.center)
                     for m in metrics if _values(g, m)}
        configs.append(ConfigEvidence(dict(g[0].flags), tuple(g), ok, _ooms(g, p), intervals,
                                      headroom(g[0].flags, [r.metrics for r in g], space),
                                      space.export.center))
    return StudyEvidence(configs, spread)


def _values(runs: Sequence[TrialRecord], metric: str) -> list[float]:
    return [v for r in runs if not math.isnan(v := r.metrics.get(metric, math.nan))]


# What predicts each config's OOM rate from a study's engine deaths (export.oom_model): the
# simulator's runtime-OOM hazard refitted to them, a model of the deployment this layer does not
# own (autotune.calibrate.hazard.predicted_ooms), so it is handed in rather than imported;
# autotune.calibrate hands it in when it is imported, as every command and the assembler do.
OomModel = Callable[[Sequence[Sequence[TrialRecord]], SearchSpace], list[float]]
_oom_model: OomModel | None = None


def use_oom_model(model: OomModel) -> None:
    global _oom_model
    _oom_model = model


def _predicted_ooms(groups: Sequence[Sequence[TrialRecord]], space: SearchSpace) -> list[float]:
    if not space.export.oom_model:
        return [math.nan] * len(groups)
    if _oom_model is None:
        raise RuntimeError("export.oom_model is on but no OOM model was handed in: import autotune.calibrate first")
    return _oom_model(groups, space)


def _ooms(runs: Sequence[TrialRecord], predicted: float = math.nan) -> OomEvidence:
    """OOMs and requests summed over the runs. A run recorded without its counts leaves only
    the rates: nothing can be shown from them, the mean rate is still the best estimate."""
    deaths = _runs_with_death(runs)
    events = requests = 0
    for r in runs:
        n, k = r.metrics.get("requests", math.nan), r.metrics.get("requests_oom", math.nan)
        if math.isnan(n) or math.isnan(k):
            rates = _values(runs, OOM_METRIC)
            return OomEvidence(0, 0, sum(rates) / len(rates) if rates else math.nan, len(runs), deaths, predicted)
        events, requests = events + int(k), requests + int(n)
    return OomEvidence(events, requests, 1000.0 * events / requests if requests else math.nan, len(runs), deaths,
                       predicted)


def _runs_with_death(runs: Sequence[TrialRecord]) -> int | None:
    """How many runs saw the engine die (the backends' ``crashes``); None if a run did not say."""
    crashes = [r.metrics.get("crashes", math.nan) for r in runs]
    if not crashes or any(math.isnan(c) for c in crashes):
        return None
    return sum(1 for c in crashes if c > 0)


def _clean(v: float) -> float | None:
    return None if isinstance(v, float) and math.isnan(v) else v
