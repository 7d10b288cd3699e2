"""hazard_fit.py: development seeds only, and its table counts each flag against the truth. (The
refit itself is autotune.calibrate.hazard's, tested in tests/study/test_hazard.py.)"""

from __future__ import annotations

from experiments.reality_gap import hazard_fit as H


def test_it_refuses_evaluation_seeds(capsys):
    assert H.main(["--scenarios", "small-highconc", "--truth-seeds", "1000"]) == 2
    err = capsys.readouterr().err
    assert "--truth-seeds 1000: development seeds only" in err and "Traceback" not in err


def test_the_table_counts_flags_against_the_truth():
    def cand(oom_fit, gmu, true_oom, exported=False):
        return {"oom_fit": oom_fit, "gmu": gmu, "true_oom_per_1k": true_oom, "exported": exported}
    rows = [{"scenario": "s", "candidates": [cand(3.0, 0.96, 2.0, True), cand(0.2, 0.96, 5.0), cand(2.0, 0.9, 0.0),
                                             cand(0.1, 0.9, 0.0, True)]}]
    assert H.table(rows)[0].startswith("| scenario | studies |") and H.table(rows)[2] == "| s | 1 | 4 | 2 | 1 / 1 | 2 / 0 | 1 | 1 | 0 of 1 |"


def test_the_table_keeps_another_strategys_studies_apart():
    """--strategy tpe-confirm: the refit to TPE's studies is a line of its own (rows before --strategy are autotune's)."""
    cand = {"oom_fit": 3.0, "gmu": 0.96, "true_oom_per_1k": 0.0, "exported": True}
    rows = [{"scenario": "s", "candidates": [cand]}, {"scenario": "s", "strategy": "tpe-confirm", "candidates": [cand]}]
    lines = H.table(rows)
    assert lines[2].startswith("| s | 1 | 1 |") and lines[3].startswith("| s (tpe-confirm) | 1 | 1 |")
