"""Trial backends: one interface, two implementations (the simulator and real vLLM)."""

from autotune.backends.base import Backend, EarlyStopRule, ServerSpec, TrialRequest
from autotune.backends.registry import BACKENDS, get_backend

__all__ = ["BACKENDS", "Backend", "EarlyStopRule", "ServerSpec", "TrialRequest", "get_backend"]
