"""experiments/vllm_cpu/fp8_blocks.py and fp8_engine.py: the variants separate dtype from cache size, and the CPU
host's fp8 write cost is the engine's committed measurement (no server runs)."""

from __future__ import annotations

import pytest

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


def test_the_cpu_hosts_fp8_write_cost_is_the_engines_committed_measurement():
    """kv_fp8_quant_ns is measured (experiments/vllm_cpu/fp8_engine.py), not fitted: the constant is the
    committed in-engine figure, and that figure is the profile's fp8 write time less bf16's per element."""
    import json
    from pathlib import Path

    from autotune.deploy.profile import CPU_HOST
    from experiments.vllm_cpu import fp8_engine as E

    got = json.loads((Path(E.__file__).parent / "results" / "fp8_engine.json").read_text())
    fp8, bf16 = got["engine"]["fp8"], got["engine"]["auto"]
    per_element = (fp8["self_cpu_s"][E.WRITE_OP] - bf16["self_cpu_s"][E.WRITE_OP]) * 1e9 / (fp8["tokens_written"] * E.ELEMENTS)
    assert per_element == pytest.approx(got["engine_write_excess_ns_per_element"], abs=0.01)
    assert CPU_HOST["kv_fp8_quant_ns"][0] == pytest.approx(per_element, abs=0.5)
    assert fp8["tokens_written"] == sum(len(p) for p in E.prompts()) + E.PROMPTS * (E.OUTPUT - 1)


def test_fp8_engine_needs_vllms_cpu_build(capsys):
    try:
        import vllm  # noqa: F401
    except ImportError:
        from experiments.vllm_cpu import fp8_engine as E

        assert E.main([]) == 2
        err = capsys.readouterr().err
        assert "needs vLLM's CPU build" in err and ".vllm-cpu-venv/bin/python" in err and "Traceback" not in err
    else:
        pytest.skip("vLLM is importable here: the refusal is for autotune's own venv")
