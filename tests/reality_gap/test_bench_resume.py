"""bench.py resumes: a case already in the rows file is not run again, for a space given by path too.

A row records a path scenario by its stem and a hash of the space (ground_truth.scenario_name),
not by the path it was given as; the resume check compared the path, so a killed bench over
path spaces ran every case again and appended duplicates.
"""

from __future__ import annotations

import argparse

from experiments.reality_gap.bench import Pipeline
from experiments.reality_gap.families import DEFAULT_FAMILY
from experiments.scenarios.ground_truth import scenario_name
from tests.reality_gap.test_baselines import TINY


def test_a_done_case_of_a_space_given_by_path_is_not_queued_again(tmp_path):
    path = str(tmp_path / "resume-gap.yaml")
    (tmp_path / "resume-gap.yaml").write_text(TINY)
    args = argparse.Namespace(truths_only=False, truth_family=DEFAULT_FAMILY, calibrate_strategies=[],
                              study_seeds=[0, 1], strategies=["sim-best", "tpe"])
    done = {(DEFAULT_FAMILY, scenario_name(path), 0, "sim-best", 0, 8)}  # TINY's study.trials
    p = Pipeline(None, args, done)  # type: ignore[arg-type]
    p.queue_cases(path, 0)
    assert sorted((c[2], c[4]) for c in p.cases) == [("sim-best", 1), ("tpe", 0), ("tpe", 1)]
    assert all(c[0] == path for c in p.cases)  # run by the path it was given
