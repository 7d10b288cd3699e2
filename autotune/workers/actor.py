"""The trial worker: a Ray actor that owns ``gpus_per_worker`` GPUs and one backend.

Long-lived so a backend can keep state between trials (weights already on the node,
the GPU memory baseline). Ray sets CUDA_VISIBLE_DEVICES for the actor; the backend's
server inherits it.

A trial on real GPUs runs for ten minutes or more, and the driver shows what it is doing
meanwhile: the backend's events are folded into a snapshot here (workers/progress.py), and
``progress`` answers from its own concurrency group, a second thread, while ``run`` holds
the default one. Polling a snapshot was chosen over pushing events to the driver (a queue
actor, a callback into the driver) because it needs nothing beyond the actor that already
exists, bounds the traffic to one small record per poll, and loses nothing if the driver is
busy: the next poll carries the latest state.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from typing import Any

import ray

from autotune.backends import TrialRequest, get_backend
from autotune.backends.base import TrialProgress
from autotune.results import TrialResult
from autotune.workers.progress import ProgressTracker

PROGRESS_GROUP = "progress"


class TrialWorker:
    def __init__(self, backend: str, worker_id: int, backend_kwargs: dict[str, Any] | None = None) -> None:
        self.worker_id = worker_id
        self.tracker = ProgressTracker()
        self.backend = get_backend(backend, events=self.tracker.event, **(backend_kwargs or {}))

    def info(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "node": socket.gethostname(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    def run(self, request: TrialRequest) -> TrialResult:
        self.tracker.begin(request.trial_number, request.workload.num_requests)
        # The driver's paths (its Python, weights directory, local model) as this node has
        # them: set per node in the environment its Ray was started with (docs/vllm_backend.md).
        request = replace(request, server=request.server.on_node(os.environ))
        try:
            return self.backend.run_trial(request)
        finally:
            self.tracker.end()

    @ray.method(concurrency_group=PROGRESS_GROUP)
    def progress(self) -> TrialProgress | None:
        """The running trial's state now (None between trials); answers while ``run`` runs."""
        return self.tracker.snapshot()

    @ray.method(concurrency_group=PROGRESS_GROUP)
    def close(self) -> None:
        """Stop the backend's servers. On the second thread, so it also runs while ``run``
        holds the first: a driver stopping mid-trial (SIGTERM, Ctrl-C) stops the engine
        there, instead of waiting for the trial to end or killing the actor under a server
        that would outlive it (vLLM runs in a session of its own)."""
        self.backend.close()


# The default group keeps one thread: run and info stay one at a time.
# (Ray's type stubs omit concurrency_groups, which ray.remote accepts for actors.)
RemoteTrialWorker = ray.remote(max_restarts=0, max_task_retries=0,  # type: ignore[call-overload]
                               concurrency_groups={PROGRESS_GROUP: 1})(TrialWorker)
