"""One case of the benchmark, trial by trial: what autotune measured against what is true.

``python -m experiments.reality_gap.trace --scenario small-highconc --truth-seed 3 --study-seed 0`` runs the
same study as ``run.py`` and prints, per trial, its role, whether it stopped early, its params, the main
objective and OOMs per 1000 requests as measured and as the truth's noise-free values, its true regret against the truth's refined best
(refine.py) and how the sweep chose it; then how many of the measured configs were within 2 % of that best (did
the search find one, whatever it exported), the export's path (the pick after each completion where it changed,
with the rule that made it and its true regret: how it entered the 2 % band and whether it left it) and the export
rule's final pick and its notes. It is how the README's "What the development truths show" was read. ALL
FIGURES ARE SIMULATED. Development truth seeds only (seeds.py): looking at an evaluation truth trial by
trial is developing on it.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from autotune.errors import UserError
from autotune.study.analysis import config_key
from experiments.reality_gap import refine, score, seeds
from experiments.reality_gap.run import run_strategy
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt


def sweep_decisions(sampler: Any) -> dict[int, str]:
    """The sweep's reasons per trial number, found through the samplers it wraps ({} without a sweep)."""
    while sampler is not None:
        if hasattr(sampler, "decisions"):
            return dict(sampler.decisions)
        sampler = getattr(sampler, "base", None)
    return {}


def trace(scenario: str, truth_seed: int, study_seed: int, strategy: str = "autotune") -> list[str]:
    if (problem := seeds.dev_only_problem("--truth-seed", truth_seed)) is not None:
        raise UserError(problem)
    truth = Truth.load(scenario, truth_seed)
    bench = run_strategy(truth, strategy, study_seed, truth.space.study.trials)
    why = sweep_decisions(bench.study.sampler)
    main = truth.main
    best = refine.space_best(truth)
    lines = [f"SIMULATED. {scenario} truth {truth_seed}, {strategy} study seed {study_seed}; "
             f"true best {main} {truth.best[main]:.3f}: {truth.params(truth.best)}; "
             f"refined best {best[main]:.3f}: {truth.params(best)}"]
    found: dict[str, float] = {}  # measured config -> its true regret against the refined best
    for r in bench.records():
        measured = r.metrics.get(main)
        row = truth.value(r.flags) if r.flags else None
        true = row[main] if row is not None else None
        regret = truth.regret(row, best) if row is not None else None
        if row is not None and not math.isnan(regret):
            found[config_key(truth.params(r.flags))] = regret if gt.feasible(row, main) else math.inf
        lines.append(f"{r.number} {r.role} {r.shown_state}{' early-stopped' if r.early_stopped else ''} "
                     f"{r.params} measured {measured if measured is None else round(measured, 3)} "
                     f"true {true if true is None else round(true, 3)} "
                     f"oom_per_1k measured {_oom(r.metrics)} true {_oom(row)} "
                     f"regret {'-' if regret is None else f'{regret:.3f}'} {why.get(r.number, '')}".rstrip())
    near = sorted(found.values())
    lines.append(f"measured: {len(found)} configs, {sum(v <= 0.02 for v in near)} within 2 % of the refined best "
                 f"and the OOM limit; the closest {near[0]:.4f}" if near else "measured: nothing")
    lines.extend(export_path(bench, truth, best))
    pick = score.export_pick(bench.records(), bench.space)  # the benchmark's own reading of the export
    if pick is None:
        lines.append("export: nothing to export")
    else:
        row = truth.value(pick.config.flags)
        lines.append(f"export: trial {pick.trial.number} ({pick.rule}); regret {truth.regret(row):.4f} against the "
                     f"grid's best, {truth.regret(row, best):.4f} against the refined best")
        lines.extend(f"  note: {n}" for n in pick.notes)
    return lines


def _oom(values: Any) -> str:
    """OOMs per 1000 requests in ``values`` (a trial's metrics or a truth row), '-' when absent."""
    v = None if values is None else values.get("oom_per_1k")
    return "-" if v is None else f"{v:.2f}"


def export_path(bench: Any, truth: Truth, best: dict[str, Any]) -> list[str]:
    """The export rule's pick where it changed along the clock (the row's ``export_timeline``), each with the
    rule that picked it and its true regret against the refined best: how an export enters the 2 % band and
    whether it leaves it again."""
    out = []
    for x, c in score.export_changes(score.timeline(bench.records(), bench.pool.log), bench.space):
        if c is None:
            out.append(f"export after trial {x.record.number}: nothing to export")
            continue
        row = truth.value(c.config.flags)
        ok = truth.within(row, best)
        out.append(f"export after trial {x.record.number}: trial {c.config.first.number}'s config, {c.config.n} runs "
                   f"({c.rule}); regret {truth.regret(row, best):.3f} against the refined best"
                   f"{', within 2 %' if ok else ''}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seed", type=int, required=True)
    ap.add_argument("--study-seed", type=int, default=0)
    ap.add_argument("--strategy", default="autotune")
    args = ap.parse_args(argv)
    try:
        print("\n".join(trace(args.scenario, args.truth_seed, args.study_seed, args.strategy)))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
