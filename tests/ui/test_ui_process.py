"""`autotune ui` as a process: its output is the links (the server's log goes to a file), a
SIGKILL of it leaves no MLflow server behind, and bad --port / --host values are one line."""

from __future__ import annotations

import signal
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.study.test_ui import _store
from tests.ui.ui_process import free_port, live_processes, start_ui

pytestmark = pytest.mark.slow  # starts MLflow servers


def test_sigkill_of_autotune_ui_leaves_no_server(tmp_path: Path):
    _store(tmp_path / "run")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    ui = start_ui(tmp_path / "run", cwd, free_port())
    try:
        ui.wait_for_links()
        pgid = ui.server_pgid()
        assert live_processes(pgid)
    finally:
        ui.stop(signal.SIGKILL)
    deadline = time.monotonic() + 30  # the watchdog looks twice a second; the server stops in seconds
    while live_processes(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert live_processes(pgid) == []


def test_output_is_the_links_and_the_log_goes_to_the_run_directory(tmp_path: Path):
    _store(tmp_path / "run")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    ui = start_ui(tmp_path / "run", cwd, free_port())
    try:
        links = ui.wait_for_links()
        for url in list(links.values())[:2]:  # two page loads: the page, then its API calls
            for _ in range(2):
                with urllib.request.urlopen(url.split("#")[0], timeout=10) as r:
                    r.read()
        time.sleep(2)
    finally:
        ui.stop()
    lines = [line for line in ui.lines if line.strip()]
    assert len(lines) < 15, "".join(lines)
    assert not [line for line in lines if "GET /" in line]  # no access log on the terminal
    log = (tmp_path / "run" / "mlflow-server.log").read_text()
    assert "GET /" in log


@pytest.mark.parametrize("args, names", [
    (["--port", "99999"], "--port 99999"),
    (["--port", "0"], "--port 0"),
    (["--host", "not a host"], "--host 'not a host'"),
])
def test_bad_port_or_host_is_one_line_naming_the_option(tmp_path: Path, capsys, args: list[str], names: str):
    _store(tmp_path)
    capsys.readouterr()
    code, out, err = run_cli(["ui", "--out", str(tmp_path), *args], capsys)
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and err.startswith(f"error: {names}:"), err
    assert "Traceback" not in err + out
