"""The screen's model: autotune's simulator, recalibrated from the study's measured trials.

:class:`SimModel` is the :class:`autotune.study.search.screening.ConfigModel` the screen ranks
candidates with: a short noise-free simulated benchmark of each candidate under autotune's
own model profile (``study.strategy.model_profile``; never ``engine.sim_profile``, which is
the physics a sim backend runs). With ``model_profile: calibrated`` the profile is refitted
(:func:`autotune.calibrate.fit_profile`) every ``recalibrate_every`` launched trials, on the
first trials launched in multiples of that, so a resumed study refits to the same profile.

:func:`screen_wrapper` is what stands in front of ``study.sampler``'s sampler: the screen when
``study.strategy.screen`` is on, the sweep when ``study.strategy.sweep`` is. It is a
:data:`autotune.study.search.samplers.SamplerWrapper`; ``make_sampler(name, space, seed,
wrap=screen_wrapper)`` builds the sampler a study runs with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from autotune.calibrate import observations as obs
from autotune.calibrate.calibration import fit_profile
from autotune.calibrate.model import simulate
from autotune.deploy import SimProfile, get_device, resolve_model
from autotune.errors import UserError
from autotune.space import SearchSpace
from autotune.study.search import ScreeningSampler, SweepSampler
from autotune.study.search.samplers import SAMPLERS
from autotune.study.trials import TrialRecord


class SimModel:
    """Short simulated benchmarks under autotune's own (recalibrated) model profile."""

    def __init__(self, space: SearchSpace) -> None:
        s = space.study.strategy
        self.space, self.requests, self.every, self.recalibrates = space, s.screen_requests, s.recalibrate_every, \
            s.recalibrates
        self.base: SimProfile = s.base_profile
        self.profile: SimProfile = self.base
        self.fitted_on = 0  # launched trials the profile was fitted on

    def refresh(self, recs: Sequence[TrialRecord]) -> None:
        """Refit once the study holds another ``recalibrate_every`` launched trials."""
        if not self.recalibrates:
            return
        launched = obs.launched(recs)
        n = len(launched) // self.every * self.every
        if n == self.fitted_on or sum(obs.started(r) for r in launched[:n]) == 0:
            return
        self.profile, _ = fit_profile(launched[:n], self.space, self.base, self.requests)
        self.fitted_on = n

    def version(self, recs: Sequence[TrialRecord]) -> object:
        """The profile's state after refreshing from ``recs`` (the sweep caches by it)."""
        self.refresh(recs)
        return self.fitted_on

    def predict(self, configs: Sequence[Mapping[str, Any]], recs: Sequence[TrialRecord],
                seed: int) -> list[dict[str, float]]:
        self.refresh(recs)
        # One seed for all candidates: the hazard draws alike, so they differ by their flags.
        return [simulate(self.space, flags, self.profile, self.requests, seed) for flags in configs]


def simulator_models(space: SearchSpace) -> bool:
    """Whether the simulator can model this space's model, device and flags: a GPU of its table or
    its CPU host (``gpu: cpu``, vLLM's CPU build; docs/simulator.md "CPU host"). If it cannot (a
    model it has no config for, a device it does not know, an unmodelled flag), the search runs
    unscreened, as pruning runs off: the screen is an aid, never a reason to refuse a study."""
    return why_unmodelled(space) is None


def why_unmodelled(space: SearchSpace) -> str | None:
    """What keeps the simulator from modelling this space, in one line; None when nothing does."""
    try:
        resolve_model(space.engine.model)
        get_device(space.engine.gpu)  # the simulator's own lookup: "H100" and "NVIDIA A100" are table GPUs too
    except UserError as e:
        return str(e)
    touched = space.unmodelled_flags()
    return f"the simulator does not model {touched[0][1]} ({touched[0][0]})" if touched else None


def unaided_note(space: SearchSpace) -> str | None:
    """What the run's start says when the space asks for the sweep or the screen and the
    simulator cannot model it (screen_wrapper then hands the sampler over as it is), so a
    study is not quietly plain TPE; None otherwise. Samplers that propose whole configs are
    never wrapped, so nothing is lost for them."""
    s = space.study.strategy
    kind = SAMPLERS.get(space.study.sampler)
    if not (s.screen or s.sweep) or kind is None or not kind.independent:
        return None
    why = why_unmodelled(space)
    return f"the sweep and the screen are off, the study samples unaided: {why}" if why else None


def screen_wrapper(base: optuna.samplers.BaseSampler, space: SearchSpace, seed: int) -> optuna.samplers.BaseSampler:
    """``base`` screened by the simulator when ``study.strategy.screen`` is on, behind the
    sweep when ``study.strategy.sweep`` is on (the sweep falls back to it). make_sampler
    hands it only samplers that propose one flag at a time (``SamplerKind.independent``;
    grid, nsga2 and gp propose whole configs and run unscreened)."""
    s = space.study.strategy
    if not simulator_models(space):  # unaided_note says so at the run's start
        return base
    model = SimModel(space)
    if s.screen:
        base = ScreeningSampler(base, space, model, s.screen_candidates)
    if s.sweep:
        # The sweep and the screen share one model, so a recalibration is paid once.
        return SweepSampler(base, space, model, s.sweep_pool, seed)
    return base
