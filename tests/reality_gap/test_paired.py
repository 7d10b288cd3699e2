"""paired.py: two strategies paired on development cases (evaluation ones only when asked); its counts are the rows' own."""

from __future__ import annotations

import json

from experiments.reality_gap import paired as P


def _row(strategy: str, study_seed: int, regret: float, oom: float = 0.0, truth_seed: int = 0, seqs: int = 64,
         scenario: str = "s") -> dict:
    return {"strategy": strategy, "scenario": scenario, "truth_seed": truth_seed, "study_seed": study_seed,
            "exported_flags": {"max_num_seqs": seqs}, "regret": regret, "true_oom_per_1k": oom,
            "within_2pct": regret <= 0.02 and oom <= 1.0}


ROWS = [_row("autotune", 0, 0.05), _row("v", 0, 0.01, seqs=128),  # the variant gains this case
        _row("autotune", 1, 0.0, oom=3.0), _row("v", 1, 0.0, oom=3.0),  # both over the limit: 100 % regret
        _row("autotune", 2, 0.01), _row("v", 2, 0.01),  # the same export
        _row("autotune", 0, 0.5, truth_seed=1000), _row("v", 0, 0.0, truth_seed=1000),  # evaluation: only with kind="eval"
        _row("tpe", 0, 0.0), _row("v", 3, 0.0)]  # another strategy; a case only one of them ran


def test_it_pairs_development_cases_both_ran_and_counts_from_the_rows():
    pairs = P.case_pairs(ROWS, "autotune", "v")
    assert list(pairs) == ["s"] and len(pairs["s"]) == 3
    line = P.table(ROWS, "autotune", "v")[2]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:3] == ["s", "3", "1 / 2"]
    assert cells[3].startswith("+33 % [")  # one case gained of three
    assert cells[4] == "1 / 1" and cells[5] == "5.0 % / 1.0 %" and cells[6] == "1"


def test_evaluation_cases_are_paired_only_when_asked():
    pairs = P.case_pairs(ROWS, "autotune", "v", kind="eval")
    assert list(pairs) == ["s"] and [(a["truth_seed"], b["regret"]) for a, b in pairs["s"]] == [(1000, 0.0)]
    assert P.table(ROWS, "autotune", "v", "eval")[2].split("|")[3].strip() == "0 / 1"


def test_several_scenarios_get_a_pooled_line():
    rows = ROWS + [_row("autotune", 0, 0.0, scenario="t"), _row("v", 0, 0.03, scenario="t")]
    lines = P.table(rows, "autotune", "v")
    assert [ln.split("|")[1].strip() for ln in lines[2:]] == ["s", "t", "all"]
    assert lines[-1].split("|")[2].strip() == "4"


def test_bad_input_is_one_line(tmp_path, capsys):
    assert P.main(["--other", "v", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "rows file not found" in err and "Traceback" not in err
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in ROWS))
    assert P.main(["--other", "w", str(f)]) == 2
    assert "no development case has rows of both autotune and w" in capsys.readouterr().err
    assert P.main(["--other", "v", str(f)]) == 0
    assert "| s | 3 | 1 / 2 |" in capsys.readouterr().out
    assert P.main(["--other", "v", "--kind", "eval", str(f)]) == 0
    assert "| s | 1 | 0 / 1 |" in capsys.readouterr().out
