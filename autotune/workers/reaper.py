"""Stops a local Ray when the driver that started it dies, however it dies.

A driver that ends normally (or on SIGTERM, service.py) shuts its Ray down itself. One
SIGKILLed (or OOM-killed) cannot: Ray's GCS and raylet die with it (Ray starts them with a
parent-death signal), but the raylet's dashboard and runtime-env agents, and for a few
seconds the workers, live on, the agents for a minute or more (measured on Ray 2.60: they
notice the raylet's death late, then wait on the dead GCS). This small process, started by
the driver right after ``ray.init``, waits for the driver's end (its stdin, a pipe only the
driver holds, reaches EOF) and then kills every process of that Ray: the ones the driver
started and every one they started, noted every second while the driver lived (by pid and
start time, so a reused pid is never hit), and any other carrying their raylet's pid in
``RAY_RAYLET_PID``. Linux only (/proc).

Run as ``python -m autotune.workers.reaper PID:START ...``; it imports nothing of autotune.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_S = 3.0  # SIGTERM first, SIGKILL what is left after this
WATCH_EVERY_S = 1.0  # how often the driver's Ray processes are listed while it lives


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def children(pid: int, running_from: str) -> list[int]:
    """``pid``'s child processes whose command line runs something under ``running_from``
    (Ray's package directory: its binaries and its Python daemons), so that another child
    of the same process (a test's server, say) is never taken for Ray's."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) != pid:
                    continue
                if running_from.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
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


def _descendants(roots: set[int]) -> dict[int, str]:
    """Every live descendant of ``roots``, with its start time."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                kids.setdefault(int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]),
                                []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out: dict[int, str] = {}
    todo = [k for r in roots for k in kids.get(r, [])]
    while todo:
        pid = todo.pop()
        if pid not in out and (t := start_time(pid)) is not None:
            out[pid] = t
            todo.extend(kids.get(pid, []))
    return out


def _raylet_children(raylets: set[str]) -> set[int]:
    """Processes whose environment names one of ``raylets`` as their raylet (RAY_RAYLET_PID)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(b"RAY_RAYLET_PID=") and v[len(b"RAY_RAYLET_PID="):].decode() in raylets for v in env):
            found.add(int(entry))
    return found


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str]) -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # only the driver's end ends this
    marks = {int(p): t for p, _, t in (a.partition(":") for a in argv)}
    # While the driver lives, note what its Ray processes start (agents, workers), with start
    # times: once the raylet is dead its children belong to init and no tree leads to them.
    # Their RAY_RAYLET_PID is a second way to find them (not always readable: Ray retitles
    # its processes, which can overwrite the environment /proc shows).
    known = dict(marks)
    while True:
        if select.select([sys.stdin.buffer], [], [], WATCH_EVERY_S)[0] and not os.read(sys.stdin.fileno(), 4096):
            break  # EOF: the driver is gone (or closed the pipe on its way out)
        known.update(_descendants({p for p, t in marks.items() if start_time(p) == t}))
    known.update(_descendants({p for p, t in marks.items() if start_time(p) == t}))
    targets = {p for p, t in known.items() if start_time(p) == t} | _raylet_children({str(p) for p in marks})
    targets.discard(os.getpid())
    _signal(targets, signal.SIGTERM)
    deadline = time.time() + GRACE_S
    while time.time() < deadline and any(start_time(p) for p in targets):
        time.sleep(0.1)
    _signal({p for p in targets if start_time(p)}, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
