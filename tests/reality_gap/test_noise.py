"""noise.py measures what a study's trial measures: the truth's quirks (outlier runs, KV jitter,
the structural mechanisms) on one of the study's workers. It once ran the truth's constants
alone, which for a structural truth put the runs' mean 20-27 % from the noise-free value the
benchmark scores by. SIMULATED, on test_baselines' tiny space (its brute force takes seconds)."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.reality_gap import noise
from experiments.reality_gap.families import TruthBackend
from experiments.reality_gap.study import WORKERS
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt
from tests.reality_gap import test_baselines


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("spaces") / "tiny-noise.yaml"
    path.write_text(test_baselines.TINY)
    return str(path)


def test_each_run_carries_the_truths_quirks_and_its_workers_speed(tiny, monkeypatch):
    draw = Truth.load(tiny, 0, jobs=1).draw  # the brute force first (its pool pickles gt._init)
    seen = []
    real_init = gt._init
    monkeypatch.setattr(gt, "_init", lambda space, profile, quirks=gt.NONE: (seen.append(quirks),
                                                                               real_init(space, profile, quirks)))
    runs = WORKERS + 2
    r = noise.measure(tiny, 0, runs)
    assert draw.family == "structural" and draw.node_sigma > 0
    speeds = [TruthBackend(draw).node_speed(k % WORKERS, 0.0) for k in range(runs)]
    assert [q.speed for q in seen] == pytest.approx(speeds)
    assert all(dataclasses.replace(q, speed=draw.quirks.speed) == draw.quirks for q in seen)
    assert r["low"] <= r["mean"] / r["noise_free"] <= r["high"]
    assert abs(r["mean"] / r["noise_free"] - 1) < 0.15  # the runs measure the truth the brute force valued


def test_the_constants_family_runs_the_perturbed_profile_alone(tiny, monkeypatch):
    Truth.load(tiny, 0, jobs=1, family="constants")
    seen = []
    real_init = gt._init
    monkeypatch.setattr(gt, "_init", lambda space, profile, quirks=gt.NONE: (seen.append(quirks),
                                                                               real_init(space, profile, quirks)))
    noise.measure(tiny, 0, 3, family="constants")
    assert seen and all(q == gt.NONE for q in seen)


def test_the_noise_ablation_switches_off_only_the_parts_named_and_keeps_the_truth(tiny):
    """noise_ablation.py runs a study against a quieter truth and scores it against the same one:
    the brute force (the grid, the noise-free values) is shared, and only the named parts go."""
    from experiments.reality_gap import noise_ablation

    truth = Truth.load(tiny, 0, jobs=1)
    assert truth.draw.node_sigma > 0 and truth.draw.quirks.outlier_chance > 0 and truth.draw.quirks.kv_jitter > 0
    nodes = noise_ablation.quieter(truth, ("nodes",))
    assert nodes.grid is truth.grid and nodes.draw.quirks == truth.draw.quirks
    assert (nodes.draw.node_sigma, nodes.draw.drift_per_hour) == (0.0, 0.0)
    assert nodes.backend().node_speed(3, 7200.0) == 1.0
    rest = noise_ablation.quieter(truth, ("outliers", "kv"))
    assert rest.draw.node_sigma == truth.draw.node_sigma
    assert (rest.draw.quirks.outlier_chance, rest.draw.quirks.kv_jitter) == (0.0, 0.0)
    assert dataclasses.replace(rest.draw.quirks, outlier_chance=truth.draw.quirks.outlier_chance,
                               kv_jitter=truth.draw.quirks.kv_jitter) == truth.draw.quirks


def test_the_noise_ablation_refuses_evaluation_truths(capsys):
    from experiments.reality_gap import noise_ablation

    assert noise_ablation.main(["--scenario", "small-highconc", "--truth-seeds", "1000", "--without", "kv"]) == 2
    assert "development seeds only" in capsys.readouterr().err
