"""The sweep: simulate everything, measure few.

A GPU trial costs 10-20 minutes; a simulated one of the same config a few hundredths of a
second. So before each sampled trial the sweep ranks a whole pool of the space's configs
(every categorical and boolean value, stepped ranges at up to ``RANGE_POINTS`` values,
counts by powers of two; a seeded sample of ``study.strategy.sweep_pool`` configs when the
product is larger) by the model's prediction, corrects that prediction with what the study
measured (:class:`autotune.study.search.residual.ResidualGP`: the model is the GP's prior mean, the
GP learns the model's error), and launches the config with the best optimistic corrected
value (the lower confidence bound of a minimised objective, the upper of a maximised one)
that has not been measured and is not running. The first sampled trial is therefore the
model's own best: zero search, one measurement.

It falls back to the study's own sampler (TPE behind the screen) when the model has proved
wrong: once ``TRUST_AFTER`` configs are measured and the measurements' departure from the
model, beyond one shared scale, is ``DISPROVED`` times what the runs' own spread explains;
or when no candidate is left.
Every fallback and every choice is a plain Optuna sample, so a resumed study decides alike.

Like the screen (screening.py) it is an Optuna sampler wrapping the study's sampler, and
like it the model is given (:class:`SweepModel`): the study knows no simulator.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.space.schema import ParamSpec
from autotune.study.analysis import Ranking, config_key
from autotune.study.search import strategy
from autotune.study.search.pruning import StartupPredictor
from autotune.study.search.residual import GridFit, Marginal, ResidualGP, encode, most_likely, run_log_sd
from autotune.study.search.screening import Choice, ConfigModel, WrappingSampler, score
from autotune.study.trials import Role, TrialRecord, records
from autotune.study.trials.params import _active, _ordered, check_constraints, suggest_params

RANGE_POINTS = 12  # values of a stepped or continuous range in the pool
TRUST_AFTER = 6  # measured configs before the model is judged
DISPROVED = 9.0  # residual variance beyond the shared scale, in run variances (3 sd): model disproved
KAPPA = 1.0  # confidence-bound width, in GP standard deviations
LOCAL_FLAGS = 2  # the trust region (study.strategy.sweep_local_from): configs this many flags from the leader


CENSORED_WEIGHT = 0.5  # an early-stopped config's imputed residual counts as half a run


@dataclass(frozen=True)
class Measured:
    """One launched config and what its runs measured of the ranked metric: ``values`` from
    full runs, ``floors`` from benchmarks stopped early. A stopped benchmark's value is a lower
    bound on what the full run would have measured (early_stop.py: it stops once the bound is
    beaten, and a p99 over the requests finished so far misses the queue the rest would have
    built), not an estimate of it."""

    key: str
    flags: dict[str, Any]
    values: list[float]
    floors: list[float]
    usable: bool  # every run started and met the study's constraints

    @property
    def censored(self) -> bool:
        """Only stopped runs: the value is known to be at least :attr:`log_mean`."""
        return not self.values and bool(self.floors)

    @property
    def weight(self) -> float:
        return float(len(self.values)) if self.values else CENSORED_WEIGHT

    @property
    def log_mean(self) -> float:
        """Mean log of the full runs; for a censored config, the log of its highest floor."""
        if self.values:
            return sum(math.log(v) for v in self.values) / len(self.values)
        return math.log(max(self.floors))


class SweepModel(ConfigModel, Protocol):
    def version(self, recs: Sequence[TrialRecord]) -> object:
        """Refresh from ``recs`` and name the model's current state: predictions made under
        one version stay valid until it changes (a recalibration)."""
        ...


def param_values(p: ParamSpec) -> list[Any]:
    """The values of one param the pool takes."""
    if p.type in ("bool", "categorical"):
        return p.grid_values()
    lo, hi = float(p.low), float(p.high)  # type: ignore[arg-type]
    if p.type == "int" and not p.step and lo > 0 and hi / lo >= 8:
        powers = [2 ** k for k in range(math.ceil(math.log2(lo)), math.floor(math.log2(hi)) + 1)]
        return sorted({int(lo), *powers, int(hi)})
    if p.step:
        n = int(round((hi - lo) / p.step)) + 1
        if n <= RANGE_POINTS:
            vals = [lo + i * p.step for i in range(n)]
            return [int(round(v)) for v in vals] if p.type == "int" else [round(v, 6) for v in vals]
    return p.grid_values(RANGE_POINTS)


def candidate_pool(space: SearchSpace, size: int, seed: int) -> list[dict[str, Any]]:
    """The configs the sweep ranks (searched params only), constraint-checked, deduplicated."""
    names = _ordered(space)
    values = {n: param_values(space.params[n]) for n in names}
    total = math.prod(len(v) for v in values.values())
    rng = random.Random(f"autotune-sweep/{seed}")
    if total <= 4 * size:
        combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*(values[n] for n in names))]
    else:
        combos = [{n: rng.choice(values[n]) for n in names} for _ in range(4 * size)]
    fixed = space.fixed_flags()
    out: dict[str, dict[str, Any]] = {}
    for c in combos:
        active: dict[str, Any] = {}
        for n in names:
            if _active(space.params[n], active):
                active[n] = c[n]
        repaired, violated = check_constraints(active, space, fixed)
        if not violated:
            out.setdefault(config_key(repaired), repaired)
    pool = list(out.values())
    if len(pool) > size:
        pool = rng.sample(pool, size)
    return pool


class _Replay:
    """An Optuna trial's suggest API that returns given values, recording the distributions
    :func:`suggest_params` asks them from (so a chosen config becomes a relative sample)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        self.distributions: dict[str, BaseDistribution] = {}

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        self.distributions[name] = FloatDistribution(low, high, step=step, log=log)
        return float(self.values[name])

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        self.distributions[name] = IntDistribution(low, high, step=step, log=log)
        return int(self.values[name])

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        self.distributions[name] = CategoricalDistribution(list(choices))
        return self.values[name]


