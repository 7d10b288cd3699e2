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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from autotune.errors import UserError

MODEL_RUNNER_VAR = "VLLM_USE_V2_MODEL_RUNNER"
CUDAGRAPH_ESTIMATE_VAR = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"
VARS = (MODEL_RUNNER_VAR, CUDAGRAPH_ESTIMATE_VAR)


@dataclass(frozen=True)
class VllmEnv:
    """What the deployment's environment tells vLLM to do (defaults: vLLM 0.32.0's)."""

    model_runner: Literal["v1", "v2"] = "v2"
    estimate_cudagraphs: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None) -> VllmEnv:
        """Read the variables from ``env`` (a space's ``engine.env``); others are ignored."""
        env = env or {}
        v2 = _flag(env, MODEL_RUNNER_VAR, True)
        return cls("v2" if v2 else "v1", _flag(env, CUDAGRAPH_ESTIMATE_VAR, True))


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        return bool(int(str(raw).strip()))
    except ValueError:
        raise UserError(f"engine.env.{name}: {raw!r} is not an integer; vLLM reads it as bool(int(value)): "
                        "use 0 or 1") from None
