"""The exports' OOM rates over noisy runs (experiments/reality_gap/oom_runs.py): which configs of the
rows it values, what one valuation holds, the counts, and bad input. SIMULATED where it runs the truth."""

from __future__ import annotations

import json

from experiments.reality_gap import oom_runs as R

FLAGS = {"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 512, "max_num_seqs": 64}


def row(strategy: str, oom: float, flags: dict | None = FLAGS, **kw) -> dict:
    return {"scenario": "qwen72b-mixed", "truth_seed": 1, "truth_family": "structural", "strategy": strategy,
            "exported_flags": flags, "true_oom_per_1k": oom, "true_best_flags": {**FLAGS, "max_num_seqs": 128},
            "true_best_space_flags": {**FLAGS, "max_num_seqs": 100}, **kw}


def valuation(r: dict, flags: str, noise_free: float, noisy: float, low: float) -> dict:
    return {"key": list(R.key(r, flags)), "noise_free_oom_per_1k": noise_free, "oom_per_1k": noisy,
            "oom_per_1k_95": [low, noisy + 1], "deaths": 1, "runs": 30, "started": 30}


def test_rows_without_a_simulated_truth_or_an_export_are_not_valued(tmp_path):
    rows = [row("autotune", 0.0), row("tpe", 0.0, flags=None), row("grid", 0.0, table="vllm-cpu"),
            {k: v for k, v in row("random", 0.0).items() if k != "truth_family"}]
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["strategy"] for r in R.valued_rows([p])] == ["autotune"]


def test_the_counts_read_each_export_by_both_readings_and_the_bests_once_per_truth():
    a = row("autotune", 3.2, regret_space=0.01, within_2pct_space=False)  # within 2 %, over noise-free only
    b = row("autotune", 0.0, flags={**FLAGS, "gpu_memory_utilization": 0.95}, regret_space=0.0,
            within_2pct_space=True)
    vals = {tuple(v["key"]): v for v in (
        valuation(a, "exported_flags", 3.2, 0.0, 0.0),      # over noise-free only
        valuation(b, "exported_flags", 0.0, 4.0, 1.5),      # over by the runs, interval above the limit
        valuation(a, "true_best_flags", 0.0, 2.0, 0.0))}    # the grid's best: over by the mean only
    lines = R.summary([a, b, row("tpe", 3.2)], vals)
    assert "| qwen72b-mixed | autotune | 2 (2) | 1 | 1 | 1 | 1 | 1 |" in lines  # b within noise-free, a by the runs
    assert "| qwen72b-mixed | tpe | 1 (1) | 1 | 0 | 0 | 0 | 0 |" in lines  # tpe's export is a's config, no regret
    assert "| qwen72b-mixed | the grid's best | 1 (1) | 0 | 1 | 0 |" in lines  # one truth, three rows
    assert "| qwen72b-mixed | the refined best | 1 (0) | 0 | 0 | 0 |" in lines  # not valued yet


def test_configs_valued_in_another_shard_are_not_valued_again(tmp_path):
    r = row("autotune", 0.0)
    seen = tmp_path / "shard1.jsonl"
    seen.write_text("".join(json.dumps(valuation(r, f, 0, 0, 0)) + "\n" for f in ("exported_flags", *R.BESTS)))
    out = tmp_path / "shard0.jsonl"
    assert R.value_configs([r], out, runs=2, shard=(0, 1), seen=[seen]) == 0 and not out.exists()


def test_one_valuation_runs_the_truth_with_its_noise_and_bounds_its_mean(tmp_path):
    from experiments.reality_gap.truth import Truth

    truth = Truth.load("qwen72b-mixed", 1, jobs=1, log=lambda *_: None)  # a development truth, cached
    v = R.runs_oom(truth, truth.params(FLAGS), runs=3)
    assert v["runs"] == 3 and v["started"] == 3 and 0 <= v["deaths"] <= 3
    low, high = v["oom_per_1k_95"]
    assert low <= v["oom_per_1k"] <= high
    again = R.runs_oom(truth, truth.params(FLAGS), runs=3)
    assert again == v  # seeded: the same starts every time


def test_bad_input_is_one_line(tmp_path, capsys):
    assert R.main([str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rows file" in err and "Traceback" not in err


def test_a_resumed_shard_keeps_its_own_truths_when_another_truth_is_done(tmp_path):
    one, two = row("autotune", 0.0), {**row("autotune", 0.0), "truth_seed": 2}
    seen = tmp_path / "done.jsonl"  # truth 1 fully valued: truth 2 must stay the second shard's
    seen.write_text("".join(json.dumps(valuation(one, f, 0, 0, 0)) + "\n" for f in ("exported_flags", *R.BESTS)))
    first, second = tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"
    assert R.value_configs([one, two], first, runs=1, shard=(0, 2), seen=[seen]) == 0
    assert R.value_configs([one, two], second, runs=1, shard=(1, 2), seen=[seen]) == 3  # its export and two bests
    assert {tuple(v["key"])[:2] for v in R.read_valuations([second]).values()} == {("qwen72b-mixed", 2)}


def test_valuations_of_different_run_counts_are_not_counted_together(tmp_path, capsys):
    a = row("autotune", 0.0)
    rows, out = tmp_path / "rows.jsonl", tmp_path / "v.jsonl"
    rows.write_text(json.dumps(a) + "\n")
    out.write_text(json.dumps(valuation(a, "exported_flags", 0, 0, 0)) + "\n"
                   + json.dumps({**valuation(a, "true_best_flags", 0, 0, 0), "runs": 10}) + "\n")
    assert R.main([str(rows), "--out", str(out), "--summary"]) == 2
    err = capsys.readouterr().err
    assert "mix [10, 30] runs" in err and err.count("\n") == 1
