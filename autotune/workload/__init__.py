"""The fixed benchmark every backend runs: a workload spec and the trace it generates."""

from autotune.workload.spec import LengthDist, WorkloadSpec
from autotune.workload.trace import TraceRequest, generate_trace

__all__ = ["LengthDist", "TraceRequest", "WorkloadSpec", "generate_trace"]
