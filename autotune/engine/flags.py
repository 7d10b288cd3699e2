"""The `vllm serve` flags autotune knows, under vLLM's own names.

Names are the EngineArgs field names (underscores); the CLI form swaps them for dashes.
Booleans follow vLLM's ``argparse.BooleanOptionalAction``: ``--enforce-eager`` or
``--no-enforce-eager``. Flags the server wrapper owns (host, port, model) are not tunable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FlagType = type[bool] | type[int] | type[float] | type[str]


@dataclass(frozen=True)
class FlagSpec:
    name: str
    type: FlagType
    help: str
    choices: tuple[Any, ...] | None = None

    @property
    def cli(self) -> str:
        return "--" + self.name.replace("_", "-")


def _spec(name: str, typ: FlagType, help: str, choices: tuple[Any, ...] | None = None) -> FlagSpec:
    return FlagSpec(name, typ, help, choices)


FLAG_SPECS: dict[str, FlagSpec] = {
    s.name: s
    for s in [
        # ParallelConfig
        _spec("tensor_parallel_size", int, "GPUs one model is sharded over"),
        _spec("pipeline_parallel_size", int, "pipeline stages"),
        _spec("disable_custom_all_reduce", bool, "use NCCL instead of vLLM's custom all-reduce"),
        _spec("distributed_executor_backend", str, "mp or ray", ("mp", "ray", "uni", "external_launcher")),
        # CacheConfig
        _spec("gpu_memory_utilization", float, "fraction of each GPU's memory vLLM may use"),
        _spec("kv_cache_memory_bytes", int, "KV cache size per GPU in bytes; overrides gpu_memory_utilization"),
        _spec("block_size", int, "tokens per paged KV block", (1, 8, 16, 32, 64, 128)),
        _spec("enable_prefix_caching", bool, "reuse KV blocks of shared prompt prefixes"),
        _spec("kv_cache_dtype", str, "KV cache precision", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
        _spec("cpu_offload_gb", float, "GiB of weights offloaded to CPU memory per GPU"),
        _spec("num_gpu_blocks_override", int, "force the number of KV blocks (testing)"),
        # SchedulerConfig
        _spec("max_num_seqs", int, "most sequences in one engine step"),
        _spec("max_num_batched_tokens", int, "token budget of one engine step"),
        _spec("enable_chunked_prefill", bool, "split long prefills across steps"),
        _spec("long_prefill_token_threshold", int, "prefills longer than this are chunked first"),
        _spec("max_num_partial_prefills", int, "concurrent partial prefills"),
        _spec("scheduling_policy", str, "fcfs or priority", ("fcfs", "priority")),
        _spec("async_scheduling", bool, "overlap scheduling with model execution"),
        # ModelConfig
        _spec("max_model_len", int, "context length (prompt + output)"),
        _spec("dtype", str, "weight/activation dtype", ("auto", "half", "float16", "bfloat16", "float", "float32")),
        _spec("quantization", str, "weight quantization method (awq, gptq, fp8, ...)"),
        _spec("tokenizer", str, "tokenizer name or path"),
        _spec("served_model_name", str, "name the API serves the model under"),
        _spec("trust_remote_code", bool, "allow custom model code from the hub"),
        _spec("seed", int, "random seed"),
        _spec("max_logprobs", int, "most logprobs a request may ask for"),
        # LoadConfig
        _spec("load_format", str, "weight loading format (auto, safetensors, dummy, ...)"),
        _spec("download_dir", str, "where weights are downloaded"),
        # CompilationConfig
        _spec("enforce_eager", bool, "disable CUDA graphs: always run the model eagerly"),
        _spec("max_cudagraph_capture_size", int, "largest batch size captured as a CUDA graph"),
    ]
}


def unknown_flags(names: Iterable[str]) -> list[str]:
    """Names that are not vLLM serve flags autotune knows (typos, V0-only flags)."""
    return [n for n in names if n not in FLAG_SPECS]


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def flags_to_cli_args(flags: Mapping[str, Any]) -> list[str]:
    """`vllm serve` arguments for ``flags``, as an argument list (never a shell string).

    ``None`` means "leave vLLM's default" and emits nothing. Values are passed verbatim, so
    a value with shell metacharacters reaches vLLM as one argument, unchanged.
    """
    args: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        spec = FLAG_SPECS.get(name)
        cli = spec.cli if spec else "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(cli if value else "--no-" + cli[2:])
        else:
            args.extend([cli, format_value(value)])
    return args
