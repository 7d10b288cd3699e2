"""A stand-in for reality: a truth seed's simulator, and what is truly best under it.

A truth is drawn by its family (families.py): ``structural`` (the default) perturbs every
uncertain constant and adds structural departures the model has no constant for
(``autotune.sim.quirks``) and a cluster's noise; ``constants`` (issue 12's) is
``space.engine.profile.perturbed(seed)`` alone. The run-to-run noise is ON. Trials measure it
through the benchmark's backend (``families.TruthBackend``); nothing else of autotune ever
sees it. What is *truly* good is judged with the same constants and
the noise OFF, by experiments/scenarios' brute force on the scenario's grid (its target is
the true best) and, for configs off the grid, by the same rule config by config
(``experiments.scenarios.ground_truth.true_value``).

The brute force of each (scenario, truth seed) is committed under ``truths/NAME/seed-N/``
(``constants``) or ``truths/structural/NAME/seed-N/``
(the scenario script's three files and its cache key), so a fresh clone runs any call of
the benchmark without it; a changed space, grid or profile no longer matches the key and
is brute-forced again (minutes; the README gives the times). ALL VALUES ARE SIMULATED.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.deploy import SimProfile, predict_startup
from autotune.space import SearchSpace, load_space
from experiments.reality_gap import families
from experiments.reality_gap.families import DEFAULT_FAMILY, TruthBackend, TruthDraw
from experiments.scenarios import ground_truth as gt_mod

TRUTHS = Path(__file__).resolve().parent / "truths"
OOM_LIMIT = gt_mod.OOM_LIMIT
WITHIN = 0.02  # "truly within 2 % of the best" (issue 12)


def scenario_space(scenario: str) -> SearchSpace:
    return load_space(gt_mod.space_path(scenario))


def truth_draw(space: SearchSpace, scenario: str, truth_seed: int, family: str = DEFAULT_FAMILY) -> TruthDraw:
    """The truth's physics, noise on: what the benchmark's backend runs."""
    return families.draw(space.engine.profile, family, gt_mod.scenario_name(scenario), truth_seed)


def truth_profile(space: SearchSpace, truth_seed: int) -> SimProfile:
    """Issue 12's truth (the ``constants`` family): the perturbed constants, noise on."""
    return space.engine.profile.perturbed(truth_seed)


def truth_dir(scenario: str, truth_seed: int, family: str = DEFAULT_FAMILY) -> Path:
    """Where a truth's brute force is kept: committed under truths/ for the named scenarios;
    under runs/ (not committed) for a space given by path."""
    name = gt_mod.scenario_name(scenario)
    if gt_mod.is_path(scenario):
        return gt_mod.CACHE.parent / "reality_gap_truths" / family / name / f"seed-{truth_seed}"
    if family == "constants":  # where issue 12's truths were committed
        return TRUTHS / name / f"seed-{truth_seed}"
    return TRUTHS / family / name / f"seed-{truth_seed}"


def is_cached(scenario: str, truth_seed: int, family: str = DEFAULT_FAMILY) -> bool:
    """Whether the committed brute force matches the current space, grid, profile and quirks."""
    space = scenario_space(scenario)
    grid = gt_mod.scenario_grid(scenario, space)
    d = truth_draw(space, scenario, truth_seed, family)
    key = gt_mod.cache_key(space, grid, d.profile.without_noise(), gt_mod.Settings(), d.quirks)
    target = truth_dir(scenario, truth_seed, family) / gt_mod.TARGET
    return target.exists() and json.loads(target.read_text()).get("cache_key") == key


@dataclass
class Truth:
    """One scenario under one truth seed: its brute force and the true value of any config."""

    scenario: str  # a search_spaces/ stem, or a space file's path
    seed: int
    space: SearchSpace
    draw: TruthDraw  # noise on: the backend's
    grid: gt_mod.GroundTruth
    brute_force_s: float  # 0 when it came from the cache
    _memo: dict[tuple, dict[str, Any]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, scenario: str, seed: int, jobs: int = 2, log=lambda *_: None,
             family: str = DEFAULT_FAMILY) -> Truth:
        space = scenario_space(scenario)
        d = truth_draw(space, scenario, seed, family)
        t0 = time.time()
        cached = is_cached(scenario, seed, family)
        grid = gt_mod.brute_force(scenario, d.profile, jobs=jobs, out=truth_dir(scenario, seed, family), log=log,
                                  quirks=d.quirks)
        return cls(scenario, seed, space, d, grid, 0.0 if cached else time.time() - t0)

    @property
    def profile(self) -> SimProfile:
        return self.draw.profile

    @property
    def family(self) -> str:
        return self.draw.family

    @property
    def name(self) -> str:
        return gt_mod.scenario_name(self.scenario)

    def backend(self) -> TruthBackend:
        """What answers the study's trials."""
        return TruthBackend(self.draw)

    @property
    def main(self) -> str:
        return self.grid.main

    @property
    def maximize(self) -> bool:
        return self.grid.maximize

    @property
    def best(self) -> dict[str, Any]:
        """The grid's best config within the OOM limit (a row of the brute force)."""
        if self.grid.target is None:
            raise ValueError(f"{self.name} truth {self.seed} ({self.family}): no grid config meets the OOM limit")
        return self.grid.target

    def params(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The scenario's searched flags of a config as it ran (vLLM's default where unset)."""
        from autotune.study.search import baseline_params

        defaults = baseline_params(self.space)
        return {k: flags.get(k, defaults.get(k)) for k in self.space.params}

    def value(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The true (noise-free) row of a config: the grid's, else simulated by the same rule."""
        params = self.params(flags)
        row = self.grid.value(params)
        if row is not None:
            return row
        key = self.grid.key(params)
        if key not in self._memo:
            self._memo[key] = gt_mod.true_value(self.space, params, self.profile.without_noise(),
                                                quirks=self.draw.quirks)
        return self._memo[key]

    def regret(self, row: Mapping[str, Any], best: Mapping[str, Any] | None = None) -> float:
        """Relative shortfall of ``row``'s main objective against the grid's best, or ``best``
        (0 = as good; NaN when it does not serve)."""
        v, b = float(row[self.main]), float((self.best if best is None else best)[self.main])
        if math.isnan(v):
            return math.nan
        return 1.0 - v / b if self.maximize else v / b - 1.0

    def within(self, row: Mapping[str, Any], best: Mapping[str, Any] | None = None) -> bool:
        """Truly within 2 % of the grid's best (or ``best``) and within the OOM limit."""
        return gt_mod.feasible(row, self.main) and self.regret(row, best) <= WITHIN

    def starts(self, flags: Mapping[str, Any]) -> bool:
        """Whether the config starts under the truth (its startup is noise-free)."""
        e = self.space.engine
        return predict_startup(e.model, e.gpu, dict(flags), e.env, self.profile).ok
