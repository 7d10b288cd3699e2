"""Engine configuration split by concern, mirroring vLLM's config dataclasses.

A flat ``flags`` dict (vLLM names) is what the search samples and what `vllm serve`
takes; these dataclasses are the typed view the simulator and memory model reason on.
Build one with :func:`EngineConfig.from_flags` after :func:`resolve_defaults`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    model: str
    max_model_len: int
    dtype: str = "auto"
    quantization: str | None = None


@dataclass(frozen=True)
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    disable_custom_all_reduce: bool = False


@dataclass(frozen=True)
class CacheConfig:
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None
    block_size: int = 16
    enable_prefix_caching: bool = True
    kv_cache_dtype: str = "auto"
    cpu_offload_gb: float = 0.0
    num_gpu_blocks_override: int | None = None


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    scheduling_policy: str = "fcfs"


@dataclass(frozen=True)
class CompilationConfig:
    enforce_eager: bool = False
    max_cudagraph_capture_size: int | None = None


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig
    parallel: ParallelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    compilation: CompilationConfig

    @classmethod
    def from_flags(cls, model: str, flags: Mapping[str, Any]) -> EngineConfig:
        """Typed view of resolved flags; unknown keys for a concern are ignored there."""

        def pick(dc: type, **fixed: Any) -> Any:
            names = dc.__dataclass_fields__.keys()
            kw = {k: flags[k] for k in names if k in flags and flags[k] is not None}
            kw.update(fixed)
            return dc(**kw)

        if "max_model_len" not in flags or flags["max_model_len"] is None:
            raise ValueError("max_model_len must be resolved before building an EngineConfig")
        return cls(
            model=pick(ModelConfig, model=model),
            parallel=pick(ParallelConfig),
            cache=pick(CacheConfig),
            scheduler=pick(SchedulerConfig),
            compilation=pick(CompilationConfig),
        )

    def to_flags(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in (self.model, self.parallel, self.cache, self.scheduler, self.compilation):
            out.update(asdict(part))
        out.pop("model")
        return out
