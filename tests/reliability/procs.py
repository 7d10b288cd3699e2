"""A process tree and the sockets it listens on, read from /proc (Linux).

Read from /proc rather than through psutil or ``ss``: the venv has no psutil of its own
(Ray vendors one), and ``ss`` is not on every CI image.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

_TCP_LISTEN = "0A"
_UDP_UNCONNECTED = "07"


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str  # the process's name as ps shows it (Ray names its workers ray::...)
    proto: str  # tcp, tcp6, udp, udp6
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        addr = ipaddress.ip_address(self.host)
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped  # ::ffff:127.0.0.1, an IPv6 socket bound to IPv4 loopback
        return addr.is_loopback

    def __str__(self) -> str:
        return f"{self.name}[{self.pid}] {self.proto} {self.host}:{self.port}"


def process_name(pid: int) -> str:
    """What ps shows: the command line's first word (Ray retitles workers ``ray::Name``)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
    except OSError:
        return "?"
    return os.path.basename(cmd.split(" ")[0]) if not cmd.startswith("ray::") else cmd.split(" ")[0]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in (...) may hold spaces
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree(root: int) -> set[int]:
    """``root`` and all its descendants now alive."""
    kids, out, todo = _children(), set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(kids.get(pid, []))
    return out


def _hex_addr(text: str) -> tuple[str, int]:
    host_hex, port_hex = text.split(":")
    raw = bytes.fromhex(host_hex)
    # /proc/net prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)), int(port_hex, 16)


def _socket_table(pid: int) -> dict[str, tuple[str, str, int]]:
    """Socket inode -> (proto, host, port) for every listening TCP and unconnected UDP socket
    in ``pid``'s network namespace."""
    out: dict[str, tuple[str, str, int]] = {}
    for proto, wanted in (("tcp", _TCP_LISTEN), ("tcp6", _TCP_LISTEN), ("udp", _UDP_UNCONNECTED),
                          ("udp6", _UDP_UNCONNECTED)):
        try:
            lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == wanted:
                host, port = _hex_addr(f[1])
                out[f[9]] = (proto, host, port)
    return out


def _links(pid: int, fds: list[str]) -> list[str]:
    out = []
    for fd in fds:
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed since the listing (listdir's own descriptor is one)
    return out


def listeners(pids: set[int]) -> list[Listener]:
    """The sockets the processes ``pids`` hold open for others to connect to."""
    found: list[Listener] = []
    tables: dict[str, dict[str, tuple[str, str, int]]] = {}
    for pid in pids:
        try:
            netns = os.readlink(f"/proc/{pid}/ns/net")
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # ended meanwhile
        table = tables.setdefault(netns, _socket_table(pid))
        for link in _links(pid, fds):
            if link.startswith("socket:["):
                inode = link[len("socket:["):-1]
                if inode in table:
                    found.append(Listener(pid, process_name(pid), *table[inode]))
    return found
