"""Per-trial files in the run directory; the same files become MLflow artifacts.

The driver is their one writer (workers may run on other nodes: everything a trial
produced comes back inside its result), and result.json has this one layout.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import yaml

from autotune.results import TrialResult
from autotune.rundir import RunDir
from autotune.study.loop.callbacks import Callback
from autotune.study.trials import TrialRecord

# Every file a trial may have, in the order they are logged.
FILE_NAMES = ("flags.yaml", "requests.csv", "result.json", "server.log", "gpu_timeline.json", "metrics_snapshots.json")


class TrialFiles(Callback):
    """Writes a trial's files before Optuna is told, so a complete trial always has them."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir

    def on_trial_measured(self, record: TrialRecord, result: TrialResult) -> None:
        write_trial_files(self.run_dir.trial_dir(record.number), record, result)


def write_trial_files(trial_dir: Path, record: TrialRecord, result: TrialResult) -> None:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "flags.yaml").write_text(yaml.safe_dump(record.flags, sort_keys=True))
    _write_requests_csv(trial_dir / "requests.csv", result)
    d = result.to_dict()
    d.pop("records")
    d.pop("artifacts")
    d["metrics"] = record.metrics
    (trial_dir / "result.json").write_text(json.dumps(d, indent=1, default=str, allow_nan=True))
    # What a trial produced besides its numbers; the backend shipped it back in the result.
    a = result.artifacts
    if a.server_log:
        (trial_dir / "server.log").write_text(a.server_log)
    if a.gpu_timeline:
        (trial_dir / "gpu_timeline.json").write_text(json.dumps(a.gpu_timeline))
    if a.metrics_snapshots:  # the engine's /metrics as the benchmark went (real vLLM)
        (trial_dir / "metrics_snapshots.json").write_text(json.dumps(a.metrics_snapshots))


def existing_files(run_dir: RunDir, number: int) -> list[Path]:
    """The files a trial has on disk (none for a rejected or failed trial)."""
    d = run_dir.trial_dir(number)
    return [d / n for n in FILE_NAMES if (d / n).exists()]


def _write_requests_csv(path: Path, result: TrialResult) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "send_s", "ttft_s", "e2e_s", "tpot_s", "prompt_tokens", "output_tokens", "status", "error",
                    "prompt_logprobs", "logprobs", "n", "streamed"])
        for r in result.records:
            w.writerow([r.index, _f(r.send_s), _f(r.ttft_s), _f(r.e2e_s), _f(r.tpot_s), r.prompt_tokens,
                        r.output_tokens, str(r.status), r.error, _opt(r.prompt_logprobs), _opt(r.logprobs), r.n,
                        r.streamed])


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.6f}"


def _opt(v: int | None) -> str:
    """A request option: empty when it was not sent."""
    return "" if v is None else str(v)
