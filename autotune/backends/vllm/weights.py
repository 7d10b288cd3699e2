"""Model weights, fetched once per node before a worker's first trial.

Every worker on a node calls :func:`prefetch_weights`; a lock file in the download
directory makes the first one download and the others wait, and a marker file makes every
later call (and later trials) return at once. The time spent here is never part of a
trial's ``startup_s``.

The fetch goes where vLLM will look: the cache, Hub endpoint and token come from the
server's environment (``ServerSpec.env`` over this process's), by huggingface_hub's own
rule, so a cache or endpoint set in ``engine.env`` is not fetched into one place and read
from another (vLLM would then download again, once per worker).

``huggingface_hub`` comes with vLLM, not autotune, so it is imported only when a download is
really needed: a local model directory, or ``--load-format dummy`` with a local directory,
needs nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Mapping
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


def _hub_cache(env: Mapping[str, str]) -> Path:
    """The cache huggingface_hub uses in a process with environment ``env`` (the rule of
    ``huggingface_hub.constants``: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME's or
    ~/.cache's huggingface/hub)."""
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def _safe(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "--", model)


def prefetch_weights(model: str, download_dir: str | None = None, load_format: str | None = None,
                     revision: str | None = None, env: Mapping[str, str] | None = None) -> PrefetchResult:
    """Make sure ``model`` is on this node (HF cache or ``download_dir``); download at most once.

    ``env``: the server's environment overrides (``ServerSpec.env``); its HF_HUB_CACHE /
    HF_HOME, HF_ENDPOINT and HF_TOKEN win over this process's, as they will in vLLM's.
    """
    t0 = time.monotonic()
    if Path(model).is_dir():
        return PrefetchResult(model, str(Path(model).resolve()), False, 0.0, "local model directory")
    dummy = (load_format or "").lower() == "dummy"
    server_env = {**os.environ, **(env or {})}
    cache = Path(download_dir) if download_dir else _hub_cache(server_env)
    key = (model, str(cache), dummy)
    if key in _done_in_process:
        # Another call (possibly another thread, at this very moment) did the work: this
        # call fetched nothing, whatever that one reported.
        return replace(_done_in_process[key], downloaded=False, seconds=time.monotonic() - t0,
                       note="already on this node (this process)")
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
                    cache_dir=str(cache),
                    endpoint=server_env.get("HF_ENDPOINT") or None,
                    token=server_env.get("HF_TOKEN") or None,
                    allow_patterns=_CONFIG_PATTERNS if dummy else _WEIGHT_PATTERNS,
                )
                marker.write_text(str(path))
                res = PrefetchResult(model, str(path), True, time.monotonic() - t0,
                                     "config and tokenizer only (dummy weights)" if dummy else "")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _done_in_process[key] = res
    return res
