"""Files written whole or not at all: a reader (status, export, a deployment) never sees half of one."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, text: str) -> str:
    """Write ``text`` to ``path`` through a temporary file: never a half-written config, and
    on any failure (a read-only directory, ``path`` a directory, a full disk) no temporary
    file left behind and ``path`` as it was. Raises the OSError."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a directory of the path should be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent)) from None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would surprise whoever deploys the file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return text
