"""How a vLLM flag is declared: one :func:`flag` field in a config dataclass says it all.

The config dataclasses in :mod:`autotune.engine.config` are the declaration, as in vLLM
(whose ``EngineArgs`` derives its CLI from ``vllm/config/*.py``). A field's name is the
EngineArgs name, its annotation the type, and :func:`flag` adds vLLM's default (a value,
one per device class, or "from the model"), the help text, the allowed choices and whether
the simulator models the flag. :class:`FlagSpec` is the resulting record; defaults, the CLI
form, the space schema's checks and ``simulate --set`` parsing are all read from it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

FlagType = type[bool] | type[int] | type[float] | type[str]


class Sim(enum.Enum):
    """What the simulator does with a flag."""

    MODELLED = "modelled"  # moves simulated memory or speed the way vLLM's does
    NO_EFFECT = "no effect"  # no effect on serving speed or memory (names, paths, seeds)
    UNMODELLED = "unmodelled"  # matters on a real GPU, but the simulator ignores it


class DeviceClass(enum.Enum):
    """The device classes vLLM picks batch and block defaults by (vLLM 0.32.0:
    ``EngineArgs.get_batch_defaults``, ``CacheConfig.DEFAULT_BLOCK_SIZE``, ``CpuPlatform``)."""

    GPU = "gpu"  # under 70 GiB, any A100, or a device vLLM cannot query
    GPU_70GB = "gpu>=70GiB"  # at least 70 GiB and not an A100 (H100, H200)
    GPU_160GB = "gpu>=160GiB"  # at least 160 GiB (B200, B300)
    CPU = "cpu"  # vLLM's CPU build


@dataclass(frozen=True)
class PerDevice:
    """A default vLLM picks from the device it runs on.

    ``cpu_per_rank``: on CPU vLLM multiplies the value by the world size (TP x PP).
    """

    gpu: int
    gpu_70gb: int
    gpu_160gb: int
    cpu: int
    cpu_per_rank: bool = False

    def value(self, device: DeviceClass, world_size: int) -> int:
        if device is DeviceClass.CPU:
            return self.cpu * world_size if self.cpu_per_rank else self.cpu
        return {DeviceClass.GPU: self.gpu, DeviceClass.GPU_70GB: self.gpu_70gb,
                DeviceClass.GPU_160GB: self.gpu_160gb}[device]


@dataclass(frozen=True)
class FromModel:
    """A default vLLM reads from the model's config.json (the caller resolves it)."""

    source: str


@dataclass(frozen=True)
class FlagSpec:
    """One `vllm serve` flag: everything autotune knows about it."""

    name: str
    type: FlagType
    help: str
    default: Any  # a value (None: vLLM derives it at startup), PerDevice or FromModel
    sim: Sim
    group: str  # the config dataclass that declares it
    choices: tuple[Any, ...] | None = None

    @property
    def cli(self) -> str:
        return cli_option(self.name)

    @property
    def default_is_static(self) -> bool:
        """Whether the default is one value on every device and model."""
        return not isinstance(self.default, PerDevice | FromModel)

    def is_default(self, value: Any) -> bool:
        """Whether ``value`` is what vLLM uses anyway (None: left unset)."""
        return value is None or (self.default_is_static and value == self.default)

    def check(self, value: Any) -> Any:
        """``value`` if vLLM takes it for this flag; ValueError naming the flag otherwise."""
        if not _has_type(value, self.type):
            raise ValueError(f"{self.name} takes a {self.type.__name__}, not {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, not {value!r}")
        return value

    def parse(self, raw: str) -> Any:
        """A command-line string as this flag's value; ``none``/``default`` mean unset (None)."""
        raw = raw.strip()
        if raw.lower() in ("none", "null", "default"):
            return None
        try:
            value = _parse_as(self.type, raw)
        except ValueError:
            raise ValueError(f"{self.name} takes a {self.type.__name__}, not {raw!r}") from None
        return self.check(value)


def cli_option(name: str) -> str:
    """vLLM's option for an EngineArgs name: dashes for underscores."""
    return "--" + name.replace("_", "-")


def flag(default: Any, help: str, *, sim: Sim, choices: tuple[Any, ...] | None = None) -> Any:
    """A config dataclass field that is a `vllm serve` flag.

    A per-device or from-the-model default cannot be a dataclass default: such a field is
    required, because a config is only built from flags already resolved to vLLM's values.
    """
    meta = {"flag": (default, help, sim, choices)}
    if isinstance(default, PerDevice | FromModel):
        return field(metadata=meta)
    return field(default=default, metadata=meta)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _has_type(value: Any, typ: FlagType) -> bool:
    if typ is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False  # YAML's true is not a number
    if typ is float:
        return isinstance(value, int | float)
    return isinstance(value, typ)


def _parse_as(typ: FlagType, raw: str) -> Any:
    if typ is bool:
        low = raw.lower()
        if low not in _TRUE | _FALSE:
            raise ValueError(raw)
        return low in _TRUE
    return typ(raw)
