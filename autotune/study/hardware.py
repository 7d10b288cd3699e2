"""GPU facts the driver needs without depending on a backend: memory for vLLM's defaults."""

from __future__ import annotations


def gpu_memory_gib(gpu: str) -> float:
    """Memory of a GPU named in the space, from the simulator's datasheet table.

    vLLM's scheduler defaults depend on it (>= 70 GiB and not an A100: larger defaults).
    Unknown names fall back to 80 GiB, the size of the cards autotune targets.
    """
    try:
        from autotune.sim import get_gpu

        return float(get_gpu(gpu).memory_gib)
    except Exception:
        return 80.0
