"""Optuna storage: any SQLAlchemy URL, SQLite by default, PostgreSQL for clusters."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import optuna
import sqlalchemy.exc

from autotune.errors import UserError
from autotune.security import mask_url

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, sqlalchemy.exc.DisconnectionError)


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        # One writer (the driver); a generous timeout rides out readers like `autotune status`.
        return {"connect_args": {"timeout": 60}}
    # pool_pre_ping replaces connections a database restart has killed.
    return {"pool_pre_ping": True, "pool_recycle": 300}


def open_storage(url: str, retries: int = 5) -> optuna.storages.RDBStorage:
    """Open (and on first use, create) an Optuna RDB storage; one line on failure."""
    try:
        from sqlalchemy.engine import make_url

        make_url(url)
    except Exception:
        raise UserError(f"storage URL {mask_url(url)!r} is not a SQLAlchemy URL; e.g. sqlite:///runs/x/optuna.db") from None
    last: Exception | None = None
    for attempt in range(retries):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except (ModuleNotFoundError, ImportError, sqlalchemy.exc.NoSuchModuleError, sqlalchemy.exc.ArgumentError) as e:
            raise UserError(
                f"storage URL {mask_url(url)!r}: database driver not available ({e}); "
                "use sqlite:/// or postgresql+psycopg://"
            ) from None
        except _TRANSIENT as e:
            last = e
            time.sleep(min(2**attempt, 10))
    raise UserError(f"storage {mask_url(url)!r} unreachable after {retries} tries: {type(last).__name__}")


def with_retries(fn: Callable[[], T], what: str, retries: int = 8) -> T:
    """Run a storage operation, retrying transient database errors (a restart, a dropped link).

    Only operations that are safe to repeat go through here; Optuna's tell is, with
    ``skip_if_finished``.
    """
    for attempt in range(retries):
        try:
            return fn()
        except _TRANSIENT as e:
            if attempt == retries - 1:
                raise
            delay = min(0.5 * 2**attempt, 15)
            log.warning("storage error during %s (%s); retrying in %.1fs", what, type(e).__name__, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def expand_url(url: str, field_name: str = "study.storage") -> str:
    """Expand ``${VAR}`` in a URL so passwords live in the environment, not in files."""
    import os
    import re

    expanded = os.path.expandvars(url)
    missing = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", expanded)
    if missing:
        raise UserError(f"{field_name}: environment variable {missing[0]} is not set; export it or write the URL out")
    return expanded
