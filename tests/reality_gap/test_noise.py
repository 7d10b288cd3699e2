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
