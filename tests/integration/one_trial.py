"""Run ONE real trial (vLLM CPU build, tiny dummy Qwen2) and print its numbers.

    .venv/bin/python -m tests.integration.one_trial [OUT_DIR]

The figures are for vLLM's CPU build with a 2-layer random-weight model on this machine:
a check that the plumbing measures real things, NOT a GPU measurement.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autotune.backends.base import TrialRequest
from autotune.backends.vllm import VllmBackend
from tests.integration.conftest import TINY_FLAGS, VLLM_PYTHON, cpu_server, tiny_workload
from tests.tinymodel import build_tiny_model


def main(out: Path) -> None:
    model = build_tiny_model(out / "tiny-qwen2")
    backend = VllmBackend()
    try:
        res = backend.run_trial(TrialRequest(0, cpu_server(model, str(VLLM_PYTHON)), dict(TINY_FLAGS),
                                             tiny_workload()))
    finally:
        backend.close()
    m = res.metrics()
    keys = ("requests", "requests_ok", "oom_per_1k", "startup_s", "p50_e2e_s", "p99_e2e_s", "p50_ttft_s",
            "p99_ttft_s", "p50_tpot_s", "output_tok_per_s", "preemptions", "kv_cache_tokens", "duration_s",
            "gpu_time_s")
    print(json.dumps({"status": res.status, "failure_class": res.failure_class, **{k: m[k] for k in keys},
                      "server_metrics": {k: v for k, v in res.server_metrics.items()
                                         if k in ("preemptions", "prefix_cache_hits", "prefix_cache_queries",
                                                  "kv_cache_usage_max", "e2e_p50_s", "e2e_p99_s")},
                      "itl_p50_s": res.extra["itl_p50_s"], "itl_p99_s": res.extra["itl_p99_s"],
                      "nvml": res.extra["nvml"],
                      # What travelled back in the result instead of files on the worker.
                      "artifacts": {"server_log_chars": len(res.artifacts.server_log),
                                    "metrics_snapshots": len(res.artifacts.metrics_snapshots),
                                    "gpu_timeline_points": len(res.artifacts.gpu_timeline)}},
                     indent=1, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/autotune-one-trial"))
