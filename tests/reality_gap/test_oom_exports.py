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
