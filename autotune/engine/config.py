"""The `vllm serve` flags autotune knows, declared once, split by concern like vLLM's configs.

Each field is one flag (:func:`~autotune.engine.spec.flag`): its name is vLLM's EngineArgs
name, its annotation the type, and its default vLLM 0.32.0's (``vllm/config/*.py``,
``EngineArgs``). :data:`FLAG_SPECS` is derived from these dataclasses, and a flat ``flags``
dict (what the search samples and `vllm serve` takes) becomes the typed view the simulator
and the memory model read with :meth:`EngineConfig.from_flags`, after
:func:`~autotune.engine.defaults.resolve_defaults`.

Flags the server wrapper owns (host, port, model) are not flags here.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from autotune.engine.spec import FlagSpec, FlagType, FromModel, PerDevice, Sim, flag

M, N, U = Sim.MODELLED, Sim.NO_EFFECT, Sim.UNMODELLED

BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    model: str  # the wrapper's positional argument, not a flag
    max_model_len: int = flag(FromModel("max_position_embeddings in the model's config.json"),
                              "context length (prompt + output)", sim=M)
    dtype: str = flag("auto", "weight/activation dtype", sim=M, choices=DTYPES)
    quantization: str | None = flag(None, "weight quantization method (awq, gptq, fp8, ...); None: the checkpoint's",
                                    sim=M)
    tokenizer: str | None = flag(None, "tokenizer name or path; None: the model's", sim=N)
    served_model_name: str | None = flag(None, "name the API serves the model under", sim=N)
    trust_remote_code: bool = flag(False, "allow custom model code from the hub", sim=N)
    seed: int = flag(0, "random seed of sampling", sim=N)
    max_logprobs: int = flag(20, "most logprobs a request may ask for", sim=N)


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    tensor_parallel_size: int = flag(1, "GPUs one model is sharded over", sim=M)
    pipeline_parallel_size: int = flag(1, "pipeline stages", sim=U)
    disable_custom_all_reduce: bool = flag(False, "use NCCL instead of vLLM's custom all-reduce", sim=M)
    distributed_executor_backend: str | None = flag(None, "mp, ray, uni or external_launcher; None: vLLM picks",
                                                    sim=U, choices=("mp", "ray", "uni", "external_launcher"))


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    gpu_memory_utilization: float = flag(0.92, "fraction of each GPU's memory vLLM may use", sim=M)
    kv_cache_memory_bytes: int | None = flag(None, "KV cache size per GPU in bytes; overrides gpu_memory_utilization",
                                             sim=M)
    # CacheConfig.DEFAULT_BLOCK_SIZE on GPUs; CpuPlatform sets 128 when the user gives none.
    block_size: int = flag(PerDevice(gpu=16, gpu_70gb=16, gpu_160gb=16, cpu=128), "tokens per paged KV block",
                           sim=M, choices=BLOCK_SIZES)
    enable_prefix_caching: bool = flag(True, "reuse KV blocks of shared prompt prefixes", sim=M)
    kv_cache_dtype: str = flag("auto", "KV cache precision; auto: the model's dtype", sim=M, choices=KV_CACHE_DTYPES)
    cpu_offload_gb: float = flag(0.0, "GiB of weights offloaded to CPU memory per GPU", sim=U)
    num_gpu_blocks_override: int | None = flag(None, "force the number of KV blocks (testing)", sim=U)


@dataclass(frozen=True, kw_only=True)
class SchedulerConfig:
    # EngineArgs.get_batch_defaults for the OpenAI server: 16384/1024 from 160 GiB, 8192/1024
    # from 70 GiB unless an A100 (PR #17885), else 2048/256; on CPU 2048/128 per rank.
    max_num_seqs: int = flag(PerDevice(gpu=256, gpu_70gb=1024, gpu_160gb=1024, cpu=128, cpu_per_rank=True),
                             "most sequences in one engine step", sim=M)
    max_num_batched_tokens: int = flag(
        PerDevice(gpu=2048, gpu_70gb=8192, gpu_160gb=16384, cpu=2048, cpu_per_rank=True),
        "token budget of one engine step", sim=M)
    enable_chunked_prefill: bool = flag(True, "split long prefills across steps", sim=M)
    long_prefill_token_threshold: int = flag(0, "prefills longer than this are chunked first", sim=U)
    scheduling_policy: str = flag("fcfs", "fcfs or priority", sim=U, choices=("fcfs", "priority"))
    async_scheduling: bool | None = flag(None, "overlap scheduling with model execution; None: vLLM decides", sim=U)


@dataclass(frozen=True, kw_only=True)
class CompilationConfig:
    enforce_eager: bool = flag(False, "disable CUDA graphs: always run the model eagerly", sim=M)
    max_cudagraph_capture_size: int | None = flag(
        None, "largest batch size captured as a CUDA graph; None: min(2 x max_num_seqs, 512)", sim=M)


@dataclass(frozen=True, kw_only=True)
class LoadConfig:
    # `dummy` skips reading weights: startup time, which the simulator does not model so.
    load_format: str = flag("auto", "weight loading format (auto, safetensors, dummy, ...)", sim=U)
    download_dir: str | None = flag(None, "where weights are downloaded", sim=N)


@dataclass(frozen=True)
class EngineConfig:
    model: ModelConfig
    parallel: ParallelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    compilation: CompilationConfig
    load: LoadConfig

    @classmethod
    def from_flags(cls, model: str, flags: Mapping[str, Any]) -> EngineConfig:
        """Typed view of resolved flags (every per-device and model default filled in).

        Raises TypeError when a default that needs the device or model was not resolved.
        """

        def pick(dc: type, **fixed: Any) -> Any:
            kw = {f.name: flags[f.name] for f in fields(dc) if "flag" in f.metadata and flags.get(f.name) is not None}
            return dc(**kw, **fixed)

        return cls(
            model=pick(ModelConfig, model=model),
            parallel=pick(ParallelConfig),
            cache=pick(CacheConfig),
            scheduler=pick(SchedulerConfig),
            compilation=pick(CompilationConfig),
            load=pick(LoadConfig),
        )


def _flag_type(annotation: Any) -> FlagType:
    """``int | None`` -> int: None always means "vLLM's default"."""
    if isinstance(annotation, types.UnionType):
        (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def _specs(*parts: type) -> dict[str, FlagSpec]:
    out: dict[str, FlagSpec] = {}
    for part in parts:
        hints = typing.get_type_hints(part)
        for f in fields(part):
            if "flag" not in f.metadata:
                continue
            default, help_, sim, choices = f.metadata["flag"]
            out[f.name] = FlagSpec(f.name, _flag_type(hints[f.name]), help_, default, sim, part.__name__, choices)
    return out


FLAG_SPECS: dict[str, FlagSpec] = _specs(
    ParallelConfig, CacheConfig, SchedulerConfig, ModelConfig, LoadConfig, CompilationConfig
)


def world_size(flags: Mapping[str, Any]) -> int:
    """GPUs one engine holds: tensor x pipeline parallel size (vLLM's defaults: 1 each).
    The one rule for a worker's GPU count, goodput per GPU and a pod's GPU request."""
    return int(flags.get("tensor_parallel_size") or 1) * int(flags.get("pipeline_parallel_size") or 1)
