"""Read ``vllm:cache_config_info`` labels from a live server (integration helper)."""

from __future__ import annotations

import urllib.request

from autotune.backends.vllm.metrics import parse_metrics


def cache_config_info(base_url: str) -> dict[str, str]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:  # noqa: S310 - 127.0.0.1 test server
        snap = parse_metrics(r.read().decode())
    return snap.info.get("vllm:cache_config_info", {})
