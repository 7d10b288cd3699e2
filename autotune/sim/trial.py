"""One simulated trial, from flags to a TrialResult: resolve, plan startup, simulate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.deploy import (
    NOMINAL,
    SimProfile,
    VllmEnv,
    get_device,
    plan_startup,
    resolve_deployment,
    resolve_model,
)
from autotune.early_stop import EarlyStopRule
from autotune.engine import unmodelled_flags
from autotune.errors import UserError
from autotune.results import FailureClass, TrialResult, startup_failure
from autotune.sim.engine import TrialSim
from autotune.sim.quirks import NONE, Quirks
from autotune.workload import WorkloadSpec


def simulate_trial(model: str, gpu: str, flags: Mapping[str, Any], workload: WorkloadSpec,
                   seed: int = 0, early_stop: EarlyStopRule | None = None, *,
                   env: Mapping[str, str] | None = None, profile: SimProfile = NOMINAL,
                   quirks: Quirks = NONE, record_draws: bool = False) -> TrialResult:
    """Start a simulated vLLM with ``flags`` and run the workload's benchmark on it.

    ``env`` is the server's environment (a space's ``engine.env``): the vLLM variables that
    change its memory behaviour are read from it (:mod:`autotune.deploy.vllm_env`).
    ``profile`` holds the simulator's uncertain constants and its noise switch; ``quirks``
    the structural departures of a benchmark's truth (:mod:`autotune.sim.quirks`; none
    otherwise).

    An unknown model or GPU, or a vLLM variable vLLM could not parse, raises UserError (the
    space is wrong, not the trial); a flag vLLM would reject and a startup that fails come
    back as startup_failed results. ``record_draws`` (noise off only) puts the trial's crash
    draws in ``extra["crash_draws"]``, for :func:`autotune.sim.hazard.survives`. Flags the
    simulator does not model are ignored (the entry points refuse them unless the space opts
    in), and the result says so in ``warnings``.
    """
    resolve_model(model)
    get_device(gpu)
    VllmEnv.from_env(env)
    result = _run(model, gpu, flags, workload, seed, early_stop, env, profile, quirks, record_draws)
    ignored = unmodelled_flags(flags)
    if ignored:
        result.warnings.append(f"the simulator does not model {', '.join(ignored)}: these simulated numbers "
                               "do not show the effect of that setting (engine.allow_unmodelled_flags)")
    return result


def _run(model: str, gpu: str, flags: Mapping[str, Any], workload: WorkloadSpec, seed: int,
         early_stop: EarlyStopRule | None, env: Mapping[str, str] | None, profile: SimProfile,
         quirks: Quirks = NONE, record_draws: bool = False) -> TrialResult:
    try:
        dep = resolve_deployment(model, gpu, flags, env)
    except UserError as e:
        return startup_failure("sim", FailureClass.INVALID_CONFIG, str(e), [str(e)], workload.num_requests)
    plan = plan_startup(dep, profile)
    if not plan.ok:
        res = startup_failure("sim", plan.failure_class, plan.failure_reason,
                              [*plan.log, plan.failure_reason], workload.num_requests, plan.startup_s)
        res.kv_cache_tokens = plan.kv_cache_tokens  # sized before a CUDA-graph OOM, else 0
        res.gpus, res.goodput_slo = dep.gpus, workload.goodput_slo
        res.extra = {"simulated": True, "mem_gib": plan.mem.as_dict()}
        return res
    return TrialSim(dep, plan, workload, profile, seed, early_stop, quirks, quirks.field_factor(flags),
                    record_draws).run()
