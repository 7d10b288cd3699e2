"""The committed synthetic trace is what its script makes, and replays as a Mooncake trace."""

from __future__ import annotations

import subprocess
import sys

from autotune.workload import WorkloadSpec, generate_trace
from tests.conftest import REPO

SHIPPED = REPO / "data" / "traces" / "synthetic_mooncake_chat.jsonl"


def test_the_script_makes_the_committed_file(tmp_path):
    out = tmp_path / "t.jsonl"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_synthetic_trace.py"), "--out", str(out)],  # noqa: S603
                   check=True, capture_output=True, timeout=120)
    assert out.read_bytes() == SHIPPED.read_bytes()


def test_the_committed_trace_replays_with_shared_prefixes():
    spec = WorkloadSpec(trace={"path": str(SHIPPED)}, concurrency=None).loaded()
    assert spec.trace is not None and spec.trace.format == "mooncake" and spec.num_requests == 400
    trace = generate_trace(spec, max_model_len=8192)
    assert trace[0].arrival_s == 0.0 and all(a.arrival_s <= b.arrival_s for a, b in zip(trace, trace[1:], strict=False))
    assert sum(t.shares_prefix for t in trace) > 300  # system prompts and follow-up turns
