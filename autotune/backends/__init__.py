"""Trial backends: one interface, two implementations (the simulator and real vLLM)."""

from autotune.backends.base import Backend, ServerSpec, TrialRequest
from autotune.backends.registry import BACKENDS, get_backend

__all__ = ["BACKENDS", "Backend", "ServerSpec", "TrialRequest", "get_backend"]
