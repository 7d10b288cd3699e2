"""Studies run against a "truth": the simulator with perturbed constants as the sim backend's profile.

autotune's own model (pruning, screen) stays nominal; only the pool's backend sees the truth,
as in the reality-gap benchmark. Everything here is SIMULATED.
"""

from __future__ import annotations

import optuna

from autotune.backends.sim import SimBackend
from autotune.deploy import SimProfile
from autotune.space import SearchSpace, load_space
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.study.trials.record import TrialRecord, records
from experiments.search.harness import SimClockPool
from tests.conftest import REPO

QWEN = REPO / "search_spaces" / "qwen72b.yaml"


def qwen_space(num_requests: int = 1000, **strategy) -> SearchSpace:
    sp = load_space(QWEN)
    st = sp.study.strategy.model_copy(update=strategy)
    return sp.model_copy(update={"workload": sp.workload.model_copy(update={"num_requests": num_requests}),
                                 "study": sp.study.model_copy(update={"strategy": st})})


def run_against(space: SearchSpace, truth: SimProfile, trials: int, seed: int = 0,
                storage: optuna.storages.BaseStorage | None = None, name: str = "truth") -> list[TrialRecord]:
    """autotune's trial loop on ``space`` with ``truth`` as the physics; the study's records."""
    study = open_study(space, name, storage, make_sampler(space.study.sampler, space, seed)).study
    TrialLoop(study, space, SimClockPool(4, backend=SimBackend(profile=truth)), target=trials, seed=seed).run()
    return records(study.get_trials(deepcopy=False))
