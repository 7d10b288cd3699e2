"""Which truth seeds develop the benchmark and which grade it: declared here, and only here.

Development seeds are the ones looked at while building and tuning autotune, the truth
families and this benchmark (their figures may have steered a choice). Evaluation seeds are
the ones the README's goal table is computed on: nothing in autotune, the families or the
strategies was tuned on them, and the bench refuses to mix the two in one report.

A truth seed is not used as it stands: ``draw_seed`` mixes in the family and the scenario's
name, so truth 3 of qwen72b-mixed and truth 3 of rag-llama70b-h100 are independent draws
(in the ``constants`` family of issue 12 they were one constant vector in all five
scenarios; that family keeps its old seeding so its committed truths stay valid).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from autotune.errors import UserError

DEV_TRUTH_SEEDS: tuple[int, ...] = tuple(range(0, 10))
EVAL_TRUTH_SEEDS: tuple[int, ...] = tuple(range(1000, 1010))
STUDY_SEEDS: tuple[int, ...] = (0, 1, 2)  # study seeds per case (>= 3: the floor)
# A study seed seeds Optuna's samplers (numpy's RandomState): 0 to 2**32 - 1. A truth seed is
# held to the same range, since it is also the study seed when none is given.
MAX_SEED = 2**32 - 1


def seed_problem(flag: str, value: int) -> str | None:
    """Why ``value`` cannot be the seed ``flag`` names, in one line (None: it can)."""
    if 0 <= value <= MAX_SEED:
        return None
    return f"{flag} {value}: a seed is an integer from 0 to {MAX_SEED}"


def dev_only_problem(flag: str, value: int) -> str | None:
    """Why a tool that looks closely at a truth (trace.py, finalist_choice.py) may not take
    ``value``, in one line (None: a development seed): looking at an evaluation truth that
    closely is developing on it."""
    if value in DEV_TRUTH_SEEDS:
        return None
    return (f"{flag} {value}: development seeds only ({DEV_TRUTH_SEEDS[0]}-{DEV_TRUTH_SEEDS[-1]}; seeds.py); "
            "reading an evaluation truth this closely is developing on it")


def print_dev_rows(truth_seeds: Sequence[int], rows: Callable[[], Iterable[dict[str, Any]]]) -> int:
    """The main of a development-only analysis (finalist_choice.py, oom_exports.py): refuse any
    evaluation seed in one line, else print ``rows()`` as JSON lines as they come; 2 on a refusal or
    a :class:`UserError`."""
    problems = [p for s in truth_seeds if (p := dev_only_problem("--truth-seeds", s))]
    try:
        if problems:
            raise UserError(problems[0])
        for row in rows():
            print(json.dumps(row), flush=True)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def draw_seed(family: str, scenario: str, truth_seed: int) -> str:
    """The string a truth's random draws are seeded with (sha512 string seeding: stable
    across processes and PYTHONHASHSEED)."""
    return f"autotune-reality-gap/{family}/{scenario}/{truth_seed}"


def kind(truth_seed: int) -> str:
    """'dev', 'eval' or 'other' (any other seed: allowed, reported apart)."""
    if truth_seed in DEV_TRUTH_SEEDS:
        return "dev"
    if truth_seed in EVAL_TRUTH_SEEDS:
        return "eval"
    return "other"
