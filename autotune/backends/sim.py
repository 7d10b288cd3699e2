"""The `sim` backend: trials on the embedded vLLM simulator (autotune.sim), no GPU needed."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import EventHook, TrialRequest
from autotune.deploy import NOMINAL, SimProfile
from autotune.results import TrialResult
from autotune.sim.quirks import NONE, Quirks
from autotune.sim.trial import simulate_trial


class SimBackend:
    """Runs each trial in-process on the simulator. Results are simulated, never measured.

    The server's ``env`` reaches the simulator as it would reach vLLM (the vLLM variables that
    change memory behaviour are read from it). ``profile`` holds the simulator's constants
    (a space's ``engine.sim_profile``; nominal by default).

    A simulated trial takes about a second, so its only event is ``simulating``; the
    simulated server's startup and benchmark are not replayed as progress.
    """

    name = "sim"

    def __init__(self, profile: SimProfile = NOMINAL, events: EventHook | None = None, quirks: Quirks = NONE,
                 **_: Any) -> None:
        # Other options are accepted for interface symmetry with the other backends.
        # ``quirks``: a benchmark truth's structural departures (autotune.sim.quirks).
        self.profile = profile
        self.quirks = quirks
        self.events = events

    def run_trial(self, request: TrialRequest) -> TrialResult:
        server = request.server
        if self.events is not None:
            self.events("simulating", {})
        return simulate_trial(
            server.model,
            server.gpu,
            request.flags,
            request.workload,
            seed=request.seed,
            early_stop=request.early_stop,
            env=server.env,
            profile=self.profile,
            quirks=self.quirks,
        )

    def close(self) -> None:
        pass