def as_choice(space: SearchSpace, params: Mapping[str, Any]) -> Choice:
    replay = _Replay(params)
    chosen = suggest_params(replay, space)  # type: ignore[arg-type]
    return Choice(chosen, replay.distributions)


class SweepSampler(WrappingSampler):
    """``base`` (the study's sampler, screened) behind the sweep (module docstring)."""

    def __init__(self, base: optuna.samplers.BaseSampler, space: SearchSpace, model: SweepModel,
                 pool_size: int, seed: int, requests_seed: int = 0) -> None:
        self.base, self.space, self.model = base, space, model
        self.pool = candidate_pool(space, pool_size, seed)
        self.rank = Ranking.for_space(space)
        prune = space.study.strategy.prune_startup_failures
        self.predictor = StartupPredictor.for_space(space) if prune else None
        self.seed = requests_seed  # one simulation seed for every prediction: they differ by flags alone
        self._cache: dict[tuple[object, str], dict[str, float]] = {}
        self._choices: dict[int, Choice] = {}
        self._fallback: set[int] = set()
        self.decisions: dict[int, str] = {}  # trial number -> how it was chosen (diagnostics, tests)

    # --- Optuna's sampler interface ----------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.system_attrs.get("fixed_params"):  # enqueued: it measures a given config
            return {}
        choice, why = self._choose(study, trial)
        self.decisions[trial.number] = why
        if choice is None:
            self._fallback.add(trial.number)
            return self.base.infer_relative_search_space(study, trial)
        self._choices[trial.number] = choice
        return choice.distributions

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if trial.number in self._fallback:
            self._fallback.discard(trial.number)
            return self.base.sample_relative(study, trial, search_space)
        choice = self._choices.pop(trial.number, None)
        return dict(choice.params) if choice is not None and search_space else {}

    # --- the choice ----------------------------------------------------------------------
    def _flags(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.space.fixed_flags(), **params}

    def _predict(self, version: object, flags_list: Sequence[dict[str, Any]],
                 recs: Sequence[TrialRecord]) -> list[dict[str, float]]:
        todo = [(i, f) for i, f in enumerate(flags_list) if (version, config_key(f)) not in self._cache]
        if todo:
            got = self.model.predict([f for _, f in todo], recs, self.seed)
            for (_, f), m in zip(todo, got, strict=True):
                self._cache[(version, config_key(f))] = m
        return [self._cache[(version, config_key(f))] for f in flags_list]

    def _main(self, metrics: Mapping[str, float]) -> float:
        v = metrics.get(self.rank.metric, math.nan)
        return v if v is not None and math.isfinite(v) and v > 0 else math.nan

    def _measured(self, recs: Sequence[TrialRecord]) -> list[Measured]:
        """Every config launched so far with what its runs measured of the ranked metric. A
        benchmark stopped early bounds the config's value from below (:class:`Measured`); the
        config is never proposed again."""
        groups: dict[str, list[TrialRecord]] = {}
        for r in sorted(recs, key=lambda x: x.number):
            if r.launched and r.flags:
                groups.setdefault(config_key(r.flags), []).append(r)
        out = []
        for key, runs in groups.items():
            ok = [r for r in runs if r.started and r.feasible]
            got = [(v, r.early_stopped) for r in ok
                   if math.isfinite(v := r.metrics.get(self.rank.metric, math.nan)) and v > 0]
            out.append(Measured(key, dict(runs[0].flags), [v for v, stopped in got if not stopped],
                                [v for v, stopped in got if stopped], usable=len(ok) == len(runs)))
        return out

    def _choose(self, study: optuna.Study, trial: FrozenTrial) -> tuple[Choice | None, str]:
        recs = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        if self.predictor is not None:
            self.predictor.update(recs)
        version = self.model.version(recs)
        measured = self._measured(recs)
        data = [m for m in measured if m.usable and (m.values or m.floors)]
        preds = self._predict(version, [m.flags for m in data], recs)
        points = [(math.log(p), m) for p_, m in zip(preds, data, strict=True) if math.isfinite(p := self._main(p_))]
        fits = self._residual_fits(points)
        gp = most_likely(fits) if fits else None
        if gp is not None and len(points) >= TRUST_AFTER and self._model_disproved(points, gp):
            return None, "fallback: the model's error is far beyond the run-to-run spread"
        # Candidates: predicted feasible, not pruned, never launched, not running.
        seen = {m.key for m in measured}
        running_trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.params]
        running_params = [t.params for t in running_trials]
        running = {config_key(self._flags(p)) for p in running_params}
        flags_pool = [self._flags(p) for p in self.pool]
        pool_preds = self._predict(version, flags_pool, recs)
        cands: list[tuple[dict[str, Any], float]] = []
        for params, flags, m in zip(self.pool, flags_pool, pool_preds, strict=True):
            key = config_key(flags)
            if key in seen or key in running or not m:
                continue
            infeasible, oom_over, _ = score(m, self.space)
            main = self._main(m)
            if infeasible or oom_over or math.isnan(main):
                continue
            if strategy.prune_reason(self.predictor, flags, Role.SEARCH):
                continue
            cands.append((params, math.log(main)))
        cands, local = self._trust_region(cands, data, len(points))
        sampled = [r.flags for r in recs if r.role == Role.SEARCH and r.launched and r.flags]
        sampled += [self._flags(t.params) for t in running_trials if not t.system_attrs.get("fixed_params")]
        cands, planes = self._unmeasured_planes(cands, sampled)
        if not cands:
            return None, "fallback: no candidate left in the pool"
        x = np.array([encode(self.space, p) for p, _ in cands])
        base = np.array([v for _, v in cands])
        error: ResidualGP | Marginal
        if gp is None:  # fewer than two configs measured
            error = ResidualGP.prior(x.shape[1], run_log_sd([m.values for _, m in points]))
        else:
            error = Marginal.of(fits) if self.space.study.strategy.sweep_marginal else gp
        if self.space.study.strategy.sweep_believer and running_params:
            error = error.believing(np.array([encode(self.space, p) for p in running_params]))
        mu, sd = error.predict(x)
        sign = -1.0 if self.rank.maximize else 1.0
        bound = sign * (base + mu) - KAPPA * sd  # lower is better, optimistic
        best = int(np.argmin(bound))
        where = f" within {LOCAL_FLAGS} flags of the leader" if local else " on unmeasured planes" if planes else ""
        return as_choice(self.space, cands[best][0]), f"sweep: {len(cands)} candidates{where}, {len(points)} measured"

    def _trust_region(self, cands: list[tuple[dict[str, Any], float]], data: Sequence[Measured],
                      measured: int) -> tuple[list[tuple[dict[str, Any], float]], bool]:
        """The candidates within ``LOCAL_FLAGS`` flags of the best measured config, once
        ``sweep_local_from`` of the trial budget is measured (and any are left); else all.
        Late in a budget the confidence bound still reads every unmeasured corner's prior
        spread as promise; near the leader a launch refines what is known to be good."""
        share = self.space.study.strategy.sweep_local_from
        full = [m for m in data if m.values]
        if not share or measured < share * self.space.study.trials or not full:
            return cands, False
        sign = -1.0 if self.rank.maximize else 1.0
        leader = min(full, key=lambda m: sign * m.log_mean).flags
        near = [c for c in cands if sum(v != leader.get(n) for n, v in c[0].items()) <= LOCAL_FLAGS]
        return (near, True) if near else (cands, False)

    def _unmeasured_planes(self, cands: list[tuple[dict[str, Any], float]],
                           sampled: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[dict[str, Any], float]], bool]:
        """The candidates on categorical planes no sampled trial has measured or is running,
        while fewer than ``sweep_planes`` of the trial budget were sampled (and any are left);
        else all. The first sampled trial is still the model's own best: no plane is measured
        yet. The baseline and the references do not count: they are comparison points, not the
        model's choices."""
        share = self.space.study.strategy.sweep_planes
        if not share or len(sampled) >= share * self.space.study.trials:
            return cands, False
        seen = {self.space.plane(f) for f in sampled}
        fresh = [c for c in cands if self.space.plane(c[0]) not in seen]
        return (fresh, True) if fresh else (cands, False)

    def _residual_fits(self, points: Sequence[tuple[float, Measured]]) -> list[GridFit]:
        """The GP of log(measured) - log(predicted) over the measured configs at each point of
        its hyperparameter grid (none below two configs); a censored config's residual is
        imputed (:func:`impute_censored`)."""
        if len(points) < 2:
            return []
        x = np.array([encode(self.space, {n: m.flags.get(n) for n in self.space.params}) for _, m in points])
        r = np.array([m.log_mean - lp for lp, m in points])
        w = [m.weight for _, m in points]
        sd = run_log_sd([m.values for _, m in points])
        censored = np.array([m.censored for _, m in points])
        if censored.any() and not self.rank.maximize:  # the early-stop rule bounds minimised objectives only
            r = impute_censored(x, r, w, censored, sd)
        return ResidualGP.fit_grid(x, r, w, sd)

    @staticmethod
    def _model_disproved(points: Sequence[tuple[float, Measured]], gp: ResidualGP) -> bool:
        """Whether the model's error, beyond one shared scale, is many times what the runs'
        own spread explains: then its ranking is not worth following. Configs that are all
        about equally good are no evidence against it (their residuals are noise); the
        residuals are the GP's own (censored ones imputed)."""
        w = np.array([m.weight for _, m in points])
        excess = float(np.sum(w * (gp.r - gp.mean) ** 2) / len(gp.r))  # per-run variance units
        return excess > DISPROVED * gp.run_sd ** 2


