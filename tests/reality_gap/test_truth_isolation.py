"""The truth reaches the study's backend and nothing else (issue 12: autotune's model never
sees the truth's constants). Everything is SIMULATED.
"""

from __future__ import annotations

import math

import pytest

import autotune.calibrate.model as model_mod
import autotune.calibrate.screen as screen_mod
import autotune.calibrate.stages as stages_mod
import autotune.sim.trial as trial_mod
import autotune.study.analysis.headroom as headroom_mod
import autotune.study.search.pruning as pruning_mod
from autotune.backends.sim import SimBackend
from autotune.deploy import NOMINAL, SimProfile, predict_startup
from autotune.sim.quirks import NONE
from autotune.study.analysis.export_rule import choose_for_export
from autotune.study.search.screening import ScreeningSampler
from autotune.study.search.sweep import SweepSampler
from experiments.reality_gap import families
from experiments.reality_gap import score as S
from experiments.reality_gap.strategies import variant
from experiments.reality_gap.study import build
from experiments.reality_gap.truth import scenario_space, truth_draw, truth_profile

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

SCENARIO = "trace-replay"


@pytest.mark.parametrize("truth_seed", [0, 3])
def test_autotunes_model_is_built_nominal_whatever_the_truth(truth_seed):
    space = scenario_space(SCENARIO)
    truth = truth_profile(space, truth_seed)
    assert truth.to_dict() != NOMINAL.to_dict()
    bench = build(variant(space, "autotune"), SimBackend(profile=truth), seed=0, trials=4)
    assert bench.pool.backend.profile == truth  # the truth answers the trials
    assert bench.space.engine.profile == NOMINAL  # what the loop, export and headroom read
    assert bench.loop is not None and bench.loop.predictor is not None
    assert bench.loop.predictor.memory.profile == NOMINAL
    sampler = bench.study.sampler
    assert isinstance(sampler, SweepSampler) and isinstance(sampler.base, ScreeningSampler)
    assert sampler.model.base == NOMINAL and sampler.model.profile == NOMINAL


def test_no_truth_constant_reaches_pruning_screen_or_headroom(monkeypatch):
    """Run a study that prunes, screens and recalibrates (every 3 launched trials) under a
    truth, and record every profile autotune's own model computes with: none is the truth
    (noise on or off), and yet the measurements are the truth's."""
    space = scenario_space(SCENARIO)
    truth = truth_profile(space, 2)
    seen: list[SimProfile] = []

    def spy(module, name, pos):
        real = getattr(module, name)

        def wrapped(*args, **kwargs):
            seen.append(kwargs["profile"] if "profile" in kwargs else args[pos])
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)

    spy(pruning_mod, "plan_startup", 1)  # plan_startup(dep, profile)
    spy(headroom_mod, "plan_startup", 1)
    spy(screen_mod, "simulate", 2)  # simulate(space, flags, profile, requests, seed)
    spy(screen_mod, "fit_profile", 2)  # fit_profile(records, space, base, requests): the refit's start
    spy(model_mod, "simulate", 2)  # the refit's short benchmarks
    spy(stages_mod, "plan_startup", 1)  # the refit's startup stage
    sp = variant(space, "autotune")
    strategy = sp.study.strategy.model_copy(update={"recalibrate_every": 3})
    sp = sp.model_copy(update={"study": sp.study.model_copy(update={"strategy": strategy})})
    bench = build(sp, SimBackend(profile=truth), seed=1, trials=12).run()

    assert len(seen) > 20
    forbidden = (truth.to_dict(), truth.without_noise().to_dict())
    assert not [p for p in seen if p.to_dict() in forbidden]
    assert bench.study.sampler.model.fitted_on >= 3  # the screen did recalibrate, from the records

    # ... while the engines that started report the truth's KV cache, not the nominal model's.
    e = space.engine
    started = [r for r in bench.records() if r.launched and r.started]
    assert started
    for r in started:
        kv = r.metrics["kv_cache_tokens"]
        assert kv == predict_startup(e.model, e.gpu, r.flags, e.env, truth).kv_cache_tokens
    assert any(r.metrics["kv_cache_tokens"] != predict_startup(e.model, e.gpu, r.flags, e.env, NOMINAL).kv_cache_tokens
               for r in started)

    # The benchmark's export is the product's export rule.
    recs = bench.records()
    assert S.export_choice(recs, bench.space).flags == choose_for_export(bench.study, bench.space, 1.0).config.flags
    assert not math.isnan(S.gpu_hours_by(math.inf, S.timeline(recs, bench.pool.log), 1))


def test_a_structural_truths_quirks_reach_the_backend_alone(monkeypatch):
    """Issue 18: the structural family's quirks and node offsets answer the trials; every
    simulation autotune's own model runs (pruning, screen, sweep, recalibration) has none."""
    space = scenario_space("small-highconc")
    draw = truth_draw(space, "small-highconc", 1, "structural")
    assert draw.quirks.active
    calls: list[object] = []
    real = trial_mod.simulate_trial

    def spy(*args, **kwargs):
        calls.append(kwargs.get("quirks", NONE))
        return real(*args, **kwargs)

    monkeypatch.setattr(model_mod, "simulate_trial", spy)  # autotune's model
    sp = variant(space, "autotune")
    wl = sp.workload.model_copy(update={"num_requests": 200})
    strategy = sp.study.strategy.model_copy(update={"recalibrate_every": 3, "sweep_pool": 30, "screen_requests": 60})
    sp = sp.model_copy(update={"workload": wl, "study": sp.study.model_copy(update={"strategy": strategy})})
    bench = build(sp, families.TruthBackend(draw), seed=0, trials=6).run()
    assert calls and all(q is NONE or not q.active for q in calls)
    assert isinstance(bench.pool.backend, families.TruthBackend) and bench.pool.backend.truth == draw
    assert all(r.metrics for r in bench.records() if r.launched and r.started)
