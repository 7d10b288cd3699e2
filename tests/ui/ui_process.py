"""`autotune ui` as a user runs it: a subprocess whose printed links the tests follow."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import AUTOTUNE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class UiProcess:
    """A running `autotune ui`; its output (the MLflow server's included) is read as it comes."""

    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    _q: queue.Queue = field(default_factory=queue.Queue)

    def wait_for_links(self, timeout_s: float = 180.0) -> dict[str, str]:
        """label -> URL, once `autotune ui` printed them (it does when the server answers)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line is None:
                break
            self.lines.append(line)
            if line.startswith("MLflow UI:"):
                return self._links_after()
        raise AssertionError("autotune ui printed no links:\n" + "".join(self.lines))

    def _links_after(self) -> dict[str, str]:
        out: dict[str, str] = {}
        while True:  # the links follow the "MLflow UI:" line at once
            try:
                label = self._q.get(timeout=10)
                url = self._q.get(timeout=10)
            except queue.Empty:
                return out
            if label is None or url is None or not url.strip().startswith("http"):
                return out
            self.lines += [label, url]
            out[label.strip().rstrip(":")] = url.strip()

    def server_pgid(self) -> int:
        """The MLflow server's process group: its own session, started by `autotune ui`."""
        ps = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        (child,) = [int(p) for p in ps.stdout.split()]
        return os.getpgid(child)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)


def start_ui(out: Path, cwd: Path, port: int) -> UiProcess:
    proc = subprocess.Popen([AUTOTUNE, "ui", "--out", str(out), "--port", str(port)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ui = UiProcess(proc)
    threading.Thread(target=_drain, args=(proc, ui._q), daemon=True).start()
    return ui


def live_processes(pgid: int) -> list[str]:
    """Processes of a process group that are not zombies (a zombie has exited)."""
    ps = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True)
    rows = [line.split(None, 3) for line in ps.stdout.splitlines()]
    return [" ".join(r) for r in rows if len(r) >= 3 and r[1] == str(pgid) and not r[2].startswith("Z")]


def _drain(proc: subprocess.Popen, q: queue.Queue) -> None:
    # Read to the end: a pipe nobody reads fills up and blocks the server's access log.
    assert proc.stdout is not None
    for line in proc.stdout:
        q.put(line)
    q.put(None)
