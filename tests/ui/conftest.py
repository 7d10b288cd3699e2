"""A finished simulator study served by `autotune ui`, and Debian's Chromium to look at it.

The browser is Debian's Chromium (scripts/install_chromium.sh), driven by Playwright by its
executable path. Without it these tests skip, unless AUTOTUNE_REQUIRE_BROWSER=1 (CI sets
it): then they fail, so CI cannot pass without having looked at the UI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.service import RunOptions, run_study
from autotune.space import load_space
from tests.ui.ui_process import free_port, start_ui

DATA = Path(__file__).resolve().parents[1] / "data"
CHROMIUM = os.environ.get("AUTOTUNE_CHROMIUM", "/usr/bin/chromium")
# A few trials: every one must be a row the test can see without scrolling. scripts/ui_screenshots.py
# runs these tests on the flagship space instead (AUTOTUNE_UI_SPACE, AUTOTUNE_UI_TRIALS) and has
# them save what the first visit shows (AUTOTUNE_SCREENSHOT_DIR): the README's images.
SPACE_PATH = Path(os.environ.get("AUTOTUNE_UI_SPACE", DATA / "sim_small.yaml"))
TRIALS = int(os.environ.get("AUTOTUNE_UI_TRIALS", "6"))
SCREENSHOT_DIR = os.environ.get("AUTOTUNE_SCREENSHOT_DIR")


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (run scripts/install_chromium.sh, or set AUTOTUNE_CHROMIUM)"
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    why = _browser_missing()
    if why:
        if os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"AUTOTUNE_REQUIRE_BROWSER=1 but {why}", pytrace=False)
        pytest.skip(why)
    return CHROMIUM


@pytest.fixture(scope="module")
def finished_study(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("ui") / "run"
    summary = run_study(load_space(SPACE_PATH), SPACE_PATH, RunOptions(out=out, trials=TRIALS, progress=False))
    return summary, out


@pytest.fixture(scope="module")
def ui_links(finished_study, tmp_path_factory):
    """label -> URL as `autotune ui` printed them, for the finished study."""
    _, out = finished_study
    ui = start_ui(out, tmp_path_factory.mktemp("ui-cwd"), free_port())
    try:
        yield ui.wait_for_links()
    finally:
        ui.stop()
