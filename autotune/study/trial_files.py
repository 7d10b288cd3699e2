"""Per-trial files in the run directory; the same files become MLflow artifacts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from autotune.results import TrialResult


def write_flags(trial_dir: Path, flags: dict[str, Any]) -> Path:
    trial_dir.mkdir(parents=True, exist_ok=True)
    path = trial_dir / "flags.yaml"
    path.write_text(yaml.safe_dump(flags, sort_keys=True))
    return path


def write_requests_csv(trial_dir: Path, result: TrialResult) -> Path:
    path = trial_dir / "requests.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "send_s", "ttft_s", "e2e_s", "tpot_s", "prompt_tokens", "output_tokens", "status", "error"])
        for r in result.records:
            w.writerow([r.index, _f(r.send_s), _f(r.ttft_s), _f(r.e2e_s), _f(r.tpot_s), r.prompt_tokens,
                        r.output_tokens, str(r.status), r.error])
    return path


def write_result_json(trial_dir: Path, result: TrialResult, metrics: dict[str, float]) -> Path:
    path = trial_dir / "result.json"
    d = result.to_dict()
    d.pop("records")
    d.pop("artifacts")
    d["metrics"] = metrics
    path.write_text(json.dumps(d, indent=1, default=str, allow_nan=True))
    return path


def write_server_log(trial_dir: Path, result: TrialResult) -> Path | None:
    """The server log the backend shipped back in the result (its node may not be the driver's)."""
    text = result.artifacts.server_log
    if not text:
        return None
    path = trial_dir / "server.log"
    path.write_text(text)
    return path


def write_gpu_timeline(trial_dir: Path, result: TrialResult) -> Path | None:
    if not result.artifacts.gpu_timeline:
        return None
    path = trial_dir / "gpu_timeline.json"
    path.write_text(json.dumps(result.artifacts.gpu_timeline))
    return path


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.6f}"
