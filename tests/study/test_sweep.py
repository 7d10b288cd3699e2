"""The sweep (study/search/sweep.py) and its residual GP (study/search/residual.py): simulate everything,
measure few. Small spaces, an in-process loop on the simulator or a model written here (the
test says which); everything is SIMULATED, no wall-clock assertions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna
import pytest

from autotune.calibrate import screen_wrapper
from autotune.space import load_space
from autotune.space.schema import ParamSpec, StrategySection
from autotune.study.analysis import pooled_log_sd
from autotune.study.analysis.evidence import config_key
from autotune.study.search.residual import (
    DEFAULT_RUN_SD,
    SCALES,
    Marginal,
    ResidualGP,
    encode,
    most_likely,
    run_log_sd,
)
from autotune.study.search.samplers import make_sampler
from autotune.study.search.screening import ScreeningSampler
from autotune.study.search.sweep import SweepSampler, candidate_pool, param_values
from autotune.study.trials.record import Role, State, TrialRecord, enqueue_attrs
from experiments.scenarios.ground_truth import space_path
from experiments.search import harness as H

optuna.logging.set_verbosity(optuna.logging.WARNING)


def small_highconc(**strategy: Any):
    sp = load_space(space_path("small-highconc"))
    wl = sp.workload.model_copy(update={"num_requests": 150})
    st = sp.study.strategy.model_copy(update={"screen_requests": 60, "sweep_pool": 40, **strategy})
    study = sp.study.model_copy(update={"strategy": st, "confirm": sp.study.confirm.model_copy(update={"finalists": 0})})
    return sp.model_copy(update={"workload": wl, "study": study})


def test_pool_values_follow_the_param_kinds():
    assert param_values(ParamSpec(type="int", low=16, high=256, log=True)) == [16, 32, 64, 128, 256]
    assert param_values(ParamSpec(type="float", low=0.84, high=0.96, step=0.04)) == [0.84, 0.88, 0.92, 0.96]
    assert len(param_values(ParamSpec(type="float", low=0.85, high=0.98, step=0.005))) <= 12
    assert param_values(ParamSpec(type="bool")) == [False, True]


def test_pool_respects_constraints_size_and_seed():
    sp = load_space(space_path("bursty-goodput"))  # max_num_batched_tokens >= max_num_seqs
    pool = candidate_pool(sp, 50, seed=1)
    assert len(pool) == 50 and len({config_key(p) for p in pool}) == 50
    assert all(p["max_num_batched_tokens"] >= p["max_num_seqs"] for p in pool)
    assert pool == candidate_pool(sp, 50, seed=1) and pool != candidate_pool(sp, 50, seed=2)


def test_residual_gp_learns_a_structured_error_and_its_noise_from_repeats():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(25, 2))
    truth = lambda z: 0.15 * np.sin(3 * z[:, 0]) + 0.05  # noqa: E731
    r = truth(x) + rng.normal(0, 0.01, 25)
    gp = ResidualGP.fit(x, r, [1] * 25, 0.01)
    test = rng.uniform(0, 1, size=(20, 2))
    mu, sd = gp.predict(test)
    assert np.max(np.abs(mu - truth(test))) < 0.05
    far_mu, far_sd = gp.predict(np.array([[8.0, 8.0]]))
    assert far_sd[0] > 3 * np.max(sd)  # far from data: back to the prior ...
    assert abs(far_mu[0] - gp.mean) < 1e-6  # ... whose mean is the shared scale error
    measured = np.std(np.log([10, 11, 9]), ddof=1)  # 2 degrees of freedom, shrunk toward the default's 2
    assert run_log_sd([[10.0, 11.0, 9.0], [5.0]]) == pytest.approx(math.sqrt((measured ** 2 + DEFAULT_RUN_SD ** 2) / 2))
    many = [[10.0 * (1 + 0.2 * (i % 2)), 10.0] for i in range(400)]  # many repeats: their own spread
    assert run_log_sd(many) == pytest.approx(pooled_log_sd(many)[0], rel=0.01)
    assert run_log_sd([[5.0]]) == DEFAULT_RUN_SD


class Table:
    """A model written here: the metrics of each config from a formula; ``flip`` predicts the
    opposite ranking (a model that is wrong). Counts its calls."""

    def __init__(self, space, flip: bool = False, plane_gap: float = 0.0) -> None:
        self.space, self.flip, self.plane_gap, self.calls = space, flip, plane_gap, 0

    def value(self, flags: Mapping[str, Any]) -> float:
        s = 20.0 + 10 * abs(math.log2(flags["max_num_seqs"] / 128)) + 5 * (flags["max_num_batched_tokens"] / 8192)
        s += self.plane_gap * (bool(flags.get("enable_prefix_caching")) + (flags.get("kv_cache_dtype") == "fp8"))
        return 60.0 - s if self.flip else s

    def version(self, recs: Sequence[TrialRecord]) -> object:
        return 0

    def predict(self, configs, recs, seed):
        self.calls += len(configs)
        return [{"p99_e2e_s": self.value(f), "oom_per_1k": 0.0, "requests_ok": 10.0, "crashes": 0.0}
                for f in configs]


def _sweep_study(sp, model, seed=0):
    base = optuna.samplers.TPESampler(seed=seed)
    sampler = SweepSampler(base, sp, model, sp.study.strategy.sweep_pool, seed)
    return sampler, optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)


def test_first_sample_is_the_models_best_and_no_config_is_launched_twice():
    sp = small_highconc(warm_start=False, early_stop=False)
    model = Table(sp)
    sampler, study = _sweep_study(sp, model)
    pool_best = min(sampler.pool, key=lambda p: model.value({**sp.fixed_flags(), **p}))
    pool = H.SimClockPool(2)
    H.TrialLoop(study, sp, pool, target=8, seed=0).run()
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    assert trials[0].params == pool_best  # zero search: the model's own best goes first
    keys = [config_key(t.params) for t in trials]
    assert len(keys) == len(set(keys))
    assert all(d.startswith("sweep") for d in sampler.decisions.values())
    # Predictions are cached per model version: the pool was predicted once, plus the measured.
    assert model.calls <= len(sampler.pool) + len(trials)


def test_the_trust_region_keeps_late_launches_near_the_best_measured_config():
    """study.strategy.sweep_local_from: once that share of the trial budget is measured, every
    sweep launch is within LOCAL_FLAGS flags of the best measured config at that moment."""
    from autotune.study.search.sweep import LOCAL_FLAGS

    sp = small_highconc(warm_start=False, early_stop=False, sweep_local_from=0.25)
    sp = sp.model_copy(update={"study": sp.study.model_copy(update={"trials": 12})})
    sampler, study = _sweep_study(sp, Table(sp))
    H.TrialLoop(study, sp, H.SimClockPool(1), target=12, seed=0).run()
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    local = [n for n, why in sampler.decisions.items() if "of the leader" in why]
    assert local and min(local) >= 3  # not before a quarter of 12 trials is measured
    for n in local:
        done = [t for t in trials[:n] if t.values]
        leader = min(done, key=lambda t: t.values[1]).params  # p99, the Table's metric
        assert sum(trials[n].params[k] != leader[k] for k in leader) <= LOCAL_FLAGS
    assert StrategySection().sweep_local_from == 0.0  # off unless a space asks


def _first_parallel_asks(believer: bool):
    sp = small_highconc(warm_start=False, early_stop=False, sweep_believer=believer)
    sampler, study = _sweep_study(sp, Table(sp))
    H.TrialLoop(study, sp, H.SimClockPool(4), target=4, seed=0).run()  # four asks before any result
    return sp, [t.params for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]


def test_the_believer_spreads_parallel_asks_and_keeps_the_models_best_first():
    """study.strategy.sweep_believer: a running trial counts as measured at the GP's prediction,
    so a worker asking while it runs is not sent next door to it. The written model here is flat
    in three of the five flags, so the second ask has many configs predicted alike: without the
    believer it takes the first's nearest (one step of max_num_batched_tokens), with it one far
    off in the GP's own coordinates."""
    def gap(sp, a: dict[str, Any], b: dict[str, Any]) -> float:
        return float(np.linalg.norm(encode(sp, a) - encode(sp, b)))

    (sp, plain), (_, believed) = _first_parallel_asks(False), _first_parallel_asks(True)
    assert plain[0] == believed[0]  # zero search first, either way
    assert gap(sp, *believed[:2]) > 2 * gap(sp, *plain[:2])
    assert len({config_key(p) for p in believed}) == 4
    assert StrategySection().sweep_believer is False  # off unless a space asks


