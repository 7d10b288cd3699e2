"""`autotune run --progress plain|rich|none`: what a person sees, through the CLI.

Slow noop trials (3 s each, events per request) on the session's Ray cluster, so each run
has trials in flight for the progress lines to show.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import AUTOTUNE, run_cli

pytestmark = pytest.mark.slow  # servers, clusters or long simulations: not in the quick loop


def _space(tmp_path: Path, name: str) -> Path:
    data = {
        "version": 1,
        "engine": {"backend": "noop", "model": "tiny/noop", "gpu": "A100-80GB",
                   "flags": {"tensor_parallel_size": 2, "max_model_len": 4096}, "env": {"NOOP_DELAY_S": "3"}},
        "params": {"gpu_memory_utilization": {"type": "float", "low": 0.85, "high": 0.95, "step": 0.01},
                   "max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True}},
        "workload": {"num_requests": 8, "concurrency": 4},
        "study": {"name": name, "trials": 3, "sampler": "random", "strategy": {"warm_start": False}},
        "cluster": {"gpus_per_worker": 2, "workers": 2},
    }
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ends(lines: list[str], n: int) -> int:
    return next(i for i, line in enumerate(lines) if re.search(rf"\] trial {n} complete", line))


@pytest.mark.parametrize("flag", [["--progress", "plain"], []], ids=["plain", "default-off-a-terminal"])
def test_plain_lines_show_trials_in_flight(ray_cluster, tmp_path, capsys, flag):
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", "--space", str(_space(tmp_path, "cli_plain")), "--out", str(out),
                                    "--address", ray_cluster, *flag], capsys)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert "\x1b[" not in stdout  # lines for logs and pipes, no terminal control codes
    assert not re.search(r"\d\.\d{7,}", stdout), "a number printed with float noise"
    in_flight = []
    for n in range(3):
        end = _ends(lines, n)
        assert any(line.startswith(f"trial {n} started: gpu_memory_utilization=") for line in lines[:end])
        if any(re.match(rf"  trial {n}: benchmark \d of 8, OOMs 0, restarts 0", line) for line in lines[:end]):
            in_flight.append(n)
    assert in_flight, "no trial's benchmark progress was shown while it ran"
    assert lines[-2].startswith("study cli_plain: 3 complete")


@pytest.mark.parametrize("flag", [["--progress", "none"], ["--quiet"]], ids=["none", "quiet"])
def test_none_and_quiet_print_only_the_summary(ray_cluster, tmp_path, capsys, flag):
    code, stdout, stderr = run_cli(["run", "--space", str(_space(tmp_path, "cli_quiet")), "--out",
                                    str(tmp_path / "run"), "--address", ray_cluster, *flag], capsys)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("study cli_quiet: 3 complete") and lines[1].startswith("next: ")


def test_unknown_progress_mode_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, stderr = run_cli(["run", "--space", str(_space(tmp_path, "cli_bad")), "--out", str(out),
                                    "--progress", "loud"], capsys)
    assert code == 2
    assert stderr.strip().splitlines() == [
        "error: --progress loud: use rich, plain or none (default: rich on a terminal, else plain)"]
    assert not out.exists()


def test_default_on_a_terminal_is_rich(ray_cluster, tmp_path):
    """In a real pseudo-terminal the running trials are redrawn in place."""
    master, slave = pty.openpty()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "COLUMNS": "160", "TERM": "xterm"}
    p = subprocess.Popen([AUTOTUNE, "run", "--space", str(_space(tmp_path, "cli_tty")), "--out",
                          str(tmp_path / "run"), "--address", ray_cluster],
                         stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif p.poll() is not None:
                break
        assert p.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    raw = b"".join(chunks).decode(errors="replace")
    assert "\x1b[1A" in raw and "\x1b[2K" in raw  # cursor up, erase line: the live region
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    assert re.search(r"trial \d: benchmark \d of 8, OOMs 0, restarts 0", text)
    assert "study cli_tty: 3 complete" in text
