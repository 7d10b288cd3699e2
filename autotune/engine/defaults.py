"""The defaults vLLM resolves when a flag is left unset, which depend on the GPU.

Source: vLLM ``EngineArgs._set_default_args`` (vllm/engine/arg_utils.py, V1 engine). For the
OpenAI API server, GPUs with >= 70 GiB that are not A100s get max_num_batched_tokens 8192
and max_num_seqs 1024; every other GPU (the A100-80GB included) gets 2048 and 256. V1
enables chunked prefill and prefix caching by default (unlike vLLM 0.8's V0 engine, which
the field report used).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BASE_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "block_size": 16,
    "enable_prefix_caching": True,
    "enable_chunked_prefill": True,
    "enforce_eager": False,
    "kv_cache_dtype": "auto",
    "dtype": "auto",
}


def server_scheduler_defaults(gpu_name: str, gpu_mem_gib: float) -> dict[str, int]:
    """max_num_batched_tokens / max_num_seqs that `vllm serve` picks on this GPU."""
    if gpu_mem_gib >= 70 and "a100" not in gpu_name.lower():
        return {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
    return {"max_num_batched_tokens": 2048, "max_num_seqs": 256}


def resolve_defaults(flags: Mapping[str, Any], gpu_name: str, gpu_mem_gib: float) -> dict[str, Any]:
    """``flags`` with every unset (None or absent) engine flag replaced by vLLM's default.

    max_model_len has no GPU-independent default (it comes from the model config), so it
    must be given; the caller resolves it from the model.
    """
    out: dict[str, Any] = {**BASE_DEFAULTS, **server_scheduler_defaults(gpu_name, gpu_mem_gib)}
    out.update({k: v for k, v in flags.items() if v is not None})
    if not out.get("enable_chunked_prefill", True) and "max_num_batched_tokens" not in {
        k for k, v in flags.items() if v is not None
    }:
        # Without chunked prefill a whole prompt must fit one step: vLLM raises the budget.
        out["max_num_batched_tokens"] = max(out["max_num_batched_tokens"], out.get("max_model_len") or 0)
    return out