def test_the_believer_keeps_the_mean_and_shrinks_the_spread_near_a_running_point():
    rng = np.random.default_rng(1)
    x, r = rng.uniform(0, 1, size=(8, 3)), rng.normal(0, 0.05, 8)
    gp = ResidualGP.fit(x, r, [1] * 8, 0.05)
    q = rng.uniform(0, 1, size=(5, 3))
    (mu, sd), (mu_b, sd_b) = gp.predict(q), gp.believing(q[:1]).predict(q)
    assert np.allclose(mu, mu_b) and sd_b[0] < sd[0] and np.all(sd_b <= sd + 1e-12)
    prior = ResidualGP.prior(3, 0.05)
    assert np.allclose(prior.predict(q)[1], 0.1) and prior.believing(q[:1]).predict(q)[1][0] < 0.1


def test_the_averaged_gp_keeps_spread_on_a_plane_nothing_measured():
    """study.strategy.sweep_marginal: ten configs on one plane (three flags at 0) whose residuals
    agree make the smallest scale the most likely, and that GP claims to know the model's error
    on the other planes too; averaged over its grid the GP keeps more of the prior spread there,
    and more than near the data. Its mean stays the data's (one shared scale error)."""
    rng = np.random.default_rng(0)
    x = np.zeros((10, 5))
    x[:, :2] = rng.uniform(0, 1, size=(10, 2))
    r = 0.1 + rng.normal(0, 0.03, 10)
    fits = ResidualGP.fit_grid(x, r, [1] * 10, 0.08)
    best = most_likely(fits)
    ml = ResidualGP.fit(x, r, [1] * 10, 0.08)
    assert (best.length, best.scale) == (ml.length, ml.scale)
    assert best.scale == min(SCALES)  # the docstring's premise: agreeing residuals, the smallest scale
    mixed = Marginal.of(fits)
    assert mixed.weights.sum() == pytest.approx(1.0) and len(mixed.parts) == len(fits) > 1
    on, off = np.array([[0.5, 0.5, 0, 0, 0]]), np.array([[0.5, 0.5, 1, 1, 1]])
    assert mixed.predict(off)[1][0] > 2 * best.predict(off)[1][0]
    assert mixed.predict(off)[1][0] > mixed.predict(on)[1][0]
    assert mixed.predict(off)[0][0] == pytest.approx(float(np.mean(r)), abs=0.02)
    one = Marginal.of(fits[:1])  # a single grid point: the mixture is that GP
    q = rng.uniform(0, 1, size=(4, 5))
    assert np.allclose(one.predict(q)[0], fits[0].gp.predict(q)[0])
    assert np.allclose(one.predict(q)[1], fits[0].gp.predict(q)[1])
    assert np.all(mixed.believing(on).predict(on)[1] < mixed.predict(on)[1])
    assert StrategySection().sweep_marginal is False  # off unless a space asks


