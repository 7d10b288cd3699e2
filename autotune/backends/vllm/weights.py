"""Model weights, fetched once per node before a worker's first trial.

Every worker on a node calls :func:`prefetch_weights`; a lock file in the download
directory makes the first one download and the others wait, and a marker file makes every
later call (and later trials) return at once. The time spent here is never part of a
trial's ``startup_s``.

``huggingface_hub`` comes with vLLM, not autotune, so it is imported only when a download is
really needed: a local model directory, or ``--load-format dummy`` with a local directory,
needs nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

# With --load-format dummy vLLM still reads the config and tokenizer, never the weights.
_CONFIG_PATTERNS = ["*.json", "*.model", "*.txt", "*.tiktoken", "*.py"]
_WEIGHT_PATTERNS = [*_CONFIG_PATTERNS, "*.safetensors"]

# What this process already fetched or found, so later trials skip even the lock. Shared by
# every thread of the process: a hit is reported as "not downloaded by this call".
_done_in_process: dict[tuple[str, str, bool], PrefetchResult] = {}


@dataclass(frozen=True)
class PrefetchResult:
    model: str
    path: str  # local directory vLLM will load from ("" when the hub decides)
    downloaded: bool  # this call fetched something
    seconds: float
    note: str = ""


def _cache_dir(download_dir: str | None) -> Path:
    if download_dir:
        return Path(download_dir)
    hf_home = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
    return Path(os.environ.get("HF_HUB_CACHE", str(Path(hf_home) / "hub")))


def _safe(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "--", model)


def prefetch_weights(model: str, download_dir: str | None = None, load_format: str | None = None,
                     revision: str | None = None) -> PrefetchResult:
    """Make sure ``model`` is on this node (HF cache or ``download_dir``); download at most once."""
    t0 = time.monotonic()
    if Path(model).is_dir():
        return PrefetchResult(model, str(Path(model).resolve()), False, 0.0, "local model directory")
    dummy = (load_format or "").lower() == "dummy"
    key = (model, str(download_dir), dummy)
    if key in _done_in_process:
        # Another call (possibly another thread, at this very moment) did the work: this
        # call fetched nothing, whatever that one reported.
        return replace(_done_in_process[key], downloaded=False, seconds=time.monotonic() - t0,
                       note="already on this node (this process)")
    cache = _cache_dir(download_dir)
    locks = cache / ".autotune-locks"
    locks.mkdir(parents=True, exist_ok=True)
    marker = locks / f"{_safe(model)}{'.config' if dummy else ''}.done"
    lock_path = locks / f"{_safe(model)}.lock"
    with lock_path.open("w") as lock:
        # Blocks while another worker on this node downloads the same model.
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if marker.exists():
                res = PrefetchResult(model, marker.read_text().strip(), False, time.monotonic() - t0,
                                     "already on this node")
            else:
                try:
                    from huggingface_hub import snapshot_download
                except ImportError as e:
                    raise RuntimeError(
                        f"cannot prefetch {model!r}: huggingface_hub is not importable ({e}); "
                        "install vLLM in this environment or pass a local model directory") from None
                path = snapshot_download(
                    repo_id=model,
                    revision=revision,
                    cache_dir=str(download_dir) if download_dir else None,
                    allow_patterns=_CONFIG_PATTERNS if dummy else _WEIGHT_PATTERNS,
                )
                marker.write_text(str(path))
                res = PrefetchResult(model, str(path), True, time.monotonic() - t0,
                                     "config and tokenizer only (dummy weights)" if dummy else "")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _done_in_process[key] = res
    return res
