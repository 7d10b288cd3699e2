"""The backend interface: run one trial (start an engine, run the fixed benchmark).

Backends know nothing of Optuna, Ray or MLflow. They receive plain data and return a
:class:`~autotune.results.TrialResult`; the study driver decides what it means.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from autotune.early_stop import EarlyStopRule
from autotune.results import TrialResult
from autotune.workload import WorkloadSpec

# Where a worker's node keeps what the driver names by its own paths: variables of the
# node's environment (set where its Ray was started), read by the worker when it runs a
# trial. Unset, the driver's path is used, as on one machine or nodes that share the paths.
NODE_PYTHON_ENV = "AUTOTUNE_VLLM_PYTHON"  # this node's Python with vLLM (engine.python)
NODE_DOWNLOAD_DIR_ENV = "AUTOTUNE_DOWNLOAD_DIR"  # this node's weights directory (engine.download_dir)
NODE_MODEL_DIR_ENV = "AUTOTUNE_MODEL_DIR"  # the directory holding this node's copies of local models


@dataclass(frozen=True)
class ServerSpec:
    """How the engine is deployed, beyond the tunable flags.

    ``python``, ``download_dir`` and a local ``model`` are paths on the driver's machine
    (made absolute there); a worker resolves them for its own node with :meth:`on_node`.
    """

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

    def on_node(self, environ: Mapping[str, str]) -> ServerSpec:
        """This spec with the paths of the node whose environment is ``environ``: its
        ``AUTOTUNE_VLLM_PYTHON`` and ``AUTOTUNE_DOWNLOAD_DIR`` win over the driver's, and a
        model given as a local path is looked up by its directory name in
        ``AUTOTUNE_MODEL_DIR`` (a hub model ID is fetched by each node itself, so it stays).

        The model is found by name rather than replaced by a path, so a node set up once
        serves each study's own model: a variable naming one model would serve it to every
        later study on the node."""
        model, model_dir = self.model, environ.get(NODE_MODEL_DIR_ENV)
        if model_dir and os.path.isabs(model):
            model = os.path.join(model_dir, os.path.basename(os.path.normpath(model)))
        return replace(self, model=model, python=environ.get(NODE_PYTHON_ENV) or self.python,
                       download_dir=environ.get(NODE_DOWNLOAD_DIR_ENV) or self.download_dir)


@dataclass
class TrialRequest:
    """One trial to run: the full resolved flag set and the fixed benchmark.

    Plain data only: the worker may run on another node. The only paths are the driver's in
    ``server``, which the worker resolves for its node (:meth:`ServerSpec.on_node`) before
    the backend sees them. Everything the trial produces comes back inside the
    :class:`TrialResult`.
    """

    trial_number: int
    server: ServerSpec
    flags: dict[str, Any]  # vLLM names, fixed and sampled together
    workload: WorkloadSpec
    seed: int = 0
    early_stop: EarlyStopRule | None = None


EventHook = Callable[[str, dict[str, Any]], None]
"""How a backend says what a running trial is doing: ``hook(name, info)``.

Optional (every backend takes ``events=None``), called from the thread that runs the trial,
so it must return at once. A trial on real GPUs takes ten minutes or more; these events are
what the driver shows meanwhile. The names and their ``info``:

    loading_weights  {}                                 weights fetched to the node
    simulating       {}                                 the simulator runs the whole trial
    server_started   {start}                            0: first server; n > 0: n-th restart
    server_ready     {start, startup_s}
    request_done     {ok, e2e_s}                        a benchmark request came back
    engine_died      {start, failure_class, casualties} in-flight requests it took along
"""


class Phase(StrEnum):
    """What a running trial is doing, as people read it."""

    DISPATCHED = "dispatched"
    LOADING_WEIGHTS = "loading weights"
    SIMULATING = "simulating"
    STARTING = "starting the server"
    RESTARTING = "restarting the server"
    BENCHMARK = "benchmark"


@dataclass(frozen=True)
class TrialProgress:
    """A running trial as its backend's events add up so far; sent to the driver while it runs."""

    trial_number: int
    phase: Phase
    done: int  # benchmark requests back, whatever their outcome
    total: int
    ooms: int  # requests lost to a runtime OOM so far
    restarts: int
    p99_s: float | None  # end-to-end p99 of the requests that succeeded so far
    elapsed_s: float  # since the worker took the trial


class Backend(Protocol):
    name: str

    def run_trial(self, request: TrialRequest) -> TrialResult:
        """Run one trial, always returning a TrialResult (failures are results, not raises)."""
        ...

    def close(self) -> None:
        """Release anything held between trials (servers, GPU memory)."""
        ...
