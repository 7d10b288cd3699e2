"""Keeping secrets out of logs, MLflow and exported files.

Secrets reach autotune in two ways: env vars for the server (an HF token) and database
URLs (a password). Everything that leaves the process goes through these maskers.

Input files (the search space, traces) come from wherever a user points: ``open_input``
reads only regular files on disk, with a size cap, and ``one_line`` is the last step of
every error message.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

MASK = "***"
# A name is split into parts on "_", "-" and "." and matched part by part, never by substring:
# `max_num_batched_tokens` and TOKENIZERS_PARALLELISM are settings, HF_TOKEN is a secret.
_NAME_PARTS = re.compile(r"[_\-.]+")
# Words that make any name a secret wherever they stand (AWS_SECRET_ACCESS_KEY, DB_PASSWORD_FILE),
# also at the end of a part (PGPASSWORD, libpq's own variable): no setting ends in them.
_SECRET_ANYWHERE = ("SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS")
# Words that make a name a secret when they say what it is, i.e. stand last (HF_TOKEN, HF_AUTH,
# MY_API_KEY, --api-key); elsewhere they qualify a setting (long_prefill_token_threshold, SSH_AUTH_SOCK).
_SECRET_LAST = frozenset({"TOKEN", "KEY", "APIKEY", "AUTH"})
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")


def is_secret_name(name: str) -> bool:
    """Whether an env var, flag or config key names a credential (``--hf-token``, ``HF_AUTH``)."""
    parts = [p.upper() for p in _NAME_PARTS.split(name) if p]
    if not parts:
        return False
    return parts[-1] in _SECRET_LAST or any(p.endswith(_SECRET_ANYWHERE) for p in parts)


_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def mask_url(url: str) -> str:
    """``postgresql://u:pw@h/db`` -> ``postgresql://u:***@h/db``.

    A ``${VAR}`` reference is kept: it names where the password lives without revealing it,
    and the saved space needs it to reopen the storage (`autotune status`/`export`).
    """

    def sub(m: re.Match[str]) -> str:
        if _ENV_REF.fullmatch(m["pw"]):
            return m[0]
        return f"{m['scheme']}{m['user']}:{MASK}@"

    return _URL_PASSWORD.sub(sub, url)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` safe to log: secret names' values masked, passwords in URL values masked."""
    return {k: (MASK if is_secret_name(k) else mask_url(v)) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` safe to log: the value of a secret option (``--api-key X``, ``--hf-token=X``)
    masked, and a password inside any argument that holds a URL."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, eq, _ = arg.partition("=")
        secret = arg.startswith("-") and is_secret_name(name.lstrip("-"))
        if secret and eq:
            out.append(f"{name}={MASK}")
        else:
            out.append(mask_url(arg))
            mask_next = secret
    return out


def secret_values(env: Mapping[str, str], urls: Sequence[str | None] = ()) -> list[str]:
    """The literal secret strings, so free text (logs, failure reasons) can be scrubbed."""
    out = [v for k, v in env.items() if is_secret_name(k) and v]
    for url in urls:
        if url and (m := _URL_PASSWORD.search(url)):
            out.append(m["pw"])
    return [s for s in out if len(s) >= 4]


def scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, MASK)
    return mask_url(text)


# --- Messages and input files from untrusted places ---------------------------------------
# Every error line the user sees passes through ``one_line``: secrets masked by the rules
# above (the process's own secret env values too: a hostile path can make a parser quote
# /proc/self/environ), control characters escaped (no terminal escapes, no second line),
# and a length cap (a 50 MB token must not become a 50 MB line).
MAX_MESSAGE_CHARS = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` safe to print as one line of an error message."""
    text = scrub(text, secret_values(os.environ))
    text = _CONTROL.sub(lambda m: "\\t" if m[0] == "\t" else f"\\x{ord(m[0]):02x}", text)
    if len(text) > limit:
        text = text[: limit - 5] + "[...]"
    return text


class NotRegularFile(ValueError):
    """An input path that is not a plain file on a disk: a device, FIFO, socket or /proc file."""


# Kernel pseudo-filesystems: their "regular files" are views of process state (environ,
# memory maps), never input autotune should read.
_PSEUDO_ROOTS = ("proc", "sys")


def open_input(path: Path, max_bytes: int) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file of at most ``max_bytes``.

    Raises FileNotFoundError, PermissionError, IsADirectoryError or another OSError as
    ``open`` would, and ``NotRegularFile`` for /dev/zero, a FIFO, a socket, /proc and
    /sys files, or a file over the cap. ``O_NONBLOCK`` keeps a FIFO from blocking the open;
    the check is on the opened descriptor, so the file cannot be swapped after it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile("not a regular file (a device, FIFO or socket); give a file on disk")
        parts = Path(_opened_path(fd, path)).parts
        if len(parts) > 1 and parts[1] in _PSEUDO_ROOTS:
            raise NotRegularFile(f"a /{parts[1]} file, not a regular file; give a file on disk")
        if st.st_size > max_bytes:
            raise NotRegularFile(f"larger than the {max_bytes >> 20} MiB limit for this input")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _opened_path(fd: int, path: Path) -> str:
    """Where the descriptor really points (symlinks resolved), from the kernel where it can say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def read_input(path: Path, max_bytes: int) -> bytes:
    """The whole of a small input file (``open_input``'s checks; at most ``max_bytes``,
    even if the file grows while it is read)."""
    with open_input(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotRegularFile(f"larger than the {max_bytes >> 20} MiB limit for this input")
    return data
