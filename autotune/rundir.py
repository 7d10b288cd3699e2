"""Layout of a run directory: the stores and per-trial files of one study.

    runs/<study>/
      optuna.db        Optuna storage (default; any SQLAlchemy URL may replace it)
      mlflow.db        MLflow tracking store (default)
      space.yaml       the space the study was created with
      trials/<n>/      flags.yaml, requests.csv, result.json; server.log, gpu_timeline.json and
                       metrics_snapshots.json when the backend produced them (study/trial_files.py)
      plots/           pareto.png, history.png
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import UserError


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def optuna_url(self) -> str:
        return f"sqlite:///{(self.root / 'optuna.db').resolve()}"

    @property
    def mlflow_url(self) -> str:
        return f"sqlite:///{(self.root / 'mlflow.db').resolve()}"

    @property
    def mlflow_artifacts(self) -> Path:
        return (self.root / "mlartifacts").resolve()

    @property
    def space_copy(self) -> Path:
        return self.root / "space.yaml"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def trial_dir(self, number: int) -> Path:
        return self.root / "trials" / f"{number:05d}"

    def ensure(self) -> RunDir:
        """Create the directory, or fail with one line if it cannot be written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "trials").mkdir(exist_ok=True)
            self.plots.mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(f"--out {self.root}: cannot create the run directory ({e.strerror}); pick a writable path") from None
        if not os.access(self.root, os.W_OK):
            raise UserError(f"--out {self.root}: run directory is not writable; pick a writable path")
        return self

    def require_existing(self) -> RunDir:
        if not (self.root / "optuna.db").exists() and not self.space_copy.exists():
            raise UserError(f"--out {self.root}: no study here; run 'autotune run --out {self.root}' first")
        return self

