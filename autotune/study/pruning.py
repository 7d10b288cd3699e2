"""Known-constraint pruning: predict startup failure from memory accounting, launch nothing.

The prediction is the simulator's own startup accounting (weights, activations, CUDA
graphs, KV cache vs max_model_len) evaluated on the model's config.json and the GPU's
datasheet memory, so it costs microseconds instead of a multi-minute server start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from autotune.engine import resolve_defaults
from autotune.space import SearchSpace
from autotune.study.hardware import gpu_memory_gib

log = logging.getLogger(__name__)


@dataclass
class StartupPredictor:
    model: str
    gpu: str
    gpu_mem_gib: float

    @classmethod
    def for_space(cls, space: SearchSpace) -> StartupPredictor | None:
        """A predictor when the memory model knows this model and GPU; else None (no pruning)."""
        try:
            from autotune.sim import known_gpus, resolve_model
        except ImportError:
            return None
        try:
            resolve_model(space.engine.model)
        except Exception:
            log.info("no memory model for %s: startup pruning off", space.engine.model)
            return None
        if space.engine.gpu not in known_gpus():
            return None
        return cls(space.engine.model, space.engine.gpu, gpu_memory_gib(space.engine.gpu))

    def failure(self, flags: dict[str, Any]) -> str:
        """The predicted startup failure reason, or '' when the config should start."""
        from autotune.sim import predict_startup

        resolved = resolve_defaults(flags, self.gpu, self.gpu_mem_gib)
        pred = predict_startup(self.model, self.gpu, resolved)
        return "" if pred.ok else f"predicted startup failure: {pred.failure_reason}"
