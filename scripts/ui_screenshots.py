#!/usr/bin/env python3
"""Screenshots of a study in the MLflow UI, for the README: the trials table and the compare view.

The images are taken by the browser test itself (tests/ui/test_browser.py), exactly as a
first visit renders the links `autotune ui` prints (a fresh browser profile, nothing closed
or scripted in the page), on the flagship space run on the simulator:

    docs/img/mlflow_trials.png    every trial: evidence, recommendation, objectives, searched flags
    docs/img/mlflow_compare.png   vLLM's defaults, the recommendation and the Pareto front

Usage: .venv/bin/python scripts/ui_screenshots.py [--space FILE] [--trials N] [--img-dir DIR]
Needs Debian's Chromium (scripts/install_chromium.sh). The figures are SIMULATED (backend sim).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--space", type=Path, default=REPO / "search_spaces" / "qwen72b.yaml")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--img-dir", type=Path, default=REPO / "docs" / "img")
    args = ap.parse_args()
    args.img_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AUTOTUNE_UI_SPACE": str(args.space.resolve()), "AUTOTUNE_UI_TRIALS": str(args.trials),
           "AUTOTUNE_SCREENSHOT_DIR": str(args.img_dir.resolve()), "AUTOTUNE_REQUIRE_BROWSER": "1"}
    test = "tests/ui/test_browser.py"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{test}::test_experiment_link_lists_every_trial_in_the_classic_runs_table",
           f"{test}::test_compare_link_shows_baseline_and_pareto_with_flags_and_objectives_as_axes"]
    sys.exit(subprocess.run(cmd, cwd=REPO, env=env).returncode)


if __name__ == "__main__":
    main()