def test_the_sweep_runs_with_the_averaged_gp(monkeypatch):
    averaged = []
    of = Marginal.of
    monkeypatch.setattr(Marginal, "of", classmethod(lambda cls, fits: averaged.append(len(fits)) or of(fits)))
    sp = small_highconc(warm_start=False, early_stop=False, sweep_marginal=True)
    sampler, study = _sweep_study(sp, Table(sp))
    H.TrialLoop(study, sp, H.SimClockPool(1), target=8, seed=0).run()
    assert averaged and all(n > 1 for n in averaged)  # the switch reaches the sweep: it averaged the grid
    why = [sampler.decisions[n] for n in sorted(sampler.decisions)]
    assert len(why) == 8 and all(w.startswith("sweep") for w in why)
    assert len({config_key(t.params) for t in study.get_trials(deepcopy=False)}) == 8


def test_a_model_proved_wrong_hands_over_to_the_sampler():
    sp = small_highconc(warm_start=False, early_stop=False)
    sampler, study = _sweep_study(sp, Table(sp, flip=True))
    H.TrialLoop(study, sp, H.SimClockPool(1), target=12, seed=0).run()
    why = [sampler.decisions[n] for n in sorted(sampler.decisions)]
    assert why[0].startswith("sweep")
    assert any(w.startswith("fallback: the model's error") for w in why)


