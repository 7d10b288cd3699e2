"""Warm start: the vLLM-defaults baseline first, then the space's reference configs.

Enqueued once, when the study is created; a resumed study does not enqueue them again.
"""

from __future__ import annotations

from typing import Any

import optuna

from autotune.engine import resolve_defaults
from autotune.space import SearchSpace
from autotune.study.hardware import gpu_memory_gib

ROLE_BASELINE = "baseline"
ROLE_REFERENCE = "reference"
ROLE_SEARCH = "search"
ROLE_REJECTED = "rejected"


def baseline_params(space: SearchSpace) -> dict[str, Any]:
    """The searched flags at the values vLLM picks when they are left unset on this GPU."""
    resolved = resolve_defaults(space.fixed_flags(), space.engine.gpu, gpu_memory_gib(space.engine.gpu))
    return {name: resolved[name] for name in space.params if resolved.get(name) is not None}


def enqueue_warm_start(study: optuna.Study, space: SearchSpace) -> int:
    n = 0
    study.enqueue_trial(baseline_params(space), user_attrs={"role": ROLE_BASELINE, "reference": "vllm-defaults"})
    n += 1
    for ref in space.references:
        params = {k: v for k, v in ref.flags.items() if k in space.params}
        study.enqueue_trial(params, user_attrs={"role": ROLE_REFERENCE, "reference": ref.name})
        n += 1
    return n


def reference_fixed_overrides(space: SearchSpace, name: str) -> dict[str, Any]:
    """A reference's flags that are not searched (set on top of the fixed flags)."""
    for ref in space.references:
        if ref.name == name:
            return {k: v for k, v in ref.flags.items() if k not in space.params}
    return {}
