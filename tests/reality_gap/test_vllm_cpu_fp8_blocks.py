"""experiments/vllm_cpu/fp8_blocks.py: its four variants separate dtype from cache size (no server runs)."""

from __future__ import annotations

from experiments.vllm_cpu import fp8_blocks as F

BF16_BYTES_PER_TOKEN = 8192  # the toy model's bf16 KV (experiments/vllm_cpu/space.yaml)


def _tokens(flags: dict) -> float:
    per_token = BF16_BYTES_PER_TOKEN / (2 if flags["kv_cache_dtype"] == "fp8" else 1)
    return flags["kv_cache_memory_bytes"] / per_token


def test_each_size_has_both_dtypes_at_the_same_tokens_and_nothing_else_differs():
    v = F.VARIANTS
    assert _tokens(v["fp8-12k"]) == _tokens(v["bf16-12k"]) == 2 * _tokens(v["bf16-6k"]) == 2 * _tokens(v["fp8-6k"])
    assert {f["kv_cache_dtype"] for f in v.values()} == {"fp8", "auto"}
    for flags in v.values():
        rest = {k: x for k, x in flags.items() if k not in ("kv_cache_dtype", "kv_cache_memory_bytes")}
        assert rest == F.C42
