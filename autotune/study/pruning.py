"""Known-constraint pruning: predict startup failure from memory accounting, launch nothing.

The prediction is the memory model of :mod:`autotune.deploy` (weights, activations, CUDA
graphs, KV cache vs max_model_len), the same accounting the simulator starts from,
evaluated on the model's config.json and the GPU's datasheet memory, so it costs
microseconds instead of a multi-minute server start.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from autotune.deploy import get_gpu, predict_startup, resolve_model
from autotune.engine import unmodelled_flags
from autotune.errors import UserError
from autotune.space import SearchSpace

log = logging.getLogger(__name__)


@dataclass
class StartupPredictor:
    model: str
    gpu: str

    @classmethod
    def for_space(cls, space: SearchSpace) -> StartupPredictor | None:
        """A predictor when the memory model knows this model and GPU; else None (no pruning)."""
        try:
            resolve_model(space.engine.model)
            get_gpu(space.engine.gpu)
        except UserError as e:
            log.info("startup pruning off, no memory model: %s", e)
            return None
        return cls(space.engine.model, space.engine.gpu)

    def failure(self, flags: dict[str, Any]) -> str:
        """The predicted startup failure reason, or '' when the config should start (or when a
        flag the memory model does not model is set: pruning is an optimisation, a wrong
        prediction would lose a config that can start, e.g. one with cpu_offload_gb)."""
        if unmodelled_flags(flags):
            return ""
        pred = predict_startup(self.model, self.gpu, flags)
        return "" if pred.ok else f"predicted startup failure: {pred.failure_reason}"
