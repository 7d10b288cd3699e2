"""Suggesting params from the space: conditions, declarative constraints, repair."""

from __future__ import annotations

import optuna

from autotune.space.schema import SearchSpace
from autotune.study.trials.params import check_constraints, suggest_params


def _space(**extra) -> SearchSpace:
    d = {
        "version": 1,
        "engine": {"backend": "noop", "model": "m", "flags": {"max_model_len": 8192}},
        "params": {
            "enable_chunked_prefill": {"type": "bool"},
            "max_num_batched_tokens": {"type": "int", "low": 1024, "high": 16384, "step": 1024},
            "long_prefill_token_threshold": {"type": "int", "low": 256, "high": 4096, "log": True,
                                             "when": {"enable_chunked_prefill": True}},
        },
    }
    d.update(extra)
    return SearchSpace.model_validate(d)


def test_conditional_param_only_when_condition_holds():
    sp = _space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = {True: 0, False: 0}
    for _ in range(30):
        t = study.ask()
        p = suggest_params(t, sp)
        seen[p["enable_chunked_prefill"]] += 1
        assert ("long_prefill_token_threshold" in p) == p["enable_chunked_prefill"]
        study.tell(t, 0.0)
    assert seen[True] and seen[False]


def test_repair_raises_budget_to_max_model_len_without_chunked_prefill():
    sp = _space(constraints=[{"when": {"enable_chunked_prefill": False}, "left": "max_num_batched_tokens",
                              "op": ">=", "right": "max_model_len", "action": "repair"}])
    params, violated = check_constraints(
        {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, sp, {"max_model_len": 8192})
    assert violated == [] and params["max_num_batched_tokens"] == 8192
    # With chunked prefill on the constraint does not apply.
    params, violated = check_constraints(
        {"enable_chunked_prefill": True, "max_num_batched_tokens": 2048}, sp, {"max_model_len": 8192})
    assert violated == [] and params["max_num_batched_tokens"] == 2048


def test_reject_when_repair_impossible_or_asked():
    sp = _space(constraints=[{"name": "too small", "when": {"enable_chunked_prefill": False},
                              "left": "max_num_batched_tokens", "op": ">=", "right": 20000, "action": "repair"}])
    _, violated = check_constraints({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, sp, {})
    assert violated == ["too small"]
    sp = _space(constraints=[{"left": "max_num_batched_tokens", "op": "<", "right": 4096}])
    _, violated = check_constraints({"enable_chunked_prefill": True, "max_num_batched_tokens": 8192}, sp, {})
    assert len(violated) == 1
