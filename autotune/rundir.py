"""Layout of a run directory: the stores and per-trial files of one study.

    runs/<study>/
      optuna.db        Optuna storage (default; any SQLAlchemy URL may replace it)
      mlflow.db        MLflow tracking store (default)
      space.yaml       the space of the latest run (secrets masked; status and export read it)
      trials/<n>/      flags.yaml, requests.csv, result.json; server.log, gpu_timeline.json and
                       metrics_snapshots.json when the backend produced them (study/loop/trial_files.py)
      plots/           pareto.png, history.png
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import UserError

# A study name becomes runs/<name>: one plain path component, so it cannot climb out of runs/
# (``../../evil``), replace it (``/abs``) or hide in it (``.x``).
_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
STUDY_NAME_FORM = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128"


def study_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a study (and its default run directory), or None."""
    if _STUDY_NAME.fullmatch(name):
        return None
    return f"{name!r} is not a plain name ({STUDY_NAME_FORM}); use --out DIR to choose where the run directory goes"


SPACE_PLACEHOLDER = "SPACE.yaml"


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

    def run_hint(self) -> str:
        """The command that creates a study here, for hints (SPACE.yaml stands for the user's file)."""
        return shlex.join(["autotune", "run", "--space", SPACE_PLACEHOLDER, "--out", str(self.root)])

    def require_existing(self) -> RunDir:
        if not (self.root / "optuna.db").exists() and not self.space_copy.exists():
            raise UserError(f"--out {self.root}: no study here; create one with: {self.run_hint()}")
        return self

