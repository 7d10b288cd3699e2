"""Stops a local Ray when the driver that started it dies, however it dies.

A driver that ends normally (or on SIGTERM, service.py) shuts its Ray down itself. One
SIGKILLed (or OOM-killed) cannot: Ray's GCS and raylet die with it (Ray starts them with a
parent-death signal), but the raylet's dashboard and runtime-env agents, and for a few
seconds the workers, live on, the agents for a minute or more (measured on Ray 2.60: they
notice the raylet's death late, then wait on the dead GCS). This small process, started by
the driver right after ``ray.init``, waits for the driver's end (its stdin, a pipe only the
driver holds, reaches EOF) and then kills every process of that Ray: the ones the driver
started (given by pid and start time, so a reused pid is never hit) and every process the
raylet started (they carry ``RAY_RAYLET_PID`` in their environment). Linux only (/proc).

Run as ``python -m autotune.workers.reaper PID:START ...``; it imports nothing of autotune.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 3.0  # SIGTERM first, SIGKILL what is left after this


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def start(driver_children: list[int]) -> subprocess.Popen[bytes] | None:
    """Start the reaper for the Ray the calling driver just started (its child processes now).
    Keep the returned process referenced; its stdin closes when the driver ends."""
    if not sys.platform.startswith("linux"):
        return None
    marks = [f"{pid}:{t}" for pid in driver_children if (t := start_time(pid)) is not None]
    if not marks:
        return None
    # Its own session: a Ctrl-C or a kill of the driver's process group must not take it first.
    return subprocess.Popen([sys.executable, "-m", "autotune.workers.reaper", *marks], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _ray_processes(marks: list[tuple[int, str]]) -> set[int]:
    """The driver's Ray processes still alive, and everything any raylet of them started."""
    alive = {pid for pid, t in marks if start_time(pid) == t}
    raylets = {str(pid) for pid, _ in marks}  # dead ones too: their orphans still name them
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(b"RAY_RAYLET_PID=") and var[len(b"RAY_RAYLET_PID="):].decode() in raylets:
                alive.add(int(entry))
                break
    return alive


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str]) -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # only the driver's end ends this
    marks = [(int(p), t) for p, _, t in (a.partition(":") for a in argv)]
    while sys.stdin.buffer.read(4096):
        pass  # EOF: the driver is gone (or closed the pipe on its way out)
    targets = _ray_processes(marks)
    _signal(targets, signal.SIGTERM)
    deadline = time.time() + GRACE_S
    while time.time() < deadline and any(start_time(p) for p in targets):
        time.sleep(0.1)
    _signal({p for p in targets if start_time(p)}, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
