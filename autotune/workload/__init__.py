"""The fixed benchmark every backend runs: a workload spec and the trace it generates."""

from autotune.workload.files import TRACE_FORMATS, TraceFileError, TraceRow
from autotune.workload.options import RequestOptions
from autotune.workload.spec import (
    SPACE_DIR_CONTEXT,
    LengthDist,
    LongTail,
    OptionShare,
    OptionsSpec,
    TraceSource,
    WorkloadSpec,
)
from autotune.workload.trace import SYSTEM_PROMPT_BLOCK, TraceRequest, generate_trace

__all__ = [
    "SPACE_DIR_CONTEXT",
    "SYSTEM_PROMPT_BLOCK",
    "TRACE_FORMATS",
    "LengthDist",
    "LongTail",
    "OptionShare",
    "OptionsSpec",
    "RequestOptions",
    "TraceFileError",
    "TraceRequest",
    "TraceRow",
    "TraceSource",
    "WorkloadSpec",
    "generate_trace",
]
