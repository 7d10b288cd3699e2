"""Where a study lives: the SQLAlchemy storage with retries on transient errors, and the
recovery of trials whose driver died (ownership, heartbeats, fail-and-requeue) through
Optuna's public API.
"""

from __future__ import annotations

from autotune.study.storages.recovery import (
    DRIVER_ATTR,
    RERUN_OF_LAUNCHED_ATTR,
    Coordinator,
    DriverId,
    beat,
    fail_and_requeue,
    owner_of,
    recover_orphans,
)
from autotune.study.storages.storage import (
    RetryingRDBStorage,
    check_sqlite_file,
    check_url,
    connect_for_reading,
    expand_url,
    is_transient,
    sqlite_path,
    storage_from_url,
    with_retries,
)

__all__ = ["Coordinator", "DRIVER_ATTR", "DriverId", "RERUN_OF_LAUNCHED_ATTR", "RetryingRDBStorage", "beat", "check_sqlite_file", "check_url", "connect_for_reading", "expand_url", "fail_and_requeue", "is_transient", "owner_of", "recover_orphans", "sqlite_path", "storage_from_url", "with_retries"]