def test_search_sampler_puts_the_sweep_in_front_of_the_screen_and_can_be_switched_off():
    sp = small_highconc()
    s = make_sampler(sp.study.sampler, sp, 0, wrap=screen_wrapper)
    assert isinstance(s, SweepSampler) and isinstance(s.base, ScreeningSampler)
    assert s.model is s.base.model  # one model: a recalibration is paid once
    off = sp.model_copy(update={"study": sp.study.model_copy(update={"strategy": StrategySection(sweep=False)})})
    assert isinstance(make_sampler(off.study.sampler, off, 0, wrap=screen_wrapper), ScreeningSampler)


def test_encode_puts_every_param_in_the_unit_cube():
    sp = load_space(space_path("qwen72b-mixed"))
    pool = candidate_pool(sp, 30, seed=0)
    x = np.array([encode(sp, p) for p in pool])
    assert x.shape == (30, len(sp.params)) and x.min() >= 0.0 and x.max() <= 1.0


def test_truncated_mean_is_the_conditional_mean_above_the_floor():
    from autotune.study.search.sweep import truncated_mean

    rng = np.random.default_rng(0)
    draws = rng.normal(0.1, 0.2, 400_000)
    for floor in (-0.2, 0.1, 0.4):
        assert truncated_mean(0.1, 0.2, floor) == pytest.approx(draws[draws >= floor].mean(), abs=2e-3)
    assert truncated_mean(0.0, 0.1, 5.0) == 5.0  # far in the tail: only the bound is known
    assert truncated_mean(0.0, 0.1, -5.0) == pytest.approx(0.0, abs=1e-9)  # a bound far below says nothing


def test_an_early_stopped_configs_floor_is_imputed_above_itself_where_the_full_runs_say_it_is_worse():
    """A stopped benchmark's p99 is a lower bound: where full runs nearby measured far above it,
    the residual the GP learns there is theirs, not the bound's."""
    from autotune.study.search.sweep import impute_censored

    x = np.array([[0.0], [0.1], [0.9], [1.0], [0.05]])
    r = np.array([0.30, 0.32, 0.0, 0.01, 0.05])  # the last one stopped early at a bound of +0.05
    censored = np.array([False, False, False, False, True])
    out = impute_censored(x, r, [1, 1, 1, 1, 0.5], censored, 0.03)
    assert out[4] > 0.2  # near the full runs' +0.3, not at its bound
    assert np.array_equal(out[:4], r[:4])
    alone = impute_censored(x[3:], r[3:], [1, 0.5], censored[3:], 0.03)  # one full run: nothing to condition on
    assert np.array_equal(alone, r[3:])


