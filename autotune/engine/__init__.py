"""vLLM engine flags: names, types, defaults and their CLI form, independent of any backend."""

from autotune.engine.config import (
    CacheConfig,
    CompilationConfig,
    EngineConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
)
from autotune.engine.defaults import resolve_defaults
from autotune.engine.flags import FLAG_SPECS, FlagSpec, flags_to_cli_args, unknown_flags

__all__ = [
    "FLAG_SPECS",
    "CacheConfig",
    "CompilationConfig",
    "EngineConfig",
    "FlagSpec",
    "ModelConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "flags_to_cli_args",
    "resolve_defaults",
    "unknown_flags",
]
