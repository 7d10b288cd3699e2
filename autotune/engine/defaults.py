"""The values vLLM resolves for flags left unset, which depend on the device.

The defaults themselves are declared with each flag (:mod:`autotune.engine.config`); this
module picks the device class and applies the adjustments vLLM 0.32.0 makes to its batch
defaults (``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.engine.config import FLAG_SPECS, world_size
from autotune.engine.spec import DeviceClass, PerDevice

GPU_70GB_GIB = 70.0
GPU_160GB_GIB = 160.0


def device_class(gpu_name: str, gpu_mem_gib: float | None) -> DeviceClass:
    """The class vLLM picks its defaults by, for the device named in a space.

    ``cpu`` is vLLM's CPU build. A GPU autotune has no memory figure for (``gpu_mem_gib``
    None) gets :attr:`DeviceClass.GPU`: the class vLLM itself falls back to when it cannot
    read the device (``get_batch_defaults`` then takes ``device_memory = 0``).
    """
    if gpu_name.strip().lower() == "cpu":
        return DeviceClass.CPU
    if gpu_mem_gib is None:
        return DeviceClass.GPU
    if gpu_mem_gib >= GPU_160GB_GIB:
        return DeviceClass.GPU_160GB
    if gpu_mem_gib >= GPU_70GB_GIB and "a100" not in gpu_name.lower():
        return DeviceClass.GPU_70GB
    return DeviceClass.GPU


def resolve_defaults(flags: Mapping[str, Any], gpu_name: str, gpu_mem_gib: float | None) -> dict[str, Any]:
    """``flags`` with every unset (None or absent) flag that has a default set to vLLM's.

    max_model_len comes from the model's config.json, so the caller resolves it; without
    it the batch-default adjustments that depend on it are skipped. Flags vLLM derives at
    startup (default None) stay absent.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    out: dict[str, Any] = {n: s.default for n, s in FLAG_SPECS.items() if s.default_is_static and s.default is not None}
    out.update(given)
    device = device_class(gpu_name, gpu_mem_gib)
    gpus = world_size(out)
    for name, spec in FLAG_SPECS.items():
        if isinstance(spec.default, PerDevice) and name not in given:
            out[name] = spec.default.value(device, gpus)
    _adjust_batch_defaults(out, given)
    return out


def _adjust_batch_defaults(out: dict[str, Any], given: Mapping[str, Any]) -> None:
    """vLLM's changes to its own batch defaults (never to values the user gave)."""
    max_len = out.get("max_model_len")
    if "max_num_batched_tokens" not in given and max_len is not None:
        if not out["enable_chunked_prefill"]:
            # Without chunked prefill a whole prompt must fit one step.
            out["max_num_batched_tokens"] = max(out["max_num_batched_tokens"], max_len)
        out["max_num_batched_tokens"] = min(out["max_num_seqs"] * max_len, out["max_num_batched_tokens"])
    if "max_num_seqs" not in given:
        out["max_num_seqs"] = min(out["max_num_seqs"], out["max_num_batched_tokens"])
