"""Connecting to Ray: an existing cluster at ``--address``, or a local one we start.

A local Ray is a private one: every server it starts (GCS, raylet, object manager, the
workers' and the driver's gRPC ports, the dashboard agent, the runtime-env agent, the
metrics exporters) binds 127.0.0.1. Reaching it from another machine is not a use case;
a cluster that other machines join is started with ``ray start`` and joined with
``--address`` (docs/reliability.md, "Servers").
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import ray
import ray._private.services as ray_services

from autotune.errors import UserError
from autotune.workers import reaper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    started_here: bool
    cpus: float
    gpus: float


PROBE_TIMEOUT_S = 5.0
LOOPBACK = "127.0.0.1"


def probe_address(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast with one line if nothing listens at a Ray address.

    ``ray.init(address=...)`` against a dead address retries for many minutes before it
    gives up, which to a user looks like a hang.
    """
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port_s = hostport.rpartition(":")
    if not sep or not host or not port_s.isdigit():
        raise UserError(f"--address {address}: expected HOST:PORT of a Ray head (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host.strip("[]"), int(port_s)), timeout=timeout):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise UserError(f"--address {address}: cannot connect to Ray ({reason}); check 'ray status' there") from None


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Keep Ray's C++ client from printing a retry line per second on file descriptor 2.

    Against something that listens but is not a Ray head it logs for ~20 s before the
    Python error we turn into one line; the user should see only that line.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextmanager
def _loopback_node() -> Iterator[None]:
    """Let ``ray.init(_node_ip_address="127.0.0.1")`` keep the loopback address.

    Ray 2.60 binds its servers to 127.0.0.1 only when the node's address is literally
    127.0.0.1, and otherwise on every interface; but ``ray.init`` (and ``ray start
    --node-ip-address``) first replaces a loopback address with the machine's routable one
    (``services.resolve_ip_for_localhost``), and no option or environment variable skips
    that. For the length of ``ray.init`` the address is kept as given; the processes it
    starts get ``--node-ip-address=127.0.0.1`` and pass it on to every worker.
    ``tests/reliability/test_loopback.py`` lists the sockets a study listens on, so a Ray
    that changes this shows up there.
    """
    original = getattr(ray_services, "resolve_ip_for_localhost", None)
    if original is None:  # a Ray without the hook: the loopback test says what it binds
        yield
        return
    ray_services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        ray_services.resolve_ip_for_localhost = original


def connect(address: str | None, logical_gpus: int | None = None, num_cpus: int | None = None) -> ClusterInfo:
    """Join ``address`` or start a local Ray; reuse a connection this process already has.

    Without ``address``, the cluster in ``RAY_ADDRESS`` is joined: Ray sets it for a job's
    entrypoint (`ray job submit -- autotune run ...`), whose study belongs on the cluster it
    was submitted to. ``RAY_ADDRESS=local`` means a local Ray, as for ``ray.init``.

    ``logical_gpus`` declares GPUs on a local cluster that has none, which is how the
    simulator exercises the same GPU placement paths on a CPU-only machine.
    """
    env_address = os.environ.get("RAY_ADDRESS", "")
    address = address or (env_address if env_address != "local" else None)
    started = False
    if not ray.is_initialized():
        kwargs: dict = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": False}
        try:
            if address:
                probe_address(address)
                with _native_stderr_silenced():
                    ray.init(address=address, **kwargs)
            else:
                # "local": without it ray.init joins any cluster someone started on this machine.
                with _loopback_node():
                    ray.init(address="local", num_gpus=logical_gpus,
                             num_cpus=num_cpus or max(os.cpu_count() or 1, 2), _node_ip_address=LOOPBACK, **kwargs)
                started = True
                global _reaper
                _reaper = reaper.start(reaper.children(os.getpid(), os.path.dirname(ray.__file__)))
        except (ConnectionError, TimeoutError, ValueError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"--address {address}: cannot connect to Ray ({first}); check 'ray status' there") from None
    res = ray.cluster_resources()
    return ClusterInfo(
        address=ray.get_runtime_context().gcs_address,
        started_here=started,
        cpus=float(res.get("CPU", 0)),
        gpus=float(res.get("GPU", 0)),
    )


def plan_workers(requested: int | None, gpus_per_worker: int, cpus_per_worker: float, info: ClusterInfo) -> int:
    """How many workers the cluster can hold; more than it can is an error, not a hang."""
    if gpus_per_worker > 0:
        available = int(info.gpus // gpus_per_worker)
        unit = f"groups of {gpus_per_worker} GPUs (cluster has {info.gpus:g} GPUs)"
    else:
        available = int(info.cpus // cpus_per_worker)
        unit = f"CPU slots of {cpus_per_worker:g} (cluster has {info.cpus:g} CPUs)"
    if available < 1:
        raise UserError(f"cluster.gpus_per_worker={gpus_per_worker}: the Ray cluster has no {unit}")
    if requested is None:
        return available
    if requested > available:
        raise UserError(f"--workers {requested}: the Ray cluster only has {available} {unit}; lower --workers")
    return requested


# The reaper of the local Ray this process started (workers/reaper.py), kept so that its
# stdin, the pipe it watches, stays open while the driver lives.
_reaper: subprocess.Popen[bytes] | None = None


def disconnect(info: ClusterInfo) -> None:
    """Shut down a Ray this process started, then let its reaper go (it finds nothing left)."""
    global _reaper
    if info.started_here and ray.is_initialized():
        ray.shutdown()
    if info.started_here and _reaper is not None:
        assert _reaper.stdin is not None
        _reaper.stdin.close()
        try:
            _reaper.wait(timeout=reaper.GRACE_S + 5)
        except subprocess.TimeoutExpired:
            _reaper.kill()
        _reaper = None
