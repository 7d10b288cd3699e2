"""The fixed benchmark's load generator: streaming /v1/completions with token-ID prompts.

It knows nothing about servers or restarts: it runs one *phase* against one live engine
and stops when the engine dies, hangs, an early-stop rule fires or the requests run out.
The backend decides what a death means (OOM or crash) and whether to restart.
"""

from autotune.loadgen.client import RequestOutcome, send_completion
from autotune.loadgen.runner import (
    EngineWatch,
    LoadGenerator,
    PhaseEnd,
    PhaseResult,
)

__all__ = [
    "EngineWatch",
    "LoadGenerator",
    "PhaseEnd",
    "PhaseResult",
    "RequestOutcome",
    "send_completion",
]
