"""Two strategies paired on the cases both ran: what a variant changes.

``python -m experiments.reality_gap.paired --base autotune --other autotune-marginal [--kind eval] ROWS...``

Reads the bench's rows files, keeps the development truth seeds (seeds.py) unless ``--kind eval``
is given and, per scenario then pooled, prints a Markdown table: the cases both ran,
each strategy's cases within 2 % and the OOM limit (the truth's own test, ``within_2pct``),
the paired difference of that rate with its 95 % bootstrap interval, the exports over the
true OOM limit, the median regret (an export over the limit counted as 100 %: it could not
be deployed) and how many exports differ. ``--kind eval`` is for reporting a variant once the
decision on it was made on development rows (README: the evaluation reading comes after, and
is not used to tune it). The evaluation report (evaluation.py) pairs autotune
with the baselines; this pairs any two strategies, for variants tried before they are adopted.
ALL FIGURES ARE SIMULATED.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from experiments.reality_gap import report, seeds
from experiments.reality_gap.evaluation import bootstrap, mean
from experiments.reality_gap.truth import OOM_LIMIT

Row = dict[str, Any]
Pair = tuple[Row, Row]


def over_limit(r: Row) -> bool:
    """The export loses more requests to OOMs per 1000 than the limit, in the truth."""
    return (r["true_oom_per_1k"] or 0.0) > OOM_LIMIT


def deployable_regret(r: Row) -> float:
    """The export's regret, or 1 (100 %) when it is over the OOM limit."""
    return 1.0 if over_limit(r) else float(r["regret"])


def counts(pairs: Sequence[Pair], f: Callable[[Row], bool]) -> str:
    """'a / b': the pairs' first and second rows for which ``f`` holds."""
    return " / ".join(str(sum(1 for p in pairs if f(p[i]))) for i in (0, 1))


def read_rows(paths: Sequence[Path]) -> list[Row]:
    return [r for p in paths for r in report.load(p)]


def case_pairs(rows: Sequence[Row], base: str, other: str, kind: str = "dev") -> dict[str, list[Pair]]:
    """Scenario -> the (base, other) rows of each case of truth-seed ``kind`` ('dev' or 'eval',
    seeds.kind) both strategies ran. A case run twice (two files) keeps its last row."""
    case = {(r["scenario"], r["truth_seed"], r["study_seed"], r["strategy"]): r for r in rows
            if r.get("strategy") in (base, other) and seeds.kind(r["truth_seed"]) == kind}
    keys = sorted({k[:3] for k in case if k[:3] + (base,) in case and k[:3] + (other,) in case})
    out: dict[str, list[Pair]] = {}
    for k in keys:
        out.setdefault(k[0], []).append((case[k + (base,)], case[k + (other,)]))
    return out


def _line(name: str, pairs: Sequence[Pair]) -> str:
    diffs = [float(b["within_2pct"]) - float(a["within_2pct"]) for a, b in pairs]
    lo, hi = bootstrap(diffs, mean, f"paired/{name}")
    d = mean(diffs)
    regret = " / ".join(f"{100 * median(deployable_regret(p[i]) for p in pairs):.1f} %" for i in (0, 1))
    changed = sum(a["exported_flags"] != b["exported_flags"] for a, b in pairs)
    return (f"| {name} | {len(pairs)} | {counts(pairs, lambda r: bool(r['within_2pct']))} | "
            f"{100 * d:+.0f} % [{100 * lo:+.0f}, {100 * hi:+.0f}] | {counts(pairs, over_limit)} | {regret} | "
            f"{changed} |")


def table(rows: Sequence[Row], base: str, other: str, kind: str = "dev") -> list[str]:
    by = case_pairs(rows, base, other, kind)
    out = [f"| scenario | cases | within 2 % and the limit ({base} / {other}) | difference [95 % CI] | "
           "over the OOM limit | median regret (over the limit = 100 %) | exports changed |",
           "|---|---|---|---|---|---|---|"]
    out += [_line(sc, pairs) for sc, pairs in by.items()]
    if len(by) > 1:
        out.append(_line("all", [p for pairs in by.values() for p in pairs]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="+", type=Path, help="the bench's rows files")
    ap.add_argument("--base", default="autotune")
    ap.add_argument("--other", required=True, help="the variant, e.g. autotune-marginal")
    ap.add_argument("--kind", choices=("dev", "eval"), default="dev",
                    help="truth seeds to pair on (eval: only to report a variant already decided on)")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.rows if not p.is_file()]
    if missing:
        print(f"rows file not found: {', '.join(missing)}; give the bench's --out files", file=sys.stderr)
        return 2
    lines = table(read_rows(args.rows), args.base, args.other, args.kind)
    if len(lines) == 2:
        which = "development" if args.kind == "dev" else "evaluation"
        print(f"no {which} case has rows of both {args.base} and {args.other}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
