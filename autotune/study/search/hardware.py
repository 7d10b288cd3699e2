"""GPU facts the driver needs without depending on a backend: memory for vLLM's defaults.

The GPU table and the rule for GPUs it does not know live in :mod:`autotune.deploy`;
this name stays for the study code and experiments that import it from here.
"""

from __future__ import annotations

from autotune.deploy import gpu_memory_gib

__all__ = ["gpu_memory_gib"]
