"""Backends by name, imported lazily so the simulator never pulls in aiohttp or NVML."""

from __future__ import annotations

import importlib
from typing import Any

from autotune.errors import UserError

BACKENDS: dict[str, str] = {
    "sim": "autotune.backends.sim:SimBackend",
    "vllm": "autotune.backends.vllm:VllmBackend",
    "noop": "autotune.backends.noop:NoopBackend",
}


def get_backend(name: str, **kwargs: Any) -> Any:
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}: use one of {', '.join(sorted(BACKENDS))}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)
