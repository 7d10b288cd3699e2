"""How far a config is from not starting: its memory headroom per GPU.

A config that starts with 0.1 GiB to spare on the tuning machine will not start on a
machine whose driver has a larger CUDA context, where a monitoring process holds memory, or
under a vLLM that profiles a little more. Two distances, in GiB per GPU, and the margin is
the smaller:

* **unused GPU memory at the peak**: total minus the engine's peak use (measured where the
  backend reports it, else the memory model's prediction). Memory another process or a
  larger CUDA context takes comes out of this.
* **KV cache beyond one request**: vLLM refuses to start unless one ``max_model_len``
  request fits in the KV cache, and the KV cache is what is left of the budget after
  weights, activations and (by default) CUDA graphs; more non-torch or activation memory
  comes out of this. From the KV size the engine reported, else the prediction.

Both are backend-agnostic: they read the trial metrics every backend reports
(``peak_mem_gib_max``, ``kv_cache_tokens``) and :mod:`autotune.deploy`'s memory model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.deploy import find_gpu, plan_startup, resolve_deployment
from autotune.deploy.memory import GiB
from autotune.engine import unmodelled_flags
from autotune.errors import UserError
from autotune.space import SearchSpace


@dataclass(frozen=True)
class Headroom:
    gib: float  # the margin per GPU; NaN when neither distance is known
    detail: str  # each distance, with where it comes from

    @property
    def known(self) -> bool:
        return not math.isnan(self.gib)

    def below(self, margin_gib: float) -> bool:
        """Known to be short of ``margin_gib`` (an unknown headroom is not)."""
        return self.known and self.gib < margin_gib


UNKNOWN = Headroom(math.nan, "unknown: no measured peak and no memory model for this model and GPU")


def headroom(flags: Mapping[str, Any], runs: Sequence[Mapping[str, float]], space: SearchSpace) -> Headroom:
    """The margin of the config ``flags`` from its runs' metrics and the memory model."""
    e = space.engine
    dep = None
    if not unmodelled_flags(flags):  # the model cannot speak for a flag it does not model
        try:
            dep = resolve_deployment(e.model, e.gpu, flags, e.env)
        except UserError:
            dep = None
    # A prediction is autotune's own model's (study.strategy's profile), never engine.sim_profile:
    # that is the physics a sim backend runs, reality's stand-in, which autotune does not know.
    plan = plan_startup(dep, space.study.strategy.base_profile) if dep is not None else None
    plan = plan if plan is not None and plan.ok else None
    parts: list[tuple[float, str]] = []

    gpu = find_gpu(e.gpu)
    peaks = [m["peak_mem_gib_max"] for m in runs if _finite(m.get("peak_mem_gib_max"))]
    if peaks and gpu is not None:
        parts.append((gpu.mem_total_gib - max(peaks), "unused GPU memory at the peak, measured"))
    elif plan is not None:
        parts.append((plan.mem.headroom, "unused GPU memory at the peak, predicted"))

    if dep is not None:
        kv_tokens = [m["kv_cache_tokens"] for m in runs if _finite(m.get("kv_cache_tokens")) and m["kv_cache_tokens"] > 0]
        tokens, source = (min(kv_tokens), "engine-reported") if kv_tokens else (
            (plan.kv_cache_tokens, "predicted") if plan is not None else (None, ""))
        if tokens is not None:
            # vLLM's check: one max_model_len request plus the null block must fit (V1 BlockPool).
            need = (math.ceil(dep.max_model_len / dep.block_size) + 1) * dep.block_size
            parts.append(((tokens - need) * dep.kv_bytes_per_token / GiB,
                          f"KV cache beyond one max_model_len request, {source}"))
    if not parts:
        return UNKNOWN
    gib = min(p[0] for p in parts)
    return Headroom(gib, "; ".join(f"{what} {v:.2f} GiB" for v, what in parts))


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)
