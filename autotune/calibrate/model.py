"""autotune's model of one deployment: the simulator run with a profile, noise off.

A prediction is the expected measurement, so the simulator runs without its run-to-run
noise (only the OOM hazard still draws, from the trial's number). It can run a shorter
benchmark than the study's: the first ``requests`` requests of the same trace, scaled by a
*control variate*, the ratio of the full to the short benchmark under a reference profile.
That ratio depends on the trace (which requests are in the tail) far more than on the
constants, so a fit can simulate 300 requests where the study measured 1000
(docs/calibration.md gives the accuracy measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.deploy import SimProfile
from autotune.results import TrialStatus
from autotune.sim import simulate_trial
from autotune.space import SearchSpace


def simulate(space: SearchSpace, flags: Mapping[str, Any], profile: SimProfile, requests: int | None = None,
             seed: int = 0) -> dict[str, float]:
    """The metrics a noise-free simulated trial of ``flags`` reports ({} if it cannot start)."""
    wl = space.workload
    if requests is not None and requests < wl.num_requests:
        wl = wl.model_copy(update={"num_requests": requests})
    e = space.engine
    result = simulate_trial(e.model, e.gpu, flags, wl, seed=seed, env=e.env, profile=profile.without_noise())
    if result.status == TrialStatus.STARTUP_FAILED:
        return {}
    m = result.metrics()
    return m if m["requests_ok"] > 0 else {}


class ShortBenchmark:
    """Predictions of one config's full benchmark from short ones (the control variate)."""

    def __init__(self, space: SearchSpace, flags: Mapping[str, Any], reference: SimProfile, requests: int,
                 seed: int, metrics: tuple[str, ...]) -> None:
        self.space, self.flags, self.requests, self.seed = space, dict(flags), requests, seed
        full = simulate(space, flags, reference, None, seed)
        short = simulate(space, flags, reference, requests, seed) if requests < space.workload.num_requests else full
        self.ratio = {k: full[k] / short[k] for k in metrics if _usable(full.get(k)) and _usable(short.get(k))}

    def predict(self, profile: SimProfile) -> dict[str, float]:
        m = simulate(self.space, self.flags, profile, self.requests, self.seed)
        return {k: m[k] * r for k, r in self.ratio.items() if _usable(m.get(k))}


def _usable(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0
