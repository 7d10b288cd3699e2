"""How the next trial is chosen (Ray Tune's Searcher seam): samplers, the proposal (sample, repair,
prune), the memory model that prunes and learns its error, the simulator screen, the sweep,
the warm start, confirmation and racing within the budget, and the strategy's early-stop rule.
"""

from __future__ import annotations

from autotune.study.search.confirm import (
    Kind,
    Step,
    budget_needed,
    budget_note,
    budget_plan,
    confirm_trials,
    leader_repeat,
    leader_repeat_after,
    leader_repeats,
    next_step,
    race,
    search_quota,
)
from autotune.study.search.hardware import gpu_memory_gib
from autotune.study.search.proposal import propose, server_spec, trial_request
from autotune.study.search.pruning import (
    MEMORY_CONSTANTS,
    MemoryModel,
    StartupPredictor,
    startup_observations,
)
from autotune.study.search.residual import DEFAULT_RUN_SD, ResidualGP, encode, run_log_sd
from autotune.study.search.samplers import SAMPLERS, make_sampler
from autotune.study.search.screening import Choice, ScreeningSampler, WrappingSampler, score
from autotune.study.search.seeding import baseline_params
from autotune.study.search.strategy import RunSpread, early_stop_notice, early_stop_rule
from autotune.study.search.sweep import SweepSampler, as_choice, candidate_pool, param_values

__all__ = ["Choice", "DEFAULT_RUN_SD", "Kind", "MEMORY_CONSTANTS", "MemoryModel", "ResidualGP", "RunSpread", "SAMPLERS", "ScreeningSampler", "StartupPredictor", "Step", "SweepSampler", "WrappingSampler", "as_choice", "baseline_params", "budget_needed", "budget_note", "budget_plan", "candidate_pool", "confirm_trials", "early_stop_notice", "early_stop_rule", "encode", "gpu_memory_gib", "leader_repeat", "leader_repeat_after", "leader_repeats", "make_sampler", "next_step", "param_values", "propose", "race", "run_log_sd", "score", "search_quota", "server_spec", "startup_observations", "trial_request"]
