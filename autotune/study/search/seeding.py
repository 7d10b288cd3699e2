"""Warm start: the vLLM-defaults baseline first, then the space's reference configs.

Enqueued once, when the study is created; a resumed study does not enqueue them again.
"""

from __future__ import annotations

import logging
from typing import Any

import optuna

from autotune.engine import resolve_defaults
from autotune.space import SearchSpace
from autotune.study.search.hardware import gpu_memory_gib
from autotune.study.trials import BASELINE_NAME, Role, enqueue_attrs

log = logging.getLogger(__name__)


def baseline_params(space: SearchSpace) -> dict[str, Any]:
    """The searched flags at the values vLLM picks when they are left unset on this GPU."""
    resolved = resolve_defaults(space.fixed_flags(), space.engine.gpu, gpu_memory_gib(space.engine.gpu))
    out = {}
    for name, p in space.params.items():
        v = resolved.get(name)
        # Optuna cannot record a categorical value outside its choices (numbers outside
        # their range it can); such a default is left to the sampler, and said so.
        if v is None or (p.type == "categorical" and v not in (p.choices or [])):
            log.warning("baseline: vLLM's default %s=%r is not in the space; the sampler picks it", name, v)
            continue
        if p.type in ("int", "float") and not p.low <= v <= p.high:
            log.info("baseline: vLLM's default %s=%r is outside the searched range %g-%g; the baseline runs it "
                     "all the same (what an unset flag deploys)", name, v, p.low, p.high)
        out[name] = v
    return out


def enqueue_warm_start(study: optuna.Study, space: SearchSpace, target: int | None = None) -> None:
    """The baseline, then the references that fit a budget of ``target`` trials (the
    space's ``study.trials`` by default): at most a quarter of it, in the file's order."""
    from autotune.study.search.confirm import warm_start_references

    defaults = baseline_params(space)
    study.enqueue_trial(defaults, user_attrs=enqueue_attrs(Role.BASELINE, BASELINE_NAME))
    n = warm_start_references(target or space.study.trials, len(space.references))
    if n < len(space.references):
        log.warning("warm start: %d of %d references fit a budget of %d trials", n, len(space.references),
                    target or space.study.trials)
    for ref in space.references[:n]:
        # Searched flags a reference leaves unset take vLLM's defaults, as they would when
        # the reference config is deployed; they must not be sampled at random.
        params = {**defaults, **{k: v for k, v in ref.flags.items() if k in space.params}}
        study.enqueue_trial(params, user_attrs=enqueue_attrs(Role.REFERENCE, ref.name))


def reference_fixed_overrides(space: SearchSpace, name: str) -> dict[str, Any]:
    """A reference's flags that are not searched (set on top of the fixed flags)."""
    for ref in space.references:
        if ref.name == name:
            return {k: v for k, v in ref.flags.items() if k not in space.params}
    return {}
