#!/usr/bin/env python3
"""Screenshots of a study in the MLflow UI, for the README: the trials table and the compare view.

Runs the flagship space on the simulator (or takes an existing run directory), serves it
with `autotune ui`, opens the two links it prints in Debian's Chromium (Playwright, by
executable path; scripts/install_chromium.sh installs it) and saves:

    docs/img/mlflow_trials.png    every trial: objectives, SLO metrics, searched flags
    docs/img/mlflow_compare.png   vLLM's defaults vs the Pareto front: parallel coordinates

Usage: .venv/bin/python scripts/ui_screenshots.py [--out RUN_DIR] [--space FILE] [--img-dir DIR]
The figures in the screenshots are SIMULATED (backend sim), never GPU measurements.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))
VIEWPORT = {"width": 1600, "height": 1250}  # room for both charts of the compare view
SHOTS = {"all trials": "mlflow_trials.png", "vLLM defaults vs Pareto front": "mlflow_compare.png"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="run directory of a finished study (default: run --space now)")
    ap.add_argument("--space", type=Path, default=REPO / "search_spaces" / "qwen72b.yaml")
    ap.add_argument("--img-dir", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autotune-shots-") as tmp:
        out = args.out or Path(tmp) / "run"
        if args.out is None:
            subprocess.run([AUTOTUNE, "run", "--space", str(args.space), "--backend", "sim", "--out", str(out),
                            "--progress", "none"], check=True)
        ui = subprocess.Popen([AUTOTUNE, "ui", "--out", str(out), "--port", str(_free_port())], cwd=tmp,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            links = _links(ui)
            args.img_dir.mkdir(parents=True, exist_ok=True)
            _shoot(links, args.img_dir, args.chromium)
        finally:
            ui.send_signal(signal.SIGTERM)
            ui.wait(timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _links(ui: subprocess.Popen) -> dict[str, str]:
    """label -> URL from `autotune ui`'s output: a label line, then its URL, after "MLflow UI:"."""
    assert ui.stdout is not None
    lines: list[str] = []
    for line in ui.stdout:
        lines.append(line.strip())
        if line.startswith("MLflow UI:"):
            break
    labels_urls = [next(ui.stdout).strip() for _ in range(2 * len(SHOTS))]
    links = {labels_urls[i].rstrip(":"): labels_urls[i + 1] for i in range(0, len(labels_urls), 2)}
    if not links:
        sys.exit("autotune ui printed no links:\n" + "\n".join(lines))
    return links


def _shoot(links: dict[str, str], img_dir: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--disable-gpu"])
        try:
            for label, url in links.items():
                name = next(f for ending, f in SHOTS.items() if label.endswith(ending))
                page = browser.new_context(viewport=VIEWPORT).new_page()
                page.goto(url, wait_until="load")  # never "networkidle": the runs view polls
                page.wait_for_selector(".ag-row", timeout=90_000)
                if "compareRunsMode=CHART" in url:
                    page.wait_for_selector("g.axis text.label", timeout=90_000)
                _tidy(page)
                page.screenshot(path=str(img_dir / name))
                print(f"wrote {img_dir / name}")
        finally:
            browser.close()


def _tidy(page) -> None:
    """Close the side panel (MLflow's assistant) and the shared-view notice: not part of the study."""
    for label in ("Close", "Hide banner"):
        buttons = page.locator(f'button[aria-label="{label}"]')
        for i in range(buttons.count()):
            if buttons.nth(i).is_visible():
                buttons.nth(i).click()
    page.mouse.move(0, 0)  # no hover highlight where the banner's button was
    page.evaluate("document.activeElement && document.activeElement.blur()")  # nor a focus ring
    time.sleep(2)  # let the table and charts take the freed width


if __name__ == "__main__":
    main()
