"""Pruning that learns its error: no feasible config is rejected when the truth's memory constants
differ from autotune's model, and what the startups show tightens the rule.

The "truth" is ``SimProfile.perturbed(seed)``: the startup memory model with every constant drawn
within its documented range. Startups are made up from the truth's own accounting (what an engine
would report: its KV cache size, or vLLM's KV-shortage message), so these tests are fast. SIMULATED.
"""

from __future__ import annotations

import random

import pytest

from autotune.deploy import NOMINAL, SimProfile, plan_startup
from autotune.results import FailureClass
from autotune.space.schema import StrategySection
from autotune.study.search.pruning import MemoryModel, StartupPredictor, startup_observations
from autotune.study.trials.record import Role, State, TrialRecord
from experiments.search import common as C

TRUTHS = range(12)


def space(**strategy):
    sp = C.space()
    return sp.model_copy(update={"study": sp.study.model_copy(update={"strategy": StrategySection(**strategy)})})


def config(rng: random.Random, sp, gmu: float | None = None) -> dict:
    params = {
        "gpu_memory_utilization": gmu if gmu is not None else rng.choice([0.87, 0.88, 0.89, 0.9, 0.91, 0.93, 0.95]),
        "max_num_seqs": rng.choice([16, 32, 64, 128, 256]),
        "block_size": rng.choice([16, 32]),
        "enforce_eager": rng.random() < 0.5,
        "max_num_batched_tokens": rng.choice([2048, 4096, 8192]),
        "kv_cache_dtype": rng.choice(["auto", "fp8"]),
    }
    return {**sp.fixed_flags(), **params}


def startup(number: int, flags: dict, truth: SimProfile, model: MemoryModel) -> TrialRecord:
    """The record of launching ``flags`` on the truth: what the engine reports."""
    plan = plan_startup(model.deployment(flags), truth)
    r = TrialRecord(number, State.COMPLETE, flags=flags, started=plan.ok,
                    metrics={"kv_cache_tokens": float(plan.kv_cache_tokens)})
    if not plan.ok:
        r.failure_class, r.failure_reason = str(plan.failure_class), plan.failure_reason
    return r


def truth_starts(flags: dict, truth: SimProfile, model: MemoryModel) -> bool:
    return plan_startup(model.deployment(flags), truth).ok


@pytest.mark.parametrize("seed", TRUTHS)
def test_no_config_the_truth_can_start_is_rejected_before_or_after_learning(seed):
    sp = space()
    truth = NOMINAL.perturbed(seed)
    rng = random.Random(seed)
    pred = StartupPredictor.for_space(sp)
    seen: list[TrialRecord] = []
    for n in range(40):
        flags = config(rng, sp)
        reason = pred.failure(flags)
        if reason:
            assert not truth_starts(flags, truth, pred.memory), f"truth {seed}: wrongly rejected {flags}: {reason}"
        else:
            seen.append(startup(n, flags, truth, pred.memory))
            pred.update(seen)


def test_before_any_startup_only_what_no_constants_in_the_ranges_start_is_rejected():
    sp = space()
    learning, plain = StartupPredictor.for_space(sp), StartupPredictor.for_space(space(prune_learns_error=False))
    # vLLM's defaults at a gmu the nominal model cannot start, but the favourable corner can.
    flags = {**sp.fixed_flags(), "gpu_memory_utilization": 0.89}
    assert not plan_startup(learning.memory.deployment(flags), NOMINAL).ok
    assert plan_startup(learning.memory.deployment(flags), learning.memory.favourable).ok
    assert plain.failure(flags).startswith("predicted startup failure")
    assert learning.failure(flags) == ""
    # Weights alone exceed the budget: nothing in the ranges changes that.
    assert learning.failure({**flags, "gpu_memory_utilization": 0.85}).startswith("predicted startup failure")


def test_startups_tighten_the_rule_to_the_truth():
    """After a dozen startups of a truth, configs the truth cannot start by a clear margin are
    rejected, whichever side of the nominal model's boundary they lie."""
    sp = space()
    truth = NOMINAL.perturbed(4)
    rng = random.Random(0)
    pred = StartupPredictor.for_space(sp)
    seen = [startup(n, config(rng, sp, gmu=0.95), truth, pred.memory) for n in range(12)]
    pred.update(seen)
    assert pred.learned is not None and pred.learned.observations == 12
    rejected = launched = 0
    for _ in range(60):
        flags = config(rng, sp)
        dep = pred.memory.deployment(flags)
        short = pred.memory.needed_gib(dep) - pred.memory.available_gib(dep, truth)
        if short > 0.1:  # the truth is more than 0.1 GiB of KV memory short
            assert pred.failure(flags), flags
            rejected += 1
        elif short < 0:
            assert pred.failure(flags) == ""
            launched += 1
    assert rejected and launched


