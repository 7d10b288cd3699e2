"""Optuna storage: any SQLAlchemy URL, SQLite by default, PostgreSQL for clusters.

A database restart or a dropped connection must not end a study that has run for days,
so every storage call retries transient errors (see ``RetryingRDBStorage``). Optuna
turns SQLAlchemy errors raised inside its sessions into ``StorageInternalError``; the
original error is kept as the cause, which is what ``is_transient`` looks at.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy.exc
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from autotune.errors import UserError, no_space_error
from autotune.security import mask_url

log = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT_SQLA = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, sqlalchemy.exc.DisconnectionError)
# How long one storage call keeps retrying: a PostgreSQL restart takes seconds, a managed
# database failover up to a minute or so.
RETRY_BUDGET_S = 90.0


def _transient_types() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = list(_TRANSIENT_SQLA)
    try:  # the PostgreSQL driver's own connection errors, when it is installed
        import psycopg

        types += [psycopg.OperationalError, psycopg.InterfaceError]
    except ImportError:
        pass
    return tuple(types)


_TRANSIENT = _transient_types()


def is_transient(e: BaseException) -> bool:
    """A lost connection or a database that is briefly away, possibly wrapped by Optuna."""
    if no_space_error(e) is not None:
        return False  # a full disk (SQLite reports it as an OperationalError): retrying cannot help
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, _TRANSIENT):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _backoff(attempt: int) -> float:
    return min(0.5 * 2**attempt, 15.0)


_nesting = threading.local()


def _retrying(fn: Callable[..., T], what: str, budget_s: float) -> Callable[..., T]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        if getattr(_nesting, "depth", 0):  # a storage method calling another: the outer one retries
            return fn(*args, **kwargs)
        start = time.monotonic()
        attempt = 0
        while True:
            _nesting.depth = 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if not is_transient(e) or time.monotonic() - start > budget_s:
                    raise
                delay = _backoff(attempt)
                log.warning("storage error in %s (%s); retrying in %.1fs", what, type(e).__name__, delay)
            finally:
                _nesting.depth = 0
            time.sleep(delay)
            attempt += 1

    return call


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """An ``RDBStorage`` whose every call survives a database restart.

    Each method retries transient errors (connection refused, connection reset,
    server shutting down) for up to ``RETRY_BUDGET_S``; pooled connections the restart
    killed are replaced by ``pool_pre_ping``. Retrying is safe because Optuna rolls back
    a failed session: the call either committed or did nothing. The one ambiguity, a
    commit whose acknowledgement was lost, is handled where it matters: finishing a trial
    twice is accepted when the stored state is the one asked for.
    """

    retry_budget_s: float = RETRY_BUDGET_S

    def __getattribute__(self, name: str) -> Any:
        attr = object.__getattribute__(self, name)
        if name in _RETRIED:
            return _retrying(attr, name, object.__getattribute__(self, "retry_budget_s"))
        return attr

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        tries = [0]

        def once() -> bool:
            tries[0] += 1
            try:
                return super(RetryingRDBStorage, self).set_trial_state_values(trial_id, state, values)
            except UpdateFinishedTrialError:
                # On a retry, the first attempt may have committed before the link dropped.
                if tries[0] > 1 and state.is_finished() and self.get_trial(trial_id).state == state:
                    return True
                raise

        return _retrying(once, "set_trial_state_values", self.retry_budget_s)()


# Every method an RDBStorage has (set_trial_state_values retries itself above), found by
# introspection rather than listed: Optuna's cache layer calls some of its backend's
# non-public methods directly, and a method added or renamed in a release is covered without
# autotune naming it. Helpers that never touch the database cannot raise a transient error,
# and a method called inside another is retried only by the outermost (``_nesting``).
_RETRIED = frozenset(
    name
    for name in dir(optuna.storages.RDBStorage)
    if not name.startswith("__") and callable(getattr(optuna.storages.RDBStorage, name))
) - {"set_trial_state_values"}


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        # One writer (the driver); a generous timeout rides out readers like `autotune status`.
        return {"connect_args": {"timeout": 60}}
    # pool_pre_ping replaces connections a database restart has killed.
    return {"pool_pre_ping": True, "pool_recycle": 300}


def check_url(url: str) -> None:
    """Fail with one line, before anything is written, if ``url`` cannot be a storage.

    Checks the URL's syntax and that its database driver is installed; reaching the
    server is left to ``storage_from_url``.
    """
    from sqlalchemy.engine import make_url

    try:
        u = make_url(url)
    except Exception:
        raise UserError(f"storage URL {mask_url(url)!r} is not a SQLAlchemy URL; e.g. sqlite:///runs/x/optuna.db") from None
    try:
        u.get_dialect().import_dbapi()
    except (ImportError, sqlalchemy.exc.NoSuchModuleError, sqlalchemy.exc.ArgumentError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"storage URL {mask_url(url)!r}: database driver {u.drivername!r} not available ({first}); "
            "use sqlite:/// or postgresql+psycopg://"
        ) from None


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:///") or url in ("sqlite:///", "sqlite:///:memory:"):
        return None
    return Path(url.removeprefix("sqlite:///").split("?", 1)[0])


def connect_for_reading(db: Path) -> sqlite3.Connection:
    """A connection that reads ``db`` without creating it or its schema.

    Read-only first. A driver killed mid-write leaves a hot rollback journal that a read-only
    connection cannot roll back (SQLITE_READONLY_ROLLBACK), and would call a crashed study
    "not created yet"; SQLite's own recovery then needs a read-write connection, which rolls
    the journal back on its first read (a journal is only hot when no live process holds it).
    """
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return con
    except sqlite3.OperationalError as e:
        con.close()
        if getattr(e, "sqlite_errorname", "") != "SQLITE_READONLY_ROLLBACK":
            raise
    return sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=5)


def check_sqlite_file(db: Path) -> None:
    """Refuse, with one line, an existing file that is not a readable SQLite/Optuna database
    (corrupted, truncated, some other file).

    Opening it with Optuna would fail deep inside, with a traceback. Read-only, so the file
    is never changed; a database another process holds locked or is still creating (tables
    not all there yet) is not judged here.
    """
    try:
        if not db.is_file() or db.stat().st_size == 0:
            return
        con = connect_for_reading(db)
    except (OSError, sqlite3.OperationalError):
        return  # unreadable paths, locked or busy: reported by whoever opens them
    except sqlite3.DatabaseError as e:  # "file is not a database" shows on the first read
        raise _not_optuna_db(db, str(e)) from None
    except sqlite3.Error:
        return  # unreadable paths are reported by whoever opens them
    try:
        ok = con.execute("PRAGMA quick_check").fetchone()
    except sqlite3.OperationalError:
        return  # locked or busy: a live driver's database
    except sqlite3.DatabaseError as e:  # "file is not a database", "database disk image is malformed"
        raise _not_optuna_db(db, str(e)) from None
    finally:
        con.close()
    if not ok or ok[0] != "ok":
        raise _not_optuna_db(db, "its integrity check fails")


def _not_optuna_db(db: Path, reason: str) -> UserError:
    return UserError(f"{db}: not a readable SQLite/Optuna database ({reason}); move it aside (or restore it from "
                     "a backup) and run again; nothing was written to it")


def storage_from_url(url: str, retries: int = 5) -> optuna.storages.RDBStorage:
    """Open (and on first use, create) an Optuna RDB storage; one line on failure."""
    check_url(url)
    if (db := sqlite_path(url)) is not None:
        check_sqlite_file(db)
    last: Exception | None = None
    for attempt in range(retries):
        try:
            return RetryingRDBStorage(url, engine_kwargs=_engine_kwargs(url))
        except (ModuleNotFoundError, ImportError, sqlalchemy.exc.NoSuchModuleError, sqlalchemy.exc.ArgumentError) as e:
            raise UserError(
                f"storage URL {mask_url(url)!r}: database driver not available ({e}); "
                "use sqlite:/// or postgresql+psycopg://"
            ) from None
        except Exception as e:
            if not is_transient(e):
                raise
            last = e
            if attempt < retries - 1:
                time.sleep(min(2**attempt, 10))
    reason = str(getattr(last, "orig", None) or last).strip().splitlines()
    detail = f"{type(last).__name__}: {mask_url(reason[0])}" if reason else type(last).__name__
    raise UserError(f"storage {mask_url(url)!r} unreachable after {retries} tries ({detail})")


def with_retries(fn: Callable[[], T], what: str, retries: int = 8) -> T:
    """Run a storage operation, retrying transient database errors (a restart, a dropped link).

    Only operations that are safe to repeat go through here; Optuna's tell is, with
    ``skip_if_finished``. Storages from ``storage_from_url`` already retry each call; this
    outer loop covers multi-call operations (ask) and storages opened elsewhere.
    """
    for attempt in range(retries):
        try:
            return fn()
        except Exception as e:
            if not is_transient(e) or attempt == retries - 1:
                raise
            delay = _backoff(attempt)
            log.warning("storage error during %s (%s); retrying in %.1fs", what, type(e).__name__, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def expand_url(url: str, field_name: str = "study.storage") -> str:
    """Expand ``${VAR}`` in a URL so passwords live in the environment, not in files."""
    expanded = os.path.expandvars(url)
    missing = _VAR.findall(expanded)
    if missing:
        raise UserError(f"{field_name}: environment variable {missing[0]} is not set; export it or write the URL out")
    return expanded
