"""Shared setup for the simulator tests: the flagship deployment and a small workload."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.workload import LengthDist, WorkloadSpec

QWEN72B = "Qwen/Qwen2.5-72B-Instruct"
A100 = "A100-80GB"
# vLLM before v0.21 (or VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0): CUDA graphs outside the
# gpu_memory_utilization budget. Tests whose gmu values sit at that accounting's edges (the
# startup boundary near 0.89, thin headroom at 0.975, the capture OOM at 0.98) pin it.
GRAPHS_OUTSIDE = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
# The V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0): unchunked prompt logprobs.
V1_RUNNER = {"VLLM_USE_V2_MODEL_RUNNER": "0"}


def qwen_flags(**over: Any) -> dict[str, Any]:
    flags: dict[str, Any] = {"tensor_parallel_size": 2, "max_model_len": 8192, "dtype": "bfloat16"}
    flags.update(over)
    return flags


def chat_workload(n: int = 300, **over: Any) -> WorkloadSpec:
    kw: dict[str, Any] = dict(
        num_requests=n,
        concurrency=16,
        prompt_len=LengthDist(dist="lognormal", mean=300, sigma=0.8, min=16, max=3000),
        output_len=LengthDist(dist="lognormal", mean=160, sigma=0.6, min=8, max=1024),
        shared_prefix_fraction=0.8,
        shared_prefix_len=1024,
    )
    kw.update(over)
    return WorkloadSpec(**kw)


@pytest.fixture
def workload() -> WorkloadSpec:
    return chat_workload()
