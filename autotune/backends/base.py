"""The backend interface: run one trial (start an engine, run the fixed benchmark).

Backends know nothing of Optuna, Ray or MLflow. They receive plain data and return a
:class:`~autotune.results.TrialResult`; the study driver decides what it means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from autotune.workload import WorkloadSpec


@dataclass(frozen=True)
class ServerSpec:
    """How the engine is deployed, beyond the tunable flags."""

    model: str
    gpu: str = "A100-80GB"  # the simulator's GPU; the vllm backend reads the real one via NVML
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    download_dir: str | None = None
    startup_timeout_s: float = 1800.0
    # Extra `vllm serve` arguments appended verbatim (argument list, never a shell string).
    extra_args: tuple[str, ...] = ()
    # Python executable whose `-m vllm.entrypoints.openai.api_server` is started; None: `vllm serve`.
    python: str | None = None


@dataclass(frozen=True)
class EarlyStopRule:
    """Stop a benchmark once the trial is dominated by the current Pareto front.

    ``front`` holds (oom_per_1k, p99_e2e_s) points already achieved. After at least
    ``min_requests`` finished requests, the backend asks :meth:`should_stop` with the partial
    OOM count and a lower bound on the final p99; the trial stops when a front point is at
    least as good on OOMs (``f_oom <= oom floor``) and better on p99 by ``margin``
    (``f_p99 * margin <= p99 lower bound``). Both bounds hold whatever the unsent requests
    do: OOMs already counted cannot be undone (floor = ooms / total), and the p99 lower
    bound is a rank statistic of latencies already observed. So a stopped trial is truly
    dominated, and the values it reports (OOMs over the requests issued, p99 over those
    finished; both >= the bounds) keep it dominated: they are conservative.
    """

    front: tuple[tuple[float, float], ...]
    min_requests: int = 100
    margin: float = 1.05

    def should_stop(self, done: int, total: int, ooms: int, p99_lower_bound_s: float) -> bool:
        if done < self.min_requests or not self.front or total <= 0:
            return False
        # Every future request could succeed: the final OOM rate is at least this.
        oom_floor = 1000.0 * ooms / total
        for f_oom, f_p99 in self.front:
            if math.isnan(f_p99) or math.isnan(f_oom):
                continue
            if f_oom <= oom_floor and f_p99 * self.margin <= p99_lower_bound_s:
                return True
        return False


@dataclass
class TrialRequest:
    """One trial to run: the full resolved flag set and the fixed benchmark."""

    trial_number: int
    server: ServerSpec
    flags: dict[str, Any]  # vLLM names, fixed and sampled together
    workload: WorkloadSpec
    trial_dir: Path
    seed: int = 0
    early_stop: EarlyStopRule | None = None


class Backend(Protocol):
    name: str

    def run_trial(self, request: TrialRequest) -> Any:  # -> TrialResult
        """Run one trial, always returning a TrialResult (failures are results, not raises)."""
        ...

    def close(self) -> None:
        """Release anything held between trials (servers, GPU memory)."""
        ...
