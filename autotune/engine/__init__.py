"""vLLM engine flags, declared once: names, types, defaults per device, CLI form, simulator support.

Independent of any backend; see :mod:`autotune.engine.config` for the declarations.
"""

from autotune.engine.config import (
    FLAG_SPECS,
    CacheConfig,
    CompilationConfig,
    EngineConfig,
    LoadConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
)
from autotune.engine.defaults import device_class, resolve_defaults
from autotune.engine.flags import flags_to_cli_args, is_unmodelled, unknown_flags, unmodelled_flags
from autotune.engine.spec import DeviceClass, FlagSpec, FromModel, PerDevice, Sim

__all__ = [
    "FLAG_SPECS",
    "CacheConfig",
    "CompilationConfig",
    "DeviceClass",
    "EngineConfig",
    "FlagSpec",
    "FromModel",
    "LoadConfig",
    "ModelConfig",
    "ParallelConfig",
    "PerDevice",
    "SchedulerConfig",
    "Sim",
    "device_class",
    "flags_to_cli_args",
    "is_unmodelled",
    "resolve_defaults",
    "unknown_flags",
    "unmodelled_flags",
]
