"""The backend interface: run one trial (start an engine, run the fixed benchmark).

Backends know nothing of Optuna, Ray or MLflow. They receive plain data and return a
:class:`~autotune.results.TrialResult`; the study driver decides what it means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune.early_stop import EarlyStopRule
from autotune.results import TrialResult
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


@dataclass
class TrialRequest:
    """One trial to run: the full resolved flag set and the fixed benchmark.

    Plain data only, and no path of the driver's filesystem: the worker may run on another
    node. Everything the trial produces comes back inside the :class:`TrialResult`.
    """

    trial_number: int
    server: ServerSpec
    flags: dict[str, Any]  # vLLM names, fixed and sampled together
    workload: WorkloadSpec
    seed: int = 0
    early_stop: EarlyStopRule | None = None


class Backend(Protocol):
    name: str

    def run_trial(self, request: TrialRequest) -> TrialResult:
        """Run one trial, always returning a TrialResult (failures are results, not raises)."""
        ...

    def close(self) -> None:
        """Release anything held between trials (servers, GPU memory)."""
        ...
