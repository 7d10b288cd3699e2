"""The screen is an aid, never a reason to refuse a study: where the simulator cannot model the
space (no config for the model, an unknown device, an unmodelled flag: tiny-cpu's model directory is
not built here and it sets load_format, although its gpu: cpu is the simulator's CPU host) the search
runs unscreened. A CPU space the simulator models is screened: tests/reality_gap/test_vllm_cpu_search.py."""

from __future__ import annotations

import pytest

from autotune.calibrate.screen import screen_wrapper
from autotune.space import load_space
from autotune.study.search.samplers import make_sampler
from autotune.study.search.screening import ScreeningSampler
from autotune.study.search.sweep import SweepSampler
from tests.conftest import REPO


@pytest.mark.parametrize("space_file", ["tests/data/noop.yaml", "search_spaces/tiny-cpu.yaml"])
def test_spaces_the_simulator_cannot_model_run_unscreened(space_file):
    space = load_space(REPO / space_file)
    assert space.study.strategy.screen  # on by default, and still no refusal
    assert not isinstance(make_sampler(space.study.sampler, space, 0, wrap=screen_wrapper), ScreeningSampler | SweepSampler)


def test_the_flagship_space_is_swept_and_screened():
    space = load_space(REPO / "search_spaces" / "qwen72b.yaml")
    sampler = make_sampler(space.study.sampler, space, 0, wrap=screen_wrapper)
    assert isinstance(sampler, SweepSampler) and isinstance(sampler.base, ScreeningSampler)
