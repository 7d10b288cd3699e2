"""autotune and sim-best on the replayed table (issue 19), on a SYNTHETIC table.

The table is SYNTHETIC (made-up numbers in measure.py's format, tests/reality_gap/test_vllm_cpu_replay.py);
autotune's model of the deployment is the simulator's CPU host (docs/simulator.md, "CPU host").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.calibrate import screen_wrapper
from autotune.study.search import ScreeningSampler, StartupPredictor, SweepSampler, make_sampler
from experiments.reality_gap import run as run_mod
from experiments.vllm_cpu import replay, search
from tests.reality_gap.test_contract import KEYS
from tests.reality_gap.test_vllm_cpu_replay import CONFIGS, KV3000, synthetic_row


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic_runs.jsonl"
    rows = [synthetic_row(c, s) for s in range(3) for c in CONFIGS if not (c == "s-tworuns" and s == 2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_autotunes_model_is_the_cpu_host():
    space = replay.model_space(replay.load_space(replay.SPACE))
    assert "load_format" not in space.engine.flags and not space.unmodelled_flags()
    sampler = make_sampler(space.study.sampler, space, 0, wrap=screen_wrapper)
    assert isinstance(sampler, SweepSampler) and isinstance(sampler.base, ScreeningSampler)  # screened on a CPU host
    predictor = StartupPredictor.for_space(space)
    assert predictor is not None
    flags = {**space.fixed_flags(), "kv_cache_memory_bytes": KV3000}
    # 3000 tokens of bf16 KV cannot hold one max_model_len request (as the CPU build refuses); fp8 can.
    assert predictor.failure(flags).startswith("predicted startup failure")
    assert predictor.failure({**flags, "kv_cache_dtype": "fp8"}) == ""


def test_cpu_node_memory_refusals_are_pruned_only_beyond_the_constants_ranges():
    space = replay.model_space(replay.load_space(replay.SPACE))
    predictor = StartupPredictor.for_space(space)
    assert predictor is not None
    # Without a KV size the worker asks for gmu x the node's memory: the nominal constants (4 GiB the engine
    # cannot have) refuse 0.92, the most favourable ones (0.5 GiB) do not, so it is launched; 0.99 fails both.
    base = {**space.fixed_flags(), "kv_cache_memory_bytes": None}
    from autotune.deploy import plan_startup

    assert not plan_startup(predictor.memory.deployment({**base, "gpu_memory_utilization": 0.92}),
                            predictor.profile).ok
    assert predictor.failure({**base, "gpu_memory_utilization": 0.92}) == ""
    assert predictor.failure({**base, "gpu_memory_utilization": 0.99}).startswith("predicted startup failure")


@pytest.mark.parametrize("strategy", ["autotune", "sim-best"])
def test_the_simulator_strategies_run_on_the_table(table_path, strategy):
    d = run_mod.run_replay_case(str(table_path), 3, strategy, trials=8)
    for key, kind in KEYS.items():
        assert isinstance(d[key], kind), (key, d[key])
    keys = {replay.params_key(c.params) for c in replay.Table.load(table_path).configs.values()}
    assert replay.params_key(d["exported_flags"]) in keys and "not GPU" in d["note"]
    assert d["configs_measured"] <= 5 and d["tied_95"] in (True, False)
    if strategy == "sim-best":  # the nominal CPU simulator's best table config, measured once
        assert d["launched"] == 1 and d["configs_measured"] == 1
        best, pred = replay.sim_best(replay.Table.load(table_path))
        assert d["sim_best_config"] == best.name != "s-nostart" and pred["p99_e2e_s"] > 0
        assert replay.params_key(d["exported_flags"]) == replay.params_key(best.params)
    else:
        assert d["launched"] == 8 and d["replay_answers"] == 8
        assert any(x.startswith("sweep:") for x in d["sweep_decisions"])  # the sweep ranked the table's configs
        # Once the sweep has measured every config it predicts to start, it falls back to the screened TPE,
        # whose picks off the table are moved onto it.
        assert d["proposals_moved_to_table"] >= 0


def test_the_warm_start_measures_the_tables_vllm_defaults(table_path):
    from experiments.reality_gap.study import build

    truth = replay.ReplayTruth("x", 0, replay.Table.load(table_path))
    bench = build(replay.model_space(truth.space), truth.backend(), 0, 5,
                  wrap_sampler=replay.sampler_wrapper(truth.table, "autotune", 0)).run()
    launched = sorted((r for r in bench.records() if r.launched), key=lambda r: r.number)
    assert truth.table.lookup(launched[0].flags).name == "s-defaults"  # vLLM's defaults at the middle KV budget
    search = [truth.table.lookup(r.flags).name for r in launched if r.role.value == "search"]
    # The sweep measures the three other configs predicted to start first, none twice (s-nostart: predicted not to).
    assert sorted(search[:3]) == ["s-bigkv", "s-fewseqs", "s-fp8"]


def test_auto_tune_sh_stays_refused(table_path, capsys):
    rc = run_mod.main(["--scenario", str(table_path), "--truth-seed", "0", "--strategy", "auto-tune-sh", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and "gpu_memory_utilization" in err and "sim-best" in err


def test_the_search_script_writes_its_cases_and_table(table_path, tmp_path, capsys):
    out = tmp_path / "search.jsonl"
    rc = search.main(["--seeds", "0-1", "--trials", "5", "--min-runs", "3", "--table", str(table_path), "--out",
                      str(out), "--strategies", "autotune", "tpe-confirm", "grid", "sim-best"])
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 * 4 + 2 and {r["case"] for r in rows} == {"autotune", "tpe-confirm", "grid", "sim-best",
                                                                     "grid-full"}
    assert all("error" not in r and r["table_snapshot"]["table_configs"] == 5 for r in rows)
    printed = capsys.readouterr().out
    assert "| autotune | 2 |" in printed and "goal (issue 19)" in printed and "not GPU" in printed


def test_the_search_script_replays_a_scenarios_starts_only(table_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(replay.SCENARIOS, "vllm-cpu-quiet", table_path)
    monkeypatch.setitem(replay.SCENARIO_STARTS, "vllm-cpu-quiet", (1, 2))
    out = tmp_path / "search.jsonl"
    rc = search.main(["--seeds", "0", "--trials", "4", "--min-runs", "2", "--scenario", "vllm-cpu-quiet", "--out",
                      str(out), "--strategies", "random", "--no-grid-full"])
    assert rc == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["table_starts"] == [1, 2] and row["table_runs"] == 10  # 5 configs x starts 1 and 2
