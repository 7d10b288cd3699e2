"""The `sim` backend: trials on the embedded vLLM simulator (autotune.sim), no GPU needed."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import TrialRequest
from autotune.results import TrialResult
from autotune.sim.trial import simulate_trial


class SimBackend:
    """Runs each trial in-process on the simulator. Results are simulated, never measured."""

    name = "sim"

    def __init__(self, **_: Any) -> None:
        # Nothing to hold between trials; options are accepted for interface symmetry.
        pass

    def run_trial(self, request: TrialRequest) -> TrialResult:
        return simulate_trial(
            request.server.model,
            request.server.gpu,
            request.flags,
            request.workload,
            seed=request.seed,
            early_stop=request.early_stop,
        )

    def close(self) -> None:
        pass
