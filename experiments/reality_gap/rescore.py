"""Score committed rows against the refined best too (refine.py), without running them again. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.rescore experiments/reality_gap/results/structural/runs.jsonl [...]

Rows written before refine.py existed were scored against the grid's best only. Their export
and its true value are in the row (``exported_flags``), and the truth is a pure function of its
seed, so ``true_best_space``, ``true_best_space_flags``, ``regret_space`` and ``within_2pct_space``
follow from the row alone: this adds them (the refined best is computed once per truth and
cached, as in a run). A row that carries its ``export_timeline`` (rows run since 2026-12-05) also
gets the GPU-hour figures and the regret curve against the refined best (``refine.HOUR_KEYS``);
an older row keeps them against the grid's best only, since its timeline was not written. Every
other key is kept as it was. The file is replaced whole, never half-written. Rows of the replayed
CPU tables are left alone: their best is the table's, which has no grid.

A row written before the timeline existed gets it from a rerun of the same case (``--timelines-from
RERUN``: the bench's rows for the same cases, run with today's code into another file). The
rerun must agree with the row on every other key (``runtime_s`` aside, ``regret_auc`` to 1e-12: its
curve is now summed by changes), or nothing is written: a rerun that exports otherwise is another
study, not the same one with its timeline.

A row timed by an earlier export-timeline rule (no ``timeline_rule``, or another than
``score.TIMELINE_RULE``) is timed again from a rerun with ``--retime-from RERUN``: the timeline,
``timeline_rule`` and every GPU-hour figure and regret AUC read from it (:data:`RETIMED_KEYS`) are
replaced, on the same condition: the rerun agrees on every other key (the export above all), since
such a rule changes when a pick is made, not what the study does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.reality_gap import refine, score
from experiments.reality_gap.truth import Truth

SPACE_KEYS = ("true_best_space", "true_best_space_flags", "regret_space", "within_2pct_space")


def rescored(row: dict[str, Any], truths: dict[tuple, tuple[Truth, dict[str, Any]]], jobs: int) -> dict[str, Any]:
    """``row`` with the refined-best keys; unchanged if it has them, if it is a replayed CPU table's
    (``table``), or if it predates truth families (no ``truth_family``: issue 12's constants truths,
    which have no committed refinements and are not part of issue 18's figures)."""
    wanted = SPACE_KEYS + (refine.HOUR_KEYS if "export_timeline" in row else ())
    if all(k in row for k in wanted) or "truth_family" not in row or row.get("table"):
        return row
    key = (row["scenario"], row["truth_seed"], row["truth_family"])
    if key not in truths:  # each truth is loaded, and its refinement read (or computed), once per file
        truth = Truth.load(row["scenario"], row["truth_seed"], jobs=jobs, family=row["truth_family"])
        truths[key] = truth, refine.space_best(truth, jobs, log=lambda m: print(m, file=sys.stderr))
    truth, best = truths[key]
    out = {**row, **refine.scores(truth, row.get("exported_flags"), best=best)}
    if "export_timeline" in row:
        out.update(refine.hour_scores(truth, row["export_timeline"], row["budget_gpu_hours"], best=best))
    return out


def rescore_file(path: Path, jobs: int = 2) -> tuple[int, int]:
    """Add the keys to every row of ``path`` that lacks them: (rows, rows changed)."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    truths: dict[tuple, tuple[Truth, dict[str, Any]]] = {}
    rows = [json.loads(line) for line in lines]
    new = [rescored(r, truths, jobs) for r in rows]
    write_rows(path, new)
    return len(rows), sum(a is not b for a, b in zip(rows, new, strict=True))


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Replace ``path`` whole with ``rows`` (a temporary file renamed over it: never half-written)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


TIMELINE_KEYS = ("export_timeline", *refine.HOUR_KEYS)
UNCOMPARED = ("runtime_s", *TIMELINE_KEYS)
# what a change of the timeline rule alone may change in a row (run.py's GPU-hour figures against the
# grid's best, refine.HOUR_KEYS against the refined best, and the rule's name)
RETIMED_KEYS = (*TIMELINE_KEYS, "timeline_rule", *refine.HOURS, "gpu_hours_to_2pct_frac")


def case_key(row: dict[str, Any]) -> tuple:
    return row["scenario"], row["truth_seed"], row.get("truth_family"), row["strategy"], row["study_seed"]


def disagreement(row: dict[str, Any], again: dict[str, Any], uncompared: Sequence[str] = UNCOMPARED) -> str | None:
    """The first key on which a rerun of the case differs from the row, or None."""
    for k in sorted((set(row) | set(again)) - set(uncompared)):
        a, b = row.get(k), again.get(k)
        if k == "regret_auc" and isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-12:
            continue
        if a != b:
            return k
    return None


def with_timelines(path: Path, rerun: Path, retime: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The rows of ``path``, each without a timeline given the timeline keys of the same case in ``rerun``,
    and how many were; with ``retime``, each timed by an earlier rule given :data:`RETIMED_KEYS` from a
    rerun timed by today's. Raises SystemExit where the rerun disagrees with a row or holds a case twice."""
    rows = read_rows(path)
    again: dict[tuple, dict[str, Any]] = {}
    for r in read_rows(rerun):
        if case_key(r) in again:
            raise SystemExit(f"{rerun}: case {case_key(r)} twice; nothing written")
        again[case_key(r)] = r
    keys, uncompared = (RETIMED_KEYS, ("runtime_s", *RETIMED_KEYS)) if retime else (TIMELINE_KEYS, UNCOMPARED)
    new, given = [], 0
    for r in rows:
        a = again.get(case_key(r))
        if a is None or not (_timed_again(r, a) if retime else _first_timeline(r, a)):
            new.append(r)
            continue
        if (k := disagreement(r, a, uncompared)) is not None:
            raise SystemExit(f"{rerun}: case {case_key(r)} differs from {path} in {k!r} "
                             f"({r.get(k)!r} vs {a.get(k)!r}); nothing written")
        new.append({**r, **{k: a[k] for k in keys}})
        given += 1
    return new, given


def _first_timeline(row: dict[str, Any], again: dict[str, Any]) -> bool:
    return "export_timeline" not in row and "export_timeline" in again


def _timed_again(row: dict[str, Any], again: dict[str, Any]) -> bool:
    """Whether the rerun was timed by today's rule and the row by another (or by none)."""
    return row.get("timeline_rule") != score.TIMELINE_RULE and again.get("timeline_rule") == score.TIMELINE_RULE


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The bench's rows of ``path``; SystemExit (one line) if it holds anything else."""
    try:
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        for r in rows:
            case_key(r)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise SystemExit(f"{path}: not rows of the bench ({type(e).__name__}: {e}); nothing written") from None
    return rows


def add_timelines(paths: Sequence[Path], rerun: Path, retime: bool = False) -> list[tuple[Path, int, int]]:
    """:func:`with_timelines` for every file, each checked before any is written: (path, rows, rows given them)."""
    done = [(p, *with_timelines(p, rerun, retime)) for p in paths]
    for p, rows, _ in done:
        write_rows(p, rows)
    return [(p, len(rows), given) for p, rows, given in done]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="runs files (JSON lines) of the bench")
    ap.add_argument("--jobs", type=int, default=2)
    rerun = ap.add_mutually_exclusive_group()
    rerun.add_argument("--timelines-from", type=Path, metavar="RERUN",
                    help="rows of the same cases run again with today's code: their export timelines are added")
    rerun.add_argument("--retime-from", type=Path, metavar="RERUN",
                    help=f"rows of the same cases run again since the timeline rule became {score.TIMELINE_RULE!r}: "
                         "rows timed by an earlier rule get their timeline and GPU-hour figures")
    a = ap.parse_args()
    for flag, rerun, retime in (("--timelines-from", a.timelines_from, False), ("--retime-from", a.retime_from, True)):
        if rerun is None:
            continue
        if not rerun.is_file():
            raise SystemExit(f"{flag} {rerun}: no such file")
        for p, n, given in add_timelines(a.runs, rerun, retime):
            print(f"{p}: {given} of {n} rows given their export timeline from {rerun}"
                  + (f" (rule {score.TIMELINE_RULE})" if retime else ""))
        return
    for p in a.runs:
        n, changed = rescore_file(p, a.jobs)
        print(f"{p}: {changed} of {n} rows scored against the refined best")


if __name__ == "__main__":
    main()
