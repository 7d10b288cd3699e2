"""The OOM-export analysis (experiments/reality_gap/oom_exports.py): development seeds only, and
its memory partial order (the 'a safer config died' signal it reports). No study runs."""

from __future__ import annotations

from experiments.reality_gap import oom_exports as O

BASE = {"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 1024, "max_num_seqs": 64, "block_size": 16}


def test_it_refuses_evaluation_seeds(capsys):
    assert O.main(["--scenario", "qwen72b-mixed", "--truth-seeds", "1003"]) == 2
    err = capsys.readouterr().err
    assert "--truth-seeds 1003: development seeds only" in err and "Traceback" not in err


def test_a_config_is_at_most_as_risky_only_below_in_every_memory_flag_and_equal_elsewhere():
    assert O.at_most_as_risky(BASE, {**BASE, "gpu_memory_utilization": 0.95})
    assert O.at_most_as_risky(BASE, {**BASE, "max_num_batched_tokens": 2048, "max_num_seqs": 128})
    assert O.at_most_as_risky(BASE, BASE)
    assert not O.at_most_as_risky({**BASE, "gpu_memory_utilization": 0.95}, BASE)
    assert not O.at_most_as_risky(BASE, {**BASE, "gpu_memory_utilization": 0.95, "max_num_seqs": 32})  # not ordered
    assert not O.at_most_as_risky(BASE, {**BASE, "gpu_memory_utilization": 0.95, "block_size": 32})  # another config


def test_a_soak_serves_the_benchmark_several_times_on_one_engine_and_leaves_the_space_alone():
    from autotune.sim.trial import simulate_trial
    from experiments.reality_gap.truth import Truth

    space = Truth.load("qwen72b-mixed", 1, jobs=1, log=lambda *_: None).space  # a closed-loop trace, cached
    soak = O.soaked(space, 3)
    rows = space.workload.trace_rows
    assert soak.workload.trace_rows == rows * 3 and soak.workload.num_requests == 3 * space.workload.num_requests
    assert space.workload.trace_rows == rows and space.workload.num_requests == len(rows)  # the original is untouched
    e = space.engine
    flags = {**space.fixed_flags(), "max_num_batched_tokens": 512, "max_num_seqs": 64}
    one, three = (simulate_trial(e.model, e.gpu, flags, s.workload, env=e.env) for s in (space, soak))
    assert one.status.value == three.status.value == "ok"
    assert len(three.records) == 3 * len(one.records) == 3 * len(rows)
    assert three.duration_s > 2.5 * one.duration_s  # one engine, three benchmarks in a row


def test_a_soak_refuses_what_it_cannot_repeat_an_open_loop_and_a_synthetic_benchmark():
    import pytest

    from autotune.space import load_space

    open_loop = load_space("search_spaces/bursty-goodput.yaml")
    assert not open_loop.workload.closed_loop
    with pytest.raises(ValueError, match="closed-loop trace"):
        O.soaked(open_loop, 2)
    synthetic = load_space("search_spaces/small-highconc.yaml")
    assert synthetic.workload.closed_loop and synthetic.workload.trace is None
    with pytest.raises(ValueError, match="synthetic"):
        O.soaked(synthetic, 2)
