"""`autotune status` on a run directory whose driver is still creating its SQLite storage.

Opening the half-made DB with Optuna would run Optuna's schema setup against the driver's
own; status must instead say there is no study yet (one line, exit 2) and change nothing.
"""

from __future__ import annotations

import sqlite3

from tests.conftest import run_cli


def test_status_while_the_db_is_being_created_is_one_line_and_touches_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "space.yaml").write_text("version: 1\n")
    db = run / "optuna.db"
    con = sqlite3.connect(db)  # the driver's first moments: a DB with no tables yet
    con.execute("CREATE TABLE half_made (x INTEGER)")
    con.commit()
    con.close()
    before = db.read_bytes()
    code, out, err = run_cli(["status", "--out", str(run)], capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no study yet" in lines[0] and "Traceback" not in err
    assert db.read_bytes() == before  # Optuna never touched it