def test_the_fit_sees_through_the_model_profile_it_starts_from():
    sp = space()
    truth = NOMINAL.perturbed(0)
    pred = StartupPredictor.for_space(sp)
    rng = random.Random(1)
    pred.update([startup(n, config(rng, sp, gmu=0.95), truth, pred.memory) for n in range(10)])
    fit = pred.learned
    assert fit is not None and fit.within_ranges
    assert abs(fit.bias_gib) > 0.1  # nominal was off ...
    assert fit.spread_gib < 0.01  # ... and the fitted constants are not
    assert fit.profile.activation_scale == pytest.approx(truth.activation_scale, rel=0.03)


def test_a_kv_shortage_failure_is_an_upper_bound_and_other_failures_say_nothing():
    sp = space()
    mm = StartupPredictor.for_space(sp).memory
    ok = TrialRecord(0, State.COMPLETE, flags=dict(sp.fixed_flags()), metrics={"kv_cache_tokens": 18816.0})
    short = TrialRecord(1, State.COMPLETE, flags={**sp.fixed_flags(), "gpu_memory_utilization": 0.88}, started=False,
                        failure_class=str(FailureClass.STARTUP_OOM),
                        failure_reason="No available memory for the cache blocks. Try increasing ...")
    crash = TrialRecord(2, State.COMPLETE, flags=dict(sp.fixed_flags()), started=False,
                        failure_class=str(FailureClass.CRASH), failure_reason="engine died")
    rejected = TrialRecord(3, State.REJECTED, flags=dict(sp.fixed_flags()), started=False)
    offload = TrialRecord(4, State.COMPLETE, flags={**sp.fixed_flags(), "cpu_offload_gb": 4},
                          metrics={"kv_cache_tokens": 1e5})
    obs = startup_observations([ok, short, crash, rejected, offload])
    assert [(o.number, o.shortage) for o in obs] == [(0, False), (1, True)]
    del mm


def test_learning_is_a_function_of_the_records_so_a_resumed_study_decides_alike():
    sp = space()
    truth = NOMINAL.perturbed(5)
    rng = random.Random(2)
    a = StartupPredictor.for_space(sp)
    recs = [startup(n, config(rng, sp), truth, a.memory) for n in range(8)]
    a.update(recs)
    b = StartupPredictor.for_space(sp)  # a new driver after a kill
    b.update(list(reversed(recs)))
    probe = [config(rng, sp) for _ in range(30)]
    assert [a.failure(f) for f in probe] == [b.failure(f) for f in probe]


def test_the_plain_rule_and_roles_are_kept():
    from autotune.study.search import strategy

    sp = space(prune_learns_error=False)
    pred = StartupPredictor.for_space(sp)
    pred.update([startup(0, dict(sp.fixed_flags()), NOMINAL, pred.memory)])
    assert pred.learned is None  # learning off: nothing is fitted
    bad = {**sp.fixed_flags(), "gpu_memory_utilization": 0.85}
    assert strategy.prune_reason(pred, bad, Role.SEARCH)
    for role in (Role.BASELINE, Role.REFERENCE, Role.CONFIRM):
        assert strategy.prune_reason(pred, bad, role) == ""


def test_autotunes_own_model_never_reads_engine_sim_profile(tmp_path):
    """engine.sim_profile is the physics a sim backend runs; pruning uses study.strategy.model_profile."""
    truth = NOMINAL.perturbed(7)
    truth.save(tmp_path / "truth.yaml")
    sp = C.space()
    data = sp.model_dump(mode="json")
    data["engine"]["sim_profile"] = str(tmp_path / "truth.yaml")
    from autotune.space.loader import parse_space

    with_truth = parse_space(data, tmp_path / "space.yaml")
    assert with_truth.engine.profile == truth
    assert StartupPredictor.for_space(with_truth).memory.profile == NOMINAL
    data["study"]["strategy"] = {"model_profile": "mine.yaml"}
    NOMINAL.perturbed(8).save(tmp_path / "mine.yaml")
    own = parse_space(data, tmp_path / "space.yaml")
    assert StartupPredictor.for_space(own).memory.profile == NOMINAL.perturbed(8)


def test_a_model_profile_that_does_not_load_is_one_line(tmp_path):
    from autotune.errors import UserError
    from autotune.space.loader import parse_space

    data = C.space().model_dump(mode="json")
    data["study"]["strategy"] = {"model_profile": "missing.yaml"}
    with pytest.raises(UserError, match=r"study.strategy: model_profile is nominal, calibrated or a SimProfile file: "
                                        r".*missing.yaml: no such profile file"):
        parse_space(data, tmp_path / "space.yaml")
