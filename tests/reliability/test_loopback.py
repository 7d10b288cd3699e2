"""Every server a study starts binds 127.0.0.1: the sockets of a running `autotune run`.

A real `autotune run` subprocess starts its own local Ray (no ``--address``), and while its
trials run the test lists, from /proc, every listening TCP and unbound-peer UDP socket of
the driver's whole process tree: the driver, the GCS, the raylet, the dashboard and
runtime-env agents, the workers. Any bind outside loopback fails the test.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import AUTOTUNE
from tests.reliability.conftest import child_env, noop_space, write_space
from tests.reliability.procs import Listener, listeners, tree


def _sockets_of_a_running_study(tmp_path) -> tuple[list[Listener], str]:
    space = write_space(tmp_path / "space.yaml", noop_space("loopback", trials=6, delay_s=1.5, workers=2))
    env = child_env()
    env.pop("RAY_ADDRESS", None)  # a local Ray of the study's own
    proc = subprocess.Popen([AUTOTUNE, "run", "--space", str(space), "--out", str(tmp_path / "run"), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    seen: dict[tuple[int, str, str, int], Listener] = {}
    try:
        deadline = time.time() + 180
        while proc.poll() is None and time.time() < deadline:
            for sock in listeners(tree(proc.pid)):
                seen[(sock.pid, sock.proto, sock.host, sock.port)] = sock
            time.sleep(0.3)
        assert proc.poll() is not None, "the study did not finish in 180 s"
    finally:
        if proc.poll() is None:
            proc.kill()
        stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, stderr[-3000:]
    return list(seen.values()), stderr


@pytest.mark.slow  # starts its own Ray (~10 s): not in the quick loop; CI runs it
def test_a_running_study_listens_on_loopback_only(tmp_path):
    socks, _ = _sockets_of_a_running_study(tmp_path)
    names = {s.name for s in socks}
    # The listing saw the servers it is meant to check: otherwise an empty list would pass.
    for server in ("gcs_server", "raylet"):
        assert server in names, f"no {server} socket seen; saw {sorted(names)}"
    assert any(n.startswith("ray::") for n in names), f"no Ray worker socket seen; saw {sorted(names)}"
    assert any(n.startswith("python") or n == "autotune" for n in names), f"no driver socket; saw {sorted(names)}"
    exposed = sorted(str(s) for s in socks if not s.loopback)
    assert not exposed, "servers bound beyond loopback:\n" + "\n".join(exposed)


def test_listener_reads_loopback_and_wildcard_binds():
    """The /proc reader itself: a socket on 127.0.0.1 is loopback, one on 0.0.0.0 is not."""
    import os
    import socket

    lo, anyaddr = socket.socket(), socket.socket()
    try:
        lo.bind(("127.0.0.1", 0))
        anyaddr.bind(("0.0.0.0", 0))
        lo.listen()
        anyaddr.listen()
        mine = {(s.host, s.port): s for s in listeners({os.getpid()})}
        assert mine[("127.0.0.1", lo.getsockname()[1])].loopback
        assert not mine[("0.0.0.0", anyaddr.getsockname()[1])].loopback
    finally:
        lo.close()
        anyaddr.close()
