"""vLLM's default may lie outside a searched range; the baseline measures it all the same.

On an H100 vLLM's OpenAI server defaults to max_num_seqs 1024, which a space may search only
up to 512. The baseline is what an unset flag deploys, so it runs the default: the log says
so once in autotune's words, and Optuna's generic "out of range" warning stays out of the
user's terminal. No Ray, no engine: the proposal step on an in-memory study.
"""

from __future__ import annotations

import logging
import warnings

import optuna

from autotune.space.schema import SearchSpace
from autotune.study.search.proposal import propose
from autotune.study.search.seeding import baseline_params, enqueue_warm_start
from autotune.study.trials.record import Role

SPACE = {
    "version": 1,
    "engine": {"backend": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "H100",
               "flags": {"max_model_len": 8192}},
    "params": {"max_num_seqs": {"type": "int", "low": 32, "high": 512, "log": True},
               "gpu_memory_utilization": {"type": "float", "low": 0.85, "high": 0.95}},
    "workload": {"num_requests": 50, "concurrency": 8, "prompt_len": {"dist": "fixed", "mean": 200},
                 "output_len": {"dist": "fixed", "mean": 50}},
    "objectives": [{"metric": "oom_per_1k", "direction": "minimize"},
                   {"metric": "p99_e2e_s", "direction": "minimize"}],
    "study": {"name": "outside", "trials": 8},
}


def test_the_baseline_runs_a_default_outside_the_range_and_says_so_once(caplog):
    sp = SearchSpace.model_validate(SPACE)
    with caplog.at_level(logging.INFO, logger="autotune.study.search.seeding"):
        defaults = baseline_params(sp)
    assert defaults["max_num_seqs"] > 512  # vLLM's H100 default, outside the searched 32-512
    said = [r.getMessage() for r in caplog.records if "outside the searched range" in r.getMessage()]
    assert len(said) == 1 and "max_num_seqs" in said[0]

    study = optuna.create_study(directions=["minimize", "minimize"])
    enqueue_warm_start(study, sp)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        p = propose(study.ask(), sp, None)
    assert p.record.role == Role.BASELINE and p.record.params["max_num_seqs"] == defaults["max_num_seqs"]
    assert not [w for w in seen if "out of range" in str(w.message)]
