"""The real vLLM backend (registry name ``vllm``): servers, failure taxonomy, /metrics, weights."""

from autotune.backends.vllm.backend import VllmBackend
from autotune.backends.vllm.classify import Classification, classify_death, classify_startup
from autotune.backends.vllm.server import ServerProcess, build_command
from autotune.backends.vllm.weights import prefetch_weights

__all__ = [
    "Classification",
    "ServerProcess",
    "VllmBackend",
    "build_command",
    "classify_death",
    "classify_startup",
    "prefetch_weights",
]
