"""The trial worker: a Ray actor that owns ``gpus_per_worker`` GPUs and one backend.

Long-lived so a backend can keep state between trials (weights already on the node,
the GPU memory baseline). Ray sets CUDA_VISIBLE_DEVICES for the actor; the backend's
server inherits it.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import ray

from autotune.backends import TrialRequest, get_backend
from autotune.results import TrialResult


class TrialWorker:
    def __init__(self, backend: str, worker_id: int, backend_kwargs: dict[str, Any] | None = None) -> None:
        self.worker_id = worker_id
        self.backend = get_backend(backend, **(backend_kwargs or {}))

    def info(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "node": socket.gethostname(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    def run(self, request: TrialRequest) -> TrialResult:
        return self.backend.run_trial(request)

    def close(self) -> None:
        self.backend.close()


RemoteTrialWorker = ray.remote(max_restarts=0, max_task_retries=0)(TrialWorker)
