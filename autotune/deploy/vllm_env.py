"""The vLLM environment variables that change what a deployment does with memory.

Real vLLM reads these at startup; a space sets them in ``engine.env`` (they reach the real
server the same way), and the memory model and the simulator read them from there. Unset
means vLLM 0.32.0's behaviour:

* ``VLLM_USE_V2_MODEL_RUNNER``: which GPU model runner executes steps. vLLM 0.32.0 uses
  Model Runner V2 unless told otherwise (``vllm/config/vllm.py``, ``use_v2_model_runner``:
  the variable when set, else V2 when Triton is there and no unsupported feature is on).
  V2 became the default for dense models with vllm#44443 (v0.28.0) and for all models in
  v0.29.0. The runners differ in prompt-logprobs memory (V2 chunks it, V1 does not) and in
  the sampler's logprobs copy.
* ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: whether vLLM estimates CUDA-graph memory
  during the profile and takes it out of the KV cache (``vllm/envs.py``: "Enabled by default
  as of v0.21.0"; ``gpu_worker.py`` ``determine_available_memory``). Off (or vLLM < 0.21),
  graphs are captured after the KV cache, in memory outside the budget.

Both are parsed as vLLM parses them: ``bool(int(value))``.

* ``VLLM_CPU_KVCACHE_SPACE`` (vLLM's CPU build only; a GPU ignores it): the KV cache in GiB.
  ``vllm/platforms/cpu.py`` (``check_and_update_config``, "Legacy setting") sets
  ``kv_cache_memory_bytes = int(value) * GiB`` when the variable is set and not empty, so it
  overrides ``--kv-cache-memory-bytes``; parsed as vLLM parses it, ``int(value)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from autotune.errors import UserError

MODEL_RUNNER_VAR = "VLLM_USE_V2_MODEL_RUNNER"
CUDAGRAPH_ESTIMATE_VAR = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
CPU_KVCACHE_SPACE_VAR = "VLLM_CPU_KVCACHE_SPACE"
# The variables a study's fingerprint counts (autotune/space/loader.py): each changes what vLLM
# does with the same flags (the model runner, the CUDA-graph estimate, the CPU build's KV size).
VARS = (MODEL_RUNNER_VAR, CUDAGRAPH_ESTIMATE_VAR, CPU_KVCACHE_SPACE_VAR)
# The variables fingerprints counted before VLLM_CPU_KVCACHE_SPACE did: a study recorded with
# such a fingerprint is still resumed (opening.py), and its fingerprint upgraded then.
LEGACY_VARS = (MODEL_RUNNER_VAR, CUDAGRAPH_ESTIMATE_VAR)


@dataclass(frozen=True)
class VllmEnv:
    """What the deployment's environment tells vLLM to do (defaults: vLLM 0.32.0's)."""

    model_runner: Literal["v1", "v2"] = "v2"
    estimate_cudagraphs: bool = True
    cpu_kvcache_space_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE (CPU build only); None: unset or empty

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None) -> VllmEnv:
        """Read the variables from ``env`` (a space's ``engine.env``); others are ignored."""
        env = env or {}
        v2 = _flag(env, MODEL_RUNNER_VAR, True)
        return cls("v2" if v2 else "v1", _flag(env, CUDAGRAPH_ESTIMATE_VAR, True), _kvcache_space(env))


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        return bool(int(str(raw).strip()))
    except ValueError:
        raise UserError(f"engine.env.{name}: {raw!r} is not an integer; vLLM reads it as bool(int(value)): "
                        "use 0 or 1") from None


def _kvcache_space(env: Mapping[str, str]) -> int | None:
    raw = env.get(CPU_KVCACHE_SPACE_VAR)
    if raw is None or str(raw) == "":
        return None
    try:
        return int(str(raw))
    except ValueError:
        raise UserError(f"engine.env.{CPU_KVCACHE_SPACE_VAR}: {raw!r} is not an integer; vLLM's CPU build reads it "
                        "as int(value) GiB of KV cache") from None
