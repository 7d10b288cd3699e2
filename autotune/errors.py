"""Errors that reach the user as one line, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix: the message names the field or value and how to fix it.

    The CLI prints ``error: <message>`` and exits with status 2. Raising it must leave
    everything already stored (Optuna storage, MLflow, run directory) untouched.
    """

    exit_code = 2
