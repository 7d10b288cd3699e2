"""Write the chosen trial as a `vllm serve --config` YAML, plus the equivalent command line.

vLLM's config-file loader turns each ``key: value`` into ``--key value`` and a ``true``
boolean into a bare ``--key``; a ``false`` boolean is dropped, which would silently leave
vLLM's default (prefix caching and chunked prefill default to on in V1). So a disabled
boolean is written as ``no-<flag>: true``, which becomes ``--no-<flag>``.
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from autotune.backend_kinds import is_simulated
from autotune.engine.flags import flags_to_cli_args
from autotune.files import write_atomic
from autotune.metrics import display

# Flags that only make sense inside a trial (the benchmark's server), not in deployment.
_TRIAL_ONLY = {"host", "port"}


def config_dict(model: str, flags: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model}
    for name in sorted(flags):
        value = flags[name]
        # Flags are engine settings, never credentials (those live in env, which is not exported).
        if value is None or name in _TRIAL_ONLY:
            continue
        key = name.replace("_", "-")
        if isinstance(value, bool):
            out[key if value else f"no-{key}"] = True
        else:
            out[key] = value
    return out


def header(study: str, trial: int, backend: str, metrics: dict[str, float], rule: str,
           evidence: Sequence[str] = ()) -> str:
    """The comment header: where the config comes from, what it measured (``metrics``: the
    means over its runs) and ``evidence`` lines (autotune.export.header: runs, intervals,
    OOM bound, headroom)."""
    lines = [
        "# vLLM serving config exported by autotune",
        f"# study: {study}   trial: {trial}   backend: {backend}"
        + ("   (SIMULATED figures, not a GPU measurement)" if is_simulated(backend) else ""),
        f"# exported: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"# chosen by: {rule}",
        "# measured: " + ", ".join(f"{k}={display(k, v)}" for k, v in metrics.items()),
        *(f"# {line}" for line in evidence),
        "# deploy: vllm serve --config <this file>",
    ]
    return "\n".join(lines) + "\n"


def write_config(path: Path, model: str, flags: dict[str, Any], head: str) -> str:
    return write_atomic(path, head + yaml.safe_dump(config_dict(model, flags), sort_keys=False))


def serve_command(model: str, flags: dict[str, Any]) -> str:
    clean = {k: v for k, v in flags.items() if k not in _TRIAL_ONLY}
    return shlex.join(["vllm", "serve", model, *flags_to_cli_args(dict(sorted(clean.items())))])
