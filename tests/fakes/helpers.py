"""Build TrialRequests that start the fake vLLM server through the backend's real code path.

``ServerSpec.python`` is this interpreter and ``tests/fakes/shim`` leads PYTHONPATH, so the
backend runs ``python -m vllm.entrypoints.openai.api_server --model ...`` exactly as it does
for the CPU build, and the shim module hands over to fake_vllm_server.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from autotune.backends.base import ServerSpec, TrialRequest
from autotune.early_stop import EarlyStopRule
from autotune.workload import LengthDist, WorkloadSpec

SHIM = Path(__file__).resolve().parent / "shim"


def fake_server_spec(state_dir: Path, startup_timeout_s: float = 60.0, env: dict[str, str] | None = None,
                     **cfg: Any) -> ServerSpec:
    cfg.setdefault("state_dir", str(state_dir))
    return ServerSpec(
        model="fake/tiny-model",
        python=sys.executable,
        env={"PYTHONPATH": str(SHIM), "FAKE_VLLM": json.dumps(cfg), **(env or {})},
        startup_timeout_s=startup_timeout_s,
    )


def small_workload(**kw: Any) -> WorkloadSpec:
    base: dict[str, Any] = dict(
        num_requests=20, concurrency=4,
        prompt_len=LengthDist(dist="uniform", mean=24, min=8, max=40),
        output_len=LengthDist(dist="uniform", mean=12, min=4, max=20),
        max_restarts=3, request_timeout_s=30.0, token_id_high=1000,
    )
    base.update(kw)
    return WorkloadSpec(**base)


def fake_request(tmp_path: Path, workload: WorkloadSpec | None = None, flags: dict[str, Any] | None = None,
                 early_stop: EarlyStopRule | None = None, trial: int = 0, startup_timeout_s: float = 60.0,
                 env: dict[str, str] | None = None, **cfg: Any) -> TrialRequest:
    state = tmp_path / "fake-state"
    return TrialRequest(
        trial_number=trial,
        server=fake_server_spec(state, startup_timeout_s=startup_timeout_s, env=env, **cfg),
        flags=flags or {"max_num_seqs": 8},
        workload=workload or small_workload(),
        early_stop=early_stop,
    )


def fake_starts(tmp_path: Path) -> int:
    f = tmp_path / "fake-state" / "starts"
    return int(f.read_text()) if f.exists() else 0


def fake_requests(tmp_path: Path) -> list[dict[str, Any]]:
    f = tmp_path / "fake-state" / "requests.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []


def group_gone(pid: int) -> bool:
    """True once no process of the process group ``pid`` leads is left (the backend's stop worked)."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False
