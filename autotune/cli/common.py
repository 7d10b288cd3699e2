"""Helpers shared by the commands: locating a run directory and its study."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna

from autotune.errors import UserError
from autotune.rundir import RunDir
from autotune.space.loader import read_yaml
from autotune.study.storages import (
    check_sqlite_file,
    connect_for_reading,
    expand_url,
    sqlite_path,
    storage_from_url,
)


def find_run_dir(out: Path | None) -> RunDir:
    if out is not None:
        return RunDir(out).require_existing()
    runs = Path("runs")
    found = sorted(p for p in runs.iterdir() if (p / "space.yaml").exists()) if runs.is_dir() else []
    if len(found) == 1:
        return RunDir(found[0])
    if not found:
        raise UserError("no run directory under ./runs; pass --out DIR of an 'autotune run'")
    raise UserError(f"several run directories under ./runs ({', '.join(p.name for p in found)}); pass --out DIR")


def saved_space(run_dir: RunDir) -> dict:
    """The run directory's copy of the space, as data ({} before a run has written it); a
    damaged copy is one line, as a damaged --space is."""
    if not run_dir.space_copy.exists():
        return {}
    data = read_yaml(run_dir.space_copy)
    return data if isinstance(data, dict) else {}


def sqlite_study_ready(db: Path) -> bool:
    """Whether a driver has finished creating the Optuna SQLite DB ``db`` (tables and a study).

    Opening it with Optuna before then would run Optuna's schema setup against the driver's
    own, and one of them fails (alembic_version UNIQUE); so look read-only first.
    """
    if not db.exists():
        return False
    try:
        con = connect_for_reading(db)
        try:
            return con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] > 0 and bool(
                con.execute("SELECT count(*) FROM studies").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return False


def open_study(run_dir: RunDir, study: str | None, storage: str | None) -> optuna.Study:
    saved = saved_space(run_dir)
    url = storage or (saved.get("study") or {}).get("storage") or run_dir.optuna_url
    if "***" in url:
        raise UserError("the study's storage URL holds a masked password; pass --storage URL (or use ${VAR} in the space)")
    url = expand_url(url, "--storage")
    if (db := sqlite_path(url)) is not None:
        check_sqlite_file(db)  # a corrupted file is not "a study still being created"
    if db is not None and not sqlite_study_ready(db):
        raise UserError(f"{run_dir.root}: the storage holds no study yet (a run may still be creating it); "
                        "try again in a moment")
    st = storage_from_url(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)]
    name = study or (saved.get("study") or {}).get("name")
    if name is None:
        if len(names) == 1:
            name = names[0]
        elif not names:
            raise UserError(f"{run_dir.root}: the storage holds no study yet")
        else:
            raise UserError(f"the storage holds several studies ({', '.join(names)}); pass --study NAME")
    if name not in names:
        raise UserError(f"--study {name}: no such study in the storage (have: {', '.join(names) or 'none'})")
    return optuna.load_study(study_name=name, storage=st)
