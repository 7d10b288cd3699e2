"""One resolved deployment: model architecture, device (a GPU or a CPU host), and every flag at vLLM's value.

Both the startup memory model (``predict_startup``) and the runtime simulation start from
:func:`resolve_deployment`, so the two can never resolve a flag differently. Everything
downstream reads the typed :class:`~autotune.engine.EngineConfig`, never a raw flag dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.deploy.hardware import GpuSpec, get_device
from autotune.deploy.model import ModelArch, resolve_model, weight_precision
from autotune.deploy.vllm_env import VllmEnv
from autotune.engine import EngineConfig, resolve_defaults
from autotune.errors import UserError

# KV cache bytes per element; "auto" takes the model's activation dtype (16-bit even for
# int4/fp8 weights).
_KV_DTYPE_BYTES = {"auto": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


@dataclass(frozen=True)
class Deployment:
    arch: ModelArch
    gpu: GpuSpec
    config: EngineConfig  # every flag resolved
    precision: str  # weight precision of the linear layers
    kv_dtype_bytes: float
    env: VllmEnv = VllmEnv()  # what vLLM's environment variables make it do

    @property
    def gpus(self) -> int:
        """GPUs one engine holds (tensor x pipeline parallel size)."""
        return self.tp * self.config.parallel.pipeline_parallel_size

    @property
    def tp(self) -> int:
        return self.config.parallel.tensor_parallel_size

    @property
    def block_size(self) -> int:
        return self.config.cache.block_size

    @property
    def max_model_len(self) -> int:
        return self.config.model.max_model_len

    @property
    def kv_bytes_per_token(self) -> int:
        return self.arch.kv_bytes_per_token(self.tp, self.kv_dtype_bytes)

    @property
    def cuda_graphs(self) -> bool:
        """Whether vLLM captures CUDA graphs. Never on a CPU host: vLLM's CPU platform empties
        ``cudagraph_capture_sizes`` whatever ``enforce_eager`` says (``platforms/cpu.py``)."""
        return not self.config.compilation.enforce_eager and not self.gpu.is_cpu

    @property
    def compiles(self) -> bool:
        """Whether vLLM compiles the model at startup: torch.compile with CUDA graphs on a GPU,
        inductor (``DYNAMO_TRACE_ONCE``) on a CPU host; ``enforce_eager`` switches it off on both."""
        return not self.config.compilation.enforce_eager


def resolve_deployment(model: str, gpu: str, flags: Mapping[str, Any],
                       env: Mapping[str, str] | None = None) -> Deployment:
    """Resolve ``flags`` with vLLM's defaults for ``gpu`` (a GPU, or ``cpu``: a CPU host running
    vLLM's CPU build), and the vLLM variables of ``env`` (:mod:`autotune.deploy.vllm_env`);
    unknown model/GPU or a bad variable raise UserError."""
    arch = resolve_model(model)
    spec = get_device(gpu)
    given = dict(flags)
    if given.get("max_model_len") is None:
        given["max_model_len"] = arch.max_position_embeddings
    try:
        config = EngineConfig.from_flags(model, resolve_defaults(given, spec.name, spec.mem_total_gib))
    except (TypeError, ValueError) as e:
        raise UserError(f"flags do not form an engine config: {e}") from None
    kv_dtype = config.cache.kv_cache_dtype
    if kv_dtype not in _KV_DTYPE_BYTES:
        raise UserError(f"kv_cache_dtype {kv_dtype!r} is not one vLLM takes: use {', '.join(_KV_DTYPE_BYTES)}")
    precision = weight_precision(arch, config.model.quantization, config.model.dtype)
    return Deployment(arch, spec, config, precision, _KV_DTYPE_BYTES[kv_dtype], VllmEnv.from_env(env))
