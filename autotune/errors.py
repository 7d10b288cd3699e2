"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix: the message names the field or value and how to fix it.

    The CLI prints ``error: <message>`` and exits with status 2. Raising it must leave
    everything already stored (Optuna storage, MLflow, run directory) untouched.
    """

    exit_code = 2


# How a full filesystem shows itself: the OS's errors, SQLite's (SQLITE_FULL, through
# sqlite3, SQLAlchemy, Optuna and MLflow, which keep only its text), and PostgreSQL's
# "could not extend file ...: No space left on device".
_NO_SPACE_ERRNOS = (28, 122)  # ENOSPC, EDQUOT (a quota is full)
_NO_SPACE_TEXT = ("database or disk is full", "no space left on device", "disk quota exceeded")


def no_space_error(e: BaseException) -> BaseException | None:
    """The error in ``e``'s chain (causes and contexts) that says a disk is full, or None.

    A full disk is not a transient error to retry nor a bug to show a traceback for: the
    run stops with one line, and the same command resumes once space is freed.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in _NO_SPACE_ERRNOS:
            return cur
        if any(t in str(cur).lower() for t in _NO_SPACE_TEXT):
            return cur
        todo += [x for x in (cur.__cause__, cur.__context__) if x is not None]
    return None