def impute_censored(x: np.ndarray, r: np.ndarray, weights: Sequence[float], censored: np.ndarray,
                    run_sd: float) -> np.ndarray:
    """Residuals with each censored one (known only to be >= its value) replaced by its
    expectation given that bound, under a GP fitted to the uncensored ones: E[y | y >= c] of
    the GP's predictive normal. This is how SMAC models capped runs (Hutter, Hoos and
    Leyton-Brown 2013, "Bayesian optimization with censored response data"), in one pass.
    Treating the bound as the value would tell the GP that configs stopped for being bad are
    only a little worse than the front, which is where the model's optimism lives. With
    fewer than two uncensored configs there is nothing to condition on: the bound is kept."""
    full = ~censored
    if full.sum() < 2:
        return r
    gp = ResidualGP.fit(x[full], r[full], [w for w, f in zip(weights, full, strict=True) if f], run_sd)
    mu, sd = gp.predict(x[censored])
    out = r.copy()
    for i, c, m, s in zip(np.flatnonzero(censored), r[censored], mu, sd, strict=True):
        out[i] = truncated_mean(float(m), math.sqrt(float(s) ** 2 + run_sd ** 2), float(c))
    return out


def truncated_mean(mu: float, sd: float, floor: float) -> float:
    """E[y | y >= floor] for y ~ N(mu, sd^2) (at least ``floor``)."""
    a = (floor - mu) / sd
    tail = 0.5 * math.erfc(a / math.sqrt(2.0))
    if tail < 1e-12:  # far in the tail: the bound is all that is known
        return floor
    density = math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    return max(floor, mu + sd * density / tail)
