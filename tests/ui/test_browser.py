"""The MLflow UI in a real browser (Debian's Chromium), opened from the links `autotune ui` prints.

What a user sees on a first visit (a fresh browser profile, nothing clicked, no script run
in the page), not what the store holds: the compare link shows vLLM's defaults, the
recommended trial and the Pareto trials in the runs table and a parallel-coordinates plot
with an axis per searched flag and per objective; the experiment link lists every trial in
the classic runs table with run names wide enough to read. With AUTOTUNE_SCREENSHOT_DIR set
the pages are saved there as they rendered (scripts/ui_screenshots.py: the README's images).
"""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from autotune.space import load_space
from autotune.tracking.report import RECOMMENDED_TAG
from autotune.tracking.views import RUN_NAME_COLUMN, RUN_NAME_WIDTH_PX
from tests.ui.conftest import SCREENSHOT_DIR, SPACE_PATH

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop

# Playwright passes --no-sandbox itself (root in CI); the rest keeps Chromium off the network.
ARGS = ["--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]
SPACE = load_space(SPACE_PATH)
VIEWPORT = {"width": 1600, "height": 1250}  # room for both charts of the compare view
SHOTS = {"all trials": "mlflow_trials.png", "vLLM defaults vs Pareto front": "mlflow_compare.png"}
WAIT_S = 90  # the runs view loads the bundle, then the runs, then draws the charts


def _trial_runs(out, study: str) -> dict[int, str]:
    """Trial number -> run name, from the store."""
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = c.get_experiment_by_name(study)
    runs = c.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'trial'", max_results=1000)
    return {int(r.data.tags["autotune.trial_number"]): r.info.run_name for r in runs}


def _link(links: dict[str, str], ending: str) -> str:
    (url,) = [u for label, u in links.items() if label.endswith(ending)]
    return url


def _page(browser, url: str):
    # A fresh context per page: the UI keeps view state in localStorage.
    page = browser.new_context(viewport=VIEWPORT).new_page()
    # Not "networkidle": the runs view polls the server, so the network is never idle.
    page.goto(url, wait_until="load")
    return page


def _listed_runs(page, expected: int) -> list[str]:
    """Run names in the runs table, once it holds ``expected`` rows (or the wait is over)."""
    rows: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        rows = page.locator('.ag-row a[href*="/runs/"]').all_inner_texts()
        if len(rows) >= expected:
            break
        page.wait_for_timeout(500)
    return rows


def _recommended(out, study: str) -> int:
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    return int(c.get_experiment_by_name(study).tags[RECOMMENDED_TAG])


def _shoot(page, ending: str) -> None:
    """Save the page as a first visit shows it: nothing closed, moved or scripted."""
    if SCREENSHOT_DIR:
        page.wait_for_timeout(2000)  # the charts' last redraw
        page.screenshot(path=str(Path(SCREENSHOT_DIR) / SHOTS[ending]))


def _parallel_axes(page) -> set[str]:
    """Axis names of the parallel-coordinates plot (a long name is shortened on the axis and
    given in full in its tooltip)."""
    page.wait_for_selector("g.axis text.label", timeout=WAIT_S * 1000)
    names = page.eval_on_selector_all("g.axis text.label, .axis-label-tooltip text", "els => els.map(e => e.textContent)")
    return {n.strip() for n in names}


def test_compare_link_shows_baseline_and_pareto_with_flags_and_objectives_as_axes(chromium, finished_study, ui_links):
    from playwright.sync_api import sync_playwright

    summary, out = finished_study
    names = _trial_runs(out, summary.study)
    study = optuna.load_study(study_name=summary.study, storage=f"sqlite:///{out / 'optuna.db'}")
    baseline = study.trials[0]
    assert baseline.user_attrs["role"] == "baseline"
    recommended = _recommended(out, summary.study)
    compared = {names[n] for n in {0, recommended, *summary.pareto}}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=ARGS)
        try:
            page = _page(browser, _link(ui_links, "vLLM defaults vs Pareto front"))
            listed = _listed_runs(page, len(compared))
            axes = _parallel_axes(page)
            body = page.inner_text("body")
            _shoot(page, "vLLM defaults vs Pareto front")
        finally:
            browser.close()
    assert names[recommended] in listed, "the compare view shows the recommended trial"
    assert sorted(listed) == sorted(compared), "the runs table lists the baseline, the recommendation and the front"
    assert {"oom_per_1k", "p99_e2e_s"} <= axes, axes
    assert set(SPACE.params) <= axes, f"every searched flag is an axis: {axes}"
    assert f"{len(compared)} matching runs" in body


def test_experiment_link_lists_every_trial_in_the_classic_runs_table(chromium, finished_study, ui_links):
    from playwright.sync_api import sync_playwright

    summary, out = finished_study
    names = _trial_runs(out, summary.study)
    study = optuna.load_study(study_name=summary.study, storage=f"sqlite:///{out / 'optuna.db'}")
    told = [t.number for t in study.trials if t.state.is_finished()]
    assert sorted(names) == sorted(told)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=ARGS)
        try:
            page = _page(browser, _link(ui_links, "all trials"))
            listed = _listed_runs(page, len(names))
            body = page.inner_text("body")
            url = page.url
            name_width = page.locator(f'.ag-header-cell[col-id="{RUN_NAME_COLUMN}"]').first.bounding_box()
            _shoot(page, "all trials")
        finally:
            browser.close()
    assert name_width and name_width["width"] >= RUN_NAME_WIDTH_PX - 10, "run names are not cut at ~20 characters"
    assert sorted(listed) == sorted(names.values())  # every trial is a row, none folded under a parent
    assert f"{len(names)} matching runs" in body
    assert "/runs" in url and "workflowType=machine_learning" in url  # the runs table, not the GenAI overview
    assert f"autotune study {summary.study}" in body  # the experiment's description
    for column in ("evidence", "oom_per_1k", "p99_e2e_s", "recommended", "pareto"):  # on screen at first
        assert column in body


@pytest.mark.xfail(strict=True, reason="MLflow 3.17 opens its assistant panel by itself on a first visit to "
                   "localhost/127.0.0.1 and shows the shared-view notice for every viewStateShareKey link; no "
                   "server setting, env var or URL turns either off (docs/tracking.md, Known limits). Strict: "
                   "this fails the day MLflow lets us, so the limit is lifted then")
def test_a_first_visit_shows_no_assistant_panel_or_shared_view_banner(chromium, finished_study, ui_links):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=ARGS)
        try:
            page = _page(browser, _link(ui_links, "all trials"))
            _listed_runs(page, 1)
            page.wait_for_timeout(2000)
            body = page.inner_text("body")
        finally:
            browser.close()
    assert "MLflow Assistant" not in body
    assert "You're viewing a shared view" not in body
