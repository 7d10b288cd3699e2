"""Backend implementations by name, imported lazily so the simulator never pulls in aiohttp or NVML.

The names and what each backend is (simulated or not) are declared once, in
``autotune.backend_kinds``; this maps each of them to its class
(``tests/architecture/test_registries.py`` checks that both have the same names).
"""

from __future__ import annotations

import importlib
from typing import Any

from autotune.backend_kinds import backend_choices
from autotune.errors import UserError

BACKENDS: dict[str, str] = {
    "sim": "autotune.backends.sim:SimBackend",
    "vllm": "autotune.backends.vllm:VllmBackend",
    "noop": "autotune.backends.noop:NoopBackend",
}


def get_backend(name: str, **kwargs: Any) -> Any:
    if name not in BACKENDS:
        raise UserError(f"unknown backend {name!r}: use {backend_choices()}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)
