"""Budgets that scale (issue 18): the warm start and confirmation each take at most a quarter of
the trial budget, and a budget too small to search every flag is said at the start, in status
and in the export header, with the budget that would be enough. SIMULATED where a study runs."""

from __future__ import annotations

import json

import pytest

from autotune.space import load_space
from autotune.study.search.confirm import budget_needed, budget_note, budget_plan
from tests.conftest import REPO, run_cli

FLAGSHIP = REPO / "search_spaces" / "qwen72b.yaml"


def test_the_plan_splits_the_budget_in_quarters_and_names_what_would_search():
    sp = load_space(FLAGSHIP)  # 7 searched flags, 4 references, 3 finalists x 2 repeats
    assert len(sp.params) == 7 and len(sp.references) == 4
    small = budget_plan(sp, 12)
    assert (small.warm, small.search, small.confirm) == (3, 6, 3) and not small.enough
    assert budget_needed(sp, 12) == 14 and budget_plan(sp, 14).enough
    full = budget_plan(sp, 40)
    assert (full.warm, full.search, full.confirm) == (5, 29, 6) and budget_note(sp, 40) == ""
    note = budget_note(sp, 12)
    assert note.startswith("budget too small to search every flag: 12 trials = 3 warm start + 6 sampled + 3 "
                           "confirmation") and note.endswith("--trials 14 gives it 8")


@pytest.mark.slow  # a Ray head and 12 simulated trials of the flagship space
def test_twelve_trials_on_the_flagship_search_and_say_the_budget_is_small(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli(["run", "--space", str(FLAGSHIP), "--backend", "sim", "--trials", "12",
                                 "--progress", "plain", "--out", str(out)], capsys)
    assert code == 0, err
    assert stdout.count("budget too small to search every flag: 12 trials") >= 2  # at the start and the end
    assert stdout.index("budget too small") < stdout.index("trial 0")  # said before any trial ran
    assert "note: budget too small to search every flag" in stdout.rsplit("next:", 1)[0]
    assert "--trials 14 gives it 8" in stdout and "budget" not in err
    code, stdout, err = run_cli(["status", "--out", str(out), "--json"], capsys)
    assert code == 0, err
    st = json.loads(stdout)
    roles = [t["role"] for t in st["trials"] if t["state"] != "rejected"]
    assert roles.count("search") >= 6 and roles.count("reference") == 2 and roles.count("confirm") <= 3
    assert st["budget_note"].startswith("budget too small to search every flag")
    code, stdout, err = run_cli(["status", "--out", str(out)], capsys)
    assert code == 0 and "budget too small to search every flag" in stdout
