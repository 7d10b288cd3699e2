"""The screen: of the sampler's own candidates, the one the model predicts best is launched.

A stand-in model (a formula of the flags, recording what it was asked) checks the mechanics;
autotune's simulator model checks recalibration from the study's records. SIMULATED.
"""

from __future__ import annotations

import optuna

from autotune.backends.sim import SimBackend
from autotune.calibrate import SimModel, screen_wrapper
from autotune.deploy import NOMINAL
from autotune.space.schema import ConfirmSection, StrategySection
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.study.search.screening import ScreeningSampler, score
from autotune.study.search.sweep import SweepSampler
from autotune.study.trials.record import Role, State, records
from experiments.search import common as C
from experiments.search.harness import SimClockPool
from tests.calibrate.conftest import qwen_space, run_against


def small_space(sampler: str = "autotune", **strategy):
    sp = C.space()
    wl = sp.workload.model_copy(update={"num_requests": 200})
    study = sp.study.model_copy(update={"sampler": sampler, "strategy": StrategySection(**strategy)})
    return sp.model_copy(update={"workload": wl, "study": study})


class FormulaModel:
    """Predicts p99 falling with gpu_memory_utilization, never an OOM; remembers each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[dict]]] = []

    def predict(self, configs, recs, seed):
        self.calls.append((seed, [dict(c) for c in configs]))
        return [{"p99_e2e_s": 100.0 - 50.0 * c["gpu_memory_utilization"], "oom_per_1k": 0.0, "crashes": 0.0}
                for c in configs]


def screened_study(sp, model, trials=10, candidates=6):
    sampler = ScreeningSampler(make_sampler(sp.study.sampler, sp, 0), sp, model, candidates)
    study = open_study(sp, "screen", None, sampler).study
    TrialLoop(study, sp, SimClockPool(2), target=trials, seed=0).run()
    return study


def test_each_sampled_trial_runs_the_candidate_the_model_ranks_first():
    sp = small_space(screen=True)
    model = FormulaModel()
    study = screened_study(sp, model)
    by_number = {r.number: r for r in records(study.get_trials(deepcopy=False))}
    assert model.calls
    for number, configs in model.calls:
        assert 1 <= len(configs) <= 6
        best = max(c["gpu_memory_utilization"] for c in configs)
        assert by_number[number].params["gpu_memory_utilization"] == best


def test_enqueued_trials_are_not_screened_and_rejects_never_reach_the_model():
    sp = small_space(screen=True)
    model = FormulaModel()
    study = screened_study(sp, model)
    recs = records(study.get_trials(deepcopy=False))
    asked = {n for n, _ in model.calls}
    assert all(r.number not in asked for r in recs if r.role in (Role.BASELINE, Role.REFERENCE))
    for _, configs in model.calls:
        for c in configs:  # the space's constraint and the memory model's certain failures
            assert c["max_num_batched_tokens"] >= c["max_num_seqs"]
            assert c["gpu_memory_utilization"] > 0.86


def test_score_ranks_feasible_then_oom_limit_then_the_main_objective():
    sp = small_space()
    fast_oom = {"p99_e2e_s": 5.0, "oom_per_1k": 30.0, "crashes": 1.0}
    slow_clean = {"p99_e2e_s": 9.0, "oom_per_1k": 0.0, "crashes": 0.0}
    fast_clean = {"p99_e2e_s": 8.0, "oom_per_1k": 0.5, "crashes": 0.0}
    crash_loop = {"p99_e2e_s": 1.0, "oom_per_1k": 900.0, "crashes": 9.0}
    ranked = sorted([fast_oom, slow_clean, fast_clean, crash_loop], key=lambda m: score(m, sp))
    assert ranked == [fast_clean, slow_clean, fast_oom, crash_loop]


def _study_sampler(sp):
    """The sampler `autotune run` gives a study of ``sp`` (service.py)."""
    return make_sampler(sp.study.sampler, sp, 0, wrap=screen_wrapper)


def test_search_sampler_screens_only_when_switched_on():
    assert not isinstance(_study_sampler(small_space(screen=False, sweep=False)), ScreeningSampler)
    assert isinstance(_study_sampler(small_space()).base, ScreeningSampler)  # on by default, behind the sweep
    on = _study_sampler(small_space(sweep=False))
    assert isinstance(on, ScreeningSampler) and isinstance(on.model, SimModel)
    assert isinstance(on.base, optuna.samplers.TPESampler)
    assert on.model.base == NOMINAL  # autotune's model, whatever engine.sim_profile says
    # Samplers that propose whole configs run unscreened.
    for name in ("grid", "nsga2"):
        sampler = _study_sampler(small_space(sampler=name, screen=True))
        assert not isinstance(sampler, ScreeningSampler) and not isinstance(sampler, SweepSampler)


def test_the_model_recalibrates_every_k_launched_trials_from_the_records_alone():
    space = qwen_space(num_requests=200, screen=True, recalibrate_every=4, screen_requests=100)
    recs = run_against(space, NOMINAL.perturbed(1), trials=9)
    launched = [r for r in recs if r.state == State.COMPLETE]
    assert len(launched) == 9
    model = SimModel(space)
    model.refresh(recs)
    assert model.fitted_on == 8 and model.profile != NOMINAL
    fitted = model.profile
    model.refresh(recs)
    assert model.profile is fitted  # nothing new: no refit
    again = SimModel(space)  # a resumed driver
    again.refresh(list(reversed(recs)))
    assert again.profile == fitted
    fixed = SimModel(space.model_copy(update={"study": space.study.model_copy(update={
        "strategy": space.study.strategy.model_copy(update={"model_profile": "nominal"})})}))
    fixed.refresh(recs)
    assert fixed.profile == NOMINAL and fixed.fitted_on == 0


def test_a_screened_study_on_the_simulator_runs_to_its_target():
    sp = small_space(screen=True, screen_requests=100, recalibrate_every=5)
    sp = sp.model_copy(update={"study": sp.study.model_copy(update={"confirm": ConfirmSection(finalists=0)})})
    study = open_study(sp, "sim-screen", None, _study_sampler(sp)).study
    TrialLoop(study, sp, SimClockPool(2, backend=SimBackend(profile=NOMINAL.perturbed(2))), target=14, seed=0).run()
    recs = records(study.get_trials(deepcopy=False))
    assert sum(r.state == State.COMPLETE for r in recs) == 14
    assert study.sampler.model.fitted_on == 10  # refitted at 5 and 10 launched trials
