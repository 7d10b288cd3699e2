"""The screen: a model ranks a few of the sampler's own candidates, and the predicted best launches.

A launch on GPUs costs minutes; a simulated trial of the same config costs a fraction of a
second. So for each sampled trial the screen draws ``study.strategy.screen_candidates``
candidates from the sampler's own proposal distribution (TPE's draws from its density of
good configs; random draws before TPE has enough trials), drops those the space's
constraints or startup pruning would reject, asks the model what each would measure, and
hands the predicted best to Optuna as the trial's params. The sampler still decides where
to look; the model only decides which of its proposals is worth the GPUs. A wrong model
costs little: every candidate is one the sampler would have proposed anyway, and the
measurements keep teaching the sampler (and, recalibrated, the model).

The model is given (:class:`ConfigModel`): the study knows no simulator.
:func:`autotune.calibrate.screen_wrapper` (composed through `make_sampler`) builds the screen with autotune's simulator,
recalibrated from the study's measured trials. Enqueued trials (warm start, confirmation
runs, re-runs) are not screened: they measure a given config.

It is an Optuna sampler wrapping the study's sampler: Optuna asks a sampler for the
"relative search space" once per trial, right before it samples relatively; the screen
draws and ranks its candidates there (the distributions of conditional params are known
only once a candidate is drawn) and returns the chosen candidate's values as the relative
sample. Every other call goes to the wrapped sampler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.space import SearchSpace
from autotune.study.analysis import OOM_METRIC
from autotune.study.analysis.export_rule import DEFAULT_MAX_OOM_PER_1K
from autotune.study.search import strategy
from autotune.study.search.pruning import StartupPredictor
from autotune.study.trials import (
    Role,
    TrialRecord,
    check_constraints,
    constraint_values,
    objective_values,
    records,
    suggest_params,
)


class ConfigModel(Protocol):
    """What the screen asks of a model of the deployment."""

    def predict(self, configs: Sequence[Mapping[str, Any]], recs: Sequence[TrialRecord],
                seed: int) -> list[dict[str, float]]:
        """The metrics each config (every flag) would report: ``{}`` when it would not start.
        ``recs``: the study's finished trials, to learn from first."""
        ...


class _Draw:
    """An Optuna trial's suggest API that draws every value from the sampler's proposal
    (``sample_independent``), so :func:`autotune.study.trials.params.suggest_params` builds one
    candidate the way it builds a trial's params."""

    def __init__(self, sampler: optuna.samplers.BaseSampler, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler, self.study, self.trial = sampler, study, trial
        self.distributions: dict[str, BaseDistribution] = {}

    def _draw(self, name: str, dist: BaseDistribution) -> Any:
        self.distributions[name] = dist
        return self.sampler.sample_independent(self.study, self.trial, name, dist)

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return self._draw(name, FloatDistribution(low, high, step=step, log=log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return self._draw(name, IntDistribution(low, high, step=step, log=log))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._draw(name, CategoricalDistribution(list(choices)))


@dataclass(frozen=True)
class Choice:
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution]


def score(metrics: Mapping[str, float], space: SearchSpace) -> tuple[int, float, float]:
    """How good predicted ``metrics`` are, lowest best, as the export rule ranks configs:
    feasible (started, no crash loop, SLOs met) first, then an OOM rate within the export's
    default limit, then the main objective (the first one that is not the OOM rate)."""
    values = objective_values(metrics, True, space)
    feasible = constraint_values(metrics, True, space).feasible
    names = space.objective_names
    oom = values[names.index(OOM_METRIC)] if OOM_METRIC in names else 0.0
    main = next((i for i, n in enumerate(names) if n != OOM_METRIC), 0)
    sign = -1.0 if space.objectives[main].direction == "maximize" else 1.0
    over = oom > DEFAULT_MAX_OOM_PER_1K
    return (0 if feasible else 1, oom if over else 0.0, sign * values[main])


class WrappingSampler(optuna.samplers.BaseSampler):
    """A sampler in front of the study's own (``base``): independent samples and the trial
    hooks go to ``base``; a subclass decides the relative sample (the screen, the sweep)."""

    base: optuna.samplers.BaseSampler

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


class ScreeningSampler(WrappingSampler):
    """``base`` with the screen in front of each sampled trial (module docstring)."""

    def __init__(self, base: optuna.samplers.BaseSampler, space: SearchSpace, model: ConfigModel,
                 candidates: int) -> None:
        self.base, self.space, self.model, self.candidates = base, space, model, candidates
        prune = space.study.strategy.prune_startup_failures
        self.predictor = StartupPredictor.for_space(space) if prune else None
        self._choices: dict[int, Choice] = {}

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.system_attrs.get("fixed_params"):  # enqueued: it measures a given config
            return {}
        choice = self._choose(study, trial)
        if choice is None:
            return {}
        self._choices[trial.number] = choice
        return choice.distributions

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        choice = self._choices.pop(trial.number, None)
        return dict(choice.params) if choice is not None and search_space else {}

    def _choose(self, study: optuna.Study, trial: FrozenTrial) -> Choice | None:
        recs = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        if self.predictor is not None:
            self.predictor.update(recs)
        drawn: list[tuple[Choice, dict[str, Any]]] = []
        for _ in range(self.candidates):
            draw = _Draw(self.base, study, trial)
            params = suggest_params(draw, self.space)  # type: ignore[arg-type]
            flags = {**self.space.fixed_flags(), **params}
            repaired, violated = check_constraints(params, self.space, flags)
            flags.update(repaired)
            if violated or strategy.prune_reason(self.predictor, flags, Role.SEARCH):
                continue
            drawn.append((Choice(params, draw.distributions), flags))
        if not drawn:
            return None
        predicted = self.model.predict([f for _, f in drawn], recs, trial.number)
        ranked = [(score(m, self.space), i) for i, m in enumerate(predicted) if m]
        return drawn[min(ranked)[1]][0] if ranked else drawn[0][0]
