"""The driver's paths as a worker's node has them (issue 22): on a cluster whose nodes keep vLLM's
Python, the weights or a local model elsewhere, the node's environment says where, and the worker
resolves the request's ServerSpec before the backend sees it. Unset, the driver's paths stand."""

from __future__ import annotations

from typing import Any

from autotune.backends.base import (
    NODE_DOWNLOAD_DIR_ENV,
    NODE_MODEL_DIR_ENV,
    NODE_PYTHON_ENV,
    ServerSpec,
    TrialRequest,
)
from autotune.backends.vllm.server import build_command
from autotune.results import TrialResult, TrialStatus
from autotune.workers.actor import TrialWorker
from autotune.workload import WorkloadSpec

DRIVER = ServerSpec(model="/home/alice/models/tiny-qwen2", python="/home/alice/autotune/.venv/bin/python",
                    download_dir="/home/alice/hf")
NODE = {NODE_PYTHON_ENV: "/opt/autotune/.venv/bin/python", NODE_DOWNLOAD_DIR_ENV: "/mnt/hf",
        NODE_MODEL_DIR_ENV: "/mnt/models"}


def test_the_nodes_paths_win_over_the_drivers():
    here = DRIVER.on_node(NODE)
    assert here.python == "/opt/autotune/.venv/bin/python" and here.download_dir == "/mnt/hf"
    assert here.model == "/mnt/models/tiny-qwen2"  # the same model, found by name in the node's directory
    cmd = build_command(here, {}, 8000)
    assert cmd[:5] == ["/opt/autotune/.venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                       "/mnt/models/tiny-qwen2"]
    assert cmd[cmd.index("--download-dir") + 1] == "/mnt/hf"


def test_without_node_settings_the_drivers_paths_stand():
    """One machine, or nodes that share the paths: today's behaviour."""
    assert DRIVER.on_node({}) == DRIVER
    assert DRIVER.on_node({NODE_PYTHON_ENV: ""}) == DRIVER  # set but empty: not a path


def test_each_setting_is_independent_and_a_hub_model_id_is_never_rewritten():
    only_python = DRIVER.on_node({NODE_PYTHON_ENV: "/opt/py"})
    assert (only_python.python, only_python.download_dir, only_python.model) == (
        "/opt/py", DRIVER.download_dir, DRIVER.model)
    hub = ServerSpec(model="Qwen/Qwen2.5-0.5B")
    assert hub.on_node(NODE).model == "Qwen/Qwen2.5-0.5B"  # each node fetches a hub model itself
    trailing = ServerSpec(model="/home/alice/models/tiny-qwen2/").on_node(NODE)
    assert trailing.model == "/mnt/models/tiny-qwen2"


class _Seen:
    """A backend that records the request it was given."""

    name = "seen"

    def __init__(self) -> None:
        self.requests: list[TrialRequest] = []

    def run_trial(self, request: TrialRequest) -> TrialResult:
        self.requests.append(request)
        return TrialResult(TrialStatus.OK, self.name)

    def close(self) -> None:
        pass


def test_the_worker_resolves_the_request_on_its_node_before_the_backend_runs_it(monkeypatch):
    for k, v in NODE.items():
        monkeypatch.setenv(k, v)
    worker = TrialWorker("noop", 0)
    seen: Any = _Seen()
    worker.backend = seen
    request = TrialRequest(3, DRIVER, {}, WorkloadSpec(num_requests=2, concurrency=1))
    worker.run(request)
    server = seen.requests[0].server
    assert server.python == NODE[NODE_PYTHON_ENV] and server.download_dir == NODE[NODE_DOWNLOAD_DIR_ENV]
    assert server.model == "/mnt/models/tiny-qwen2"
    assert request.server == DRIVER  # the driver's request is not changed under it