def test_the_sweep_reads_an_early_stopped_run_as_a_floor_not_a_value():
    sp = small_highconc(warm_start=False, early_stop=False)
    sampler, _ = _sweep_study(sp, Table(sp))
    flags = {**sp.fixed_flags(), **sampler.pool[0]}

    def rec(n, v, stopped):
        return TrialRecord(number=n, state=State.COMPLETE, flags=flags, early_stopped=stopped,
                           metrics={"p99_e2e_s": v, "oom_per_1k": 0.0})

    (stopped,) = sampler._measured([rec(0, 30.0, True)])
    assert stopped.censored and stopped.values == [] and stopped.floors == [30.0]
    assert stopped.log_mean == pytest.approx(math.log(30.0))
    (both,) = sampler._measured([rec(0, 30.0, True), rec(1, 40.0, False)])
    assert not both.censored and both.log_mean == pytest.approx(math.log(40.0)) and both.weight == 1.0


PLANE_GAP = 12.0  # s the written model adds for prefix caching on and for fp8 KV each


def _first_planes(sp, n: int) -> tuple[list[tuple[Any, ...]], SweepSampler]:
    sampler, study = _sweep_study(sp, Table(sp, plane_gap=PLANE_GAP))
    H.TrialLoop(study, sp, H.SimClockPool(1), target=n, seed=0).run()
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    return [sp.plane(t.params) for t in trials], sampler


def test_the_first_share_of_sampled_trials_goes_to_planes_nothing_measured():
    """study.strategy.sweep_planes: the model written here ranks the planes with prefix caching and
    fp8 KV far behind (PLANE_GAP each), so the plain sweep's first six trials stay on fewer than six
    planes; with the switch the first half of a 12-trial budget lands on six distinct planes (bool
    and categorical values), the first still the model's best, and the rest of the budget is free
    to return to a measured plane."""
    plain_sp = small_highconc(warm_start=False, early_stop=False)
    sp = small_highconc(warm_start=False, early_stop=False, sweep_planes=0.5)
    sp = sp.model_copy(update={"study": sp.study.model_copy(update={"trials": 12})})
    plain, _ = _first_planes(plain_sp, 12)
    planes, sampler = _first_planes(sp, 12)
    assert planes[0] == plain[0]  # zero search first, either way
    assert len(set(planes[:6])) == 6 and len(set(plain[:6])) < 6
    why = [sampler.decisions[n] for n in sorted(sampler.decisions)]
    assert all("unmeasured planes" in w for w in why[1:6]) and not any("unmeasured planes" in w for w in why[6:])
    assert StrategySection().sweep_planes == 0.0  # off unless a space asks


def test_a_reference_on_the_models_favourite_plane_does_not_count_as_a_measured_plane():
    """study.strategy.sweep_planes counts the planes of sampled trials only: a reference is a
    comparison point, not the model's choice. Here one measured on the model's favourite plane
    (a neighbour of its best config) still leaves the first sampled trial to the model's best,
    and the second goes to another plane."""
    sp = small_highconc(warm_start=False, early_stop=False, sweep_planes=0.5)
    sp = sp.model_copy(update={"study": sp.study.model_copy(update={"trials": 8})})
    model = Table(sp, plane_gap=PLANE_GAP)
    sampler, study = _sweep_study(sp, model)
    best = min(sampler.pool, key=lambda p: model.value({**sp.fixed_flags(), **p}))
    neighbour = next(p for p in sampler.pool if sp.plane(p) == sp.plane(best) and p != best)
    study.enqueue_trial(neighbour, user_attrs=enqueue_attrs(Role.REFERENCE, "same-plane"))
    H.TrialLoop(study, sp, H.SimClockPool(1), target=3, seed=0).run()
    ref, first, second = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    assert ref.params == neighbour and first.params == best
    assert sp.plane(second.params) != sp.plane(best)
