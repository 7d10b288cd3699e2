"""`autotune` command line. Each command lives in its own module and registers on ``app``."""

from __future__ import annotations

import os
import sys

from autotune.cli.app import app
from autotune.errors import UserError
from autotune.security import one_line

# Importing mlflow writes telemetry unless told not to; no command of ours wants that.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Every command ranks configs by the same rule, export.oom_model's predictions included: importing
# autotune.calibrate hands the evidence its OOM model (the study layer may not import the simulator).
# Command modules: importing one registers its command on ``app``.
import autotune.calibrate  # noqa: E402,F401
from autotune.cli import calibrate, export, metrics, run, simulate, status, ui  # noqa: E402,F401


def _quiet_libraries() -> None:
    """Our progress lines are the output; library INFO chatter (study created, DB migrated) is not."""
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
    except ImportError:
        pass


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2, no traceback."""
    _quiet_libraries()
    try:
        app()
    except UserError as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
