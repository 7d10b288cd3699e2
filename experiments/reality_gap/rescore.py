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
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from experiments.reality_gap import refine
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
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in new))
    tmp.replace(path)
    return len(rows), sum(a is not b for a, b in zip(rows, new, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="runs files (JSON lines) of the bench")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    for p in a.runs:
        n, changed = rescore_file(p, a.jobs)
        print(f"{p}: {changed} of {n} rows scored against the refined best")


if __name__ == "__main__":
    main()
