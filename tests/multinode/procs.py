"""The processes one simulated node left on this machine, found by its environment.

Every process a node starts (raylet, Ray workers, the vLLM servers they launch and vLLM's
engine processes) inherits the node's environment, so a variable only that node has
(its ``HF_HOME``) finds them all. Removing a node kills its raylet and Ray workers; the
vLLM servers run in their own sessions (so that stopping one reaches its engine processes)
and outlive their worker, where a lost machine would have taken them down with it. The
test ends them here: by process group for a group a server leads, else by pid.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VLLM_SERVER = "vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class Proc:
    pid: int
    pgid: int
    cmdline: str


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone, or not ours to read
        return b""


def with_env(name: str, value: str) -> list[Proc]:
    """Live processes whose environment has ``name=value``."""
    want = f"{name}={value}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        if want not in _read(d / "environ").split(b"\0"):
            continue
        try:
            pgid = os.getpgid(int(d.name))
        except ProcessLookupError:
            continue
        found.append(Proc(int(d.name), pgid, _read(d / "cmdline").replace(b"\0", b" ").decode(errors="replace")))
    return found


def vllm_servers(procs: list[Proc]) -> list[Proc]:
    return [p for p in procs if VLLM_SERVER in p.cmdline]


def kill_all(procs: list[Proc]) -> None:
    """SIGKILL each vLLM server's process group (its engine processes with it), then any
    other process in ``procs``. Never this test's own process group."""
    own = os.getpgrp()
    for p in vllm_servers(procs):
        if p.pgid == p.pid and p.pgid != own:
            _kill(os.killpg, p.pgid)
    for p in procs:
        if p.pid != os.getpid():
            _kill(os.kill, p.pid)


def _kill(send: Callable[[int, int], None], target: int) -> None:
    try:
        send(target, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
