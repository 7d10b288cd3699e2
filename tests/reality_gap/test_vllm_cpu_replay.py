"""The replay of experiments/vllm_cpu's measured table (issue 19), on a SYNTHETIC table.

The table written here is SYNTHETIC: made-up numbers in the format of experiments/vllm_cpu/results/runs.jsonl
(measure.py), so that each recorded run can be told apart. No vLLM is needed; the last tests replay the
committed pilot table (real CPU measurements) the way a fresh clone would.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.backends.base import ServerSpec, TrialRequest
from experiments.reality_gap import run as run_mod
from experiments.vllm_cpu import fidelity, replay
from tests.reality_gap.test_contract import KEYS  # the contract's keys and types

REPO = Path(__file__).resolve().parents[2]
KV4000, KV6000, KV3000 = 32768000, 49152000, 24576000

# SYNTHETIC configs (searched flags as measure.py records them: unset = vLLM's CPU default).
CONFIGS = {
    "s-defaults": {"kv_cache_memory_bytes": KV4000},
    "s-bigkv": {"kv_cache_memory_bytes": KV6000},
    "s-fp8": {"kv_cache_memory_bytes": KV4000, "kv_cache_dtype": "fp8", "max_num_seqs": 16,
              "max_num_batched_tokens": 1024, "block_size": 64},
    "s-fewseqs": {"kv_cache_memory_bytes": KV4000, "max_num_seqs": 6, "max_num_batched_tokens": 512,
                  "block_size": 32},
    "s-nostart": {"kv_cache_memory_bytes": KV3000},  # a startup OOM in every start
    "s-tworuns": {"kv_cache_memory_bytes": KV6000, "max_num_seqs": 32},  # 2 starts only: not in the table
}
BASE_P99 = {"s-defaults": 18.0, "s-bigkv": 13.0, "s-fp8": 14.5, "s-fewseqs": 24.0, "s-tworuns": 11.0}


def synthetic_row(config: str, start: int, landscape: str = "synthetic0") -> dict:
    """One SYNTHETIC run: p99 = base + start² / 10 + 0.001 * config index: every run recognisable, none the mean."""
    row = {"landscape": landscape, "config": config, "start": start, "flags": CONFIGS[config], "synthetic": True,
           "requests": 64.0, "crashes": 0.0, "error_per_1k": 0.0, "loadavg_before": [1.0, 1.0, 1.0]}
    if config == "s-nostart":
        return {**row, "status": "startup_failed", "failure_class": "startup_oom",
                "failure_reason": "SYNTHETIC: KV cache is needed, which is larger than the available KV cache memory",
                "failure_evidence": [], "requests_ok": 0.0, "oom_per_1k": 1000.0, "p99_e2e_s": None,
                "startup_s": 20.0, "duration_s": 0.0, "gpu_time_s": 20.0 + start}
    p99 = BASE_P99[config] + start ** 2 / 10 + 0.001 * list(CONFIGS).index(config)
    return {**row, "status": "ok", "failure_class": "none", "failure_reason": "", "failure_evidence": [],
            "requests_ok": 64.0, "oom_per_1k": 0.0, "p99_e2e_s": p99, "p90_e2e_s": p99 * 0.8,
            "p50_e2e_s": p99 * 0.5, "mean_e2e_s": p99 * 0.55, "p50_ttft_s": p99 * 0.1, "p99_ttft_s": p99 * 0.3,
            "mean_ttft_s": p99 * 0.12, "mean_tpot_s": 0.06 + start / 1000, "p99_tpot_s": 0.09,
            "output_tok_per_s": 200.0 - start, "preemptions": 3.0, "kv_cache_tokens": 3968.0,
            "prefix_cache_hit_rate": 0.44, "kv_cache_usage_max": 1.0, "startup_s": 27.0 + start,
            "duration_s": 30.0 + start, "gpu_time_s": 57.0 + start}


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic_runs.jsonl"
    rows = [synthetic_row(c, s) for s in range(3) for c in CONFIGS if not (c == "s-tworuns" and s == 2)]
    rows.append(synthetic_row("s-defaults", 0, landscape="other"))  # another landscape: ignored
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut short')
    return path


def request(flags: dict, number: int = 0) -> TrialRequest:
    space = replay.load_space(replay.SPACE)
    return TrialRequest(number, ServerSpec(model="m", gpu="cpu"), {**space.fixed_flags(), **flags}, space.workload)


def test_the_table_holds_configs_with_all_their_starts(table_path):
    t = replay.Table.load(table_path)
    assert t.landscape == "synthetic0"
    assert sorted(c.name for c in t.configs.values()) == ["s-bigkv", "s-defaults", "s-fewseqs", "s-fp8", "s-nostart"]
    assert t.skipped == {"s-tworuns": 2} and t.runs == 15


def test_the_replay_draws_only_recorded_runs_seeded(table_path):
    t = replay.Table.load(table_path)

    def answers(seed: int) -> list[tuple[str, float]]:
        b = replay.ReplayBackend(t, seed)
        out = []
        for i in range(6):
            for name in ("s-defaults", "s-fp8"):
                res = b.run_trial(request(CONFIGS[name], i))
                out.append((name, res.metrics()["p99_e2e_s"], bool(res.warnings)))
        return out

    a0 = answers(0)
    assert a0 == answers(0)  # seeded
    assert any(answers(s) != a0 for s in (1, 2, 3))
    for name in ("s-defaults", "s-fp8"):
        recorded = {synthetic_row(name, s)["p99_e2e_s"] for s in range(3)}
        got = [p for n, p, _ in a0 if n == name]
        assert set(got) <= recorded  # a recorded run, never a mean
        assert set(got[:3]) == recorded  # the first 3 answers are the 3 different starts
        assert [w for n, _, w in a0 if n == name] == [False] * 3 + [True] * 3  # a run served again says so
        mean = sum(recorded) / 3
        assert all(not math.isclose(p, mean) for p in got)


def test_a_replayed_result_carries_the_recorded_aggregates(table_path):
    t = replay.Table.load(table_path)
    res = replay.ReplayBackend(t, 0).run_trial(request(CONFIGS["s-bigkv"]))
    row = next(synthetic_row("s-bigkv", s) for s in range(3)
               if synthetic_row("s-bigkv", s)["p99_e2e_s"] == res.metrics()["p99_e2e_s"])
    m = res.metrics()
    for k in ("p99_e2e_s", "p90_e2e_s", "p50_e2e_s", "mean_ttft_s", "mean_tpot_s", "output_tok_per_s",
              "startup_s", "duration_s", "gpu_time_s", "preemptions", "kv_cache_tokens", "oom_per_1k"):
        assert m[k] == pytest.approx(row[k]), k
    assert m["requests"] == 64 and m["requests_ok"] == 64 and m["server_prefix_cache_hit_rate"] == 0.44
    assert math.isnan(m["p95_e2e_s"]) and math.isnan(m["p75_ttft_s"])  # not recorded: NaN, never made up
    failed = replay.ReplayBackend(t, 0).run_trial(request(CONFIGS["s-nostart"]))
    fm = failed.metrics()
    assert failed.status == "startup_failed" and fm["oom_per_1k"] == 1000.0 and math.isnan(fm["p99_e2e_s"])


def test_an_unknown_config_is_refused(table_path):
    t = replay.Table.load(table_path)
    b = replay.ReplayBackend(t, 0)
    with pytest.raises(replay.NotInTable, match="not in the measured table"):
        b.run_trial(request({"kv_cache_memory_bytes": KV4000, "max_num_seqs": 7}))
    with pytest.raises(replay.NotInTable):
        b.run_trial(request(CONFIGS["s-tworuns"]))  # too few starts: not in the table either
    truth = replay.ReplayTruth("x", 0, t)
    with pytest.raises(replay.NotInTable):
        truth.value({"kv_cache_memory_bytes": KV6000, "block_size": 32})
    assert not b.log  # nothing was answered


def test_vllm_defaults_given_explicitly_are_the_unset_config(table_path):
    t = replay.Table.load(table_path)
    explicit = {"kv_cache_memory_bytes": KV4000, "max_num_seqs": 128, "max_num_batched_tokens": 2048,
                "block_size": 128, "enable_prefix_caching": True, "enable_chunked_prefill": True,
                "kv_cache_dtype": "auto"}
    assert t.lookup(explicit).name == "s-defaults"


def test_the_truth_is_the_best_mean_with_its_interval(table_path):
    truth = replay.ReplayTruth("x", 0, replay.Table.load(table_path))
    best = truth.best
    assert best["config"] == "s-bigkv" and best["p99_e2e_s"] == pytest.approx(13.0 + 0.5 / 3 + 0.001)
    lo, hi = best["interval_95"]
    assert lo < best["p99_e2e_s"] < hi
    assert not truth.value(CONFIGS["s-nostart"])["started"]


def test_tied_means_a_test_of_the_runs_not_a_mean_inside_the_bests_interval(tmp_path):
    """s-bigkv is best (about 13.2 s, a spread of 0.2 s); s-fewseqs (24 s) is worse beyond any noise; s-fp8's
    runs spread widely around 14.2 s, so a test cannot tell it from the best: tied. A config that fails to
    start is never tied; the best is tied with itself and worse than nothing."""
    noisy = {0: 12.0, 1: 14.0, 2: 16.6}
    rows = [synthetic_row(c, s) for s in range(3) for c in CONFIGS if c != "s-tworuns"]
    rows = [{**r, "p99_e2e_s": noisy[r["start"]]} if r["config"] == "s-fp8" else r for r in rows]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth = replay.ReplayTruth("x", 0, replay.Table.load(path))
    assert truth.best["config"] == "s-bigkv"
    assert truth.tied(CONFIGS["s-bigkv"]) is True and truth.worse(CONFIGS["s-bigkv"], CONFIGS["s-bigkv"]) is False
    assert truth.tied(CONFIGS["s-fp8"]) is True  # 8 % above the best's mean, within the noise of its runs
    assert truth.tied(CONFIGS["s-fewseqs"]) is False and truth.worse(CONFIGS["s-fewseqs"], CONFIGS["s-fp8"])
    assert truth.tied(CONFIGS["s-nostart"]) is False
    assert truth.worse(CONFIGS["s-bigkv"], CONFIGS["s-fewseqs"]) is False  # one-sided: better is not worse


@pytest.mark.parametrize("strategy", ["random", "tpe", "tpe-confirm", "grid"])
def test_the_scenario_json_has_the_contract_keys(table_path, strategy, capsys):
    rc = run_mod.main(["--scenario", str(table_path), "--truth-seed", "3", "--strategy", strategy, "--trials", "6",
                       "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and len(out) == 1
    d = json.loads(out[0])
    for key, kind in KEYS.items():
        assert isinstance(d[key], kind), (key, d[key])
    assert d["truth_family"] == replay.FAMILY and "CPU" in d["note"] and "not GPU" in d["note"]
    assert "not GPU hours" in d["hours_note"]
    assert d["launched"] == 6 and d["replay_answers"] == 6 and d["true_best_config"] == "s-bigkv"
    names = {replay.params_key(c.params) for c in replay.Table.load(table_path).configs.values()}
    assert replay.params_key(d["exported_flags"]) in names
    assert d["true_best"] == pytest.approx(13.0 + 0.5 / 3 + 0.001)
    assert math.isclose(d["regret"], d["true_main"] / d["true_best"] - 1, rel_tol=1e-9)


@pytest.mark.parametrize("rows, needle", [
    ([], "no recorded runs"),
    (['{"a": 1}'], "row 1 is not a recorded run"),
    (['{"landscape": "x", "config": "c", "start": 0, "flags": 3}'], "'flags' must be a mapping"),
    (['{"landscape": "x", "config": "c", "start": 0, "flags": {"max_num_seqs": "many"}}'], "config c's flags"),
    (['{"landscape": "x", "config": "c", "start": 0, "flags": {"kv_cache_dtype": "int3"}}'], "outside the replay's space"),
])
def test_a_runs_file_that_is_not_a_table_is_one_line(tmp_path, capsys, rows, needle):
    """A hostile or foreign ``*.jsonl`` gets one line naming the row or config, exit 2, no traceback."""
    path = tmp_path / "foreign.jsonl"
    path.write_text("".join(r + "\n" for r in rows))
    rc = run_mod.main(["--scenario", str(path), "--truth-seed", "0", "--strategy", "tpe", "--min-runs", "1", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_runs_file_and_an_unmet_min_runs_are_refused(table_path, tmp_path, capsys):
    rc = run_mod.main(["--scenario", str(tmp_path / "none.jsonl"), "--truth-seed", "0", "--strategy", "tpe"])
    assert rc == 2 and "no such runs file" in capsys.readouterr().err
    # vllm-cpu falls back to the pilot only while the full table is measured, never for an explicit --min-runs.
    rc = run_mod.main(["--scenario", "vllm-cpu", "--truth-seed", "0", "--strategy", "tpe", "--min-runs", "99"])
    assert rc == 2 and "lower --min-runs" in capsys.readouterr().err
    rc = run_mod.main(["--scenario", str(table_path), "--truth-seed", "0", "--strategy", "tpe",
                       "--truth-family", "constants"])
    assert rc == 2 and "a measured table is its own truth" in capsys.readouterr().err


def test_the_ceiling_measures_every_table_config(table_path, capsys):
    """grid-all on a table: every config once (a table of 5 leaves no room for confirmation runs in a budget of 5)."""
    assert run_mod.main(["--scenario", str(table_path), "--truth-seed", "0", "--strategy", "grid-all", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    n = d["table_configs"]
    assert d["configs_measured"] == n == 5 and d["launched"] == n + d["confirmation_runs"]


def test_the_gpu_procedure_is_refused(table_path, capsys):
    # autotune and sim-best run on the CPU host's model now (tests/reality_gap/test_vllm_cpu_search.py).
    rc = run_mod.main(["--scenario", str(table_path), "--truth-seed", "0", "--strategy", "auto-tune-sh", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and "runnable there: random, tpe, tpe-confirm, grid, autotune" in err, err


def test_the_sampler_proposes_table_configs_only(table_path):
    from experiments.reality_gap.strategies import variant
    from experiments.reality_gap.study import build

    truth = replay.ReplayTruth("x", 0, replay.Table.load(table_path))
    keys = {replay.params_key(c.params) for c in truth.table.configs.values()}
    for strategy in ("random", "tpe", "grid"):
        space = variant(truth.space, "random" if strategy == "grid" else strategy)
        bench = build(space, truth.backend(), 0, 12, wrap_sampler=replay.sampler_wrapper(truth.table, strategy, 0)).run()
        recs = [r for r in bench.records() if r.launched]
        assert len(recs) == 12
        assert all(truth.table.key(r.flags) in keys for r in recs)
        if strategy == "grid":  # every table config before any repeat
            assert len({truth.table.key(r.flags) for r in recs[:5]}) == 5


def test_the_fidelity_json_has_its_keys(table_path, capsys):
    assert fidelity.main(["--table", str(table_path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for k in ("calibration_configs", "heldout_configs", "p99_median_abs_err", "p99_p90_abs_err", "ttft_median_abs_err",
              "tpot_median_abs_err", "spearman_p99", "noise_cv_p99", "p99_noise_floor", "views", "duration_median_abs_err",
              "preemptions_median_abs_diff"):
        assert k in d
    assert 1 <= len(d["calibration_configs"]) <= 5 and d["heldout_configs"]
    assert not set(d["calibration_configs"]) & set(d["heldout_configs"])
    assert d["calibration_configs"][0] == "s-defaults"
    assert d["noise_cv_p99"] > 0
    if d["missing"] is not None:  # a part that cannot run yet is named, and nothing that needed it is given
        assert d["p99_median_abs_err"] is None and d["spearman_p99"] is None and d["views"] is None
    else:
        assert d["p99_median_abs_err"] >= 0
        for v in ("p99_over_duration", "p99_over_startup"):
            assert set(d["views"][v]) == {"median_abs_err", "p90_abs_err", "spearman", "noise_cv", "noise_floor"}
            assert d["views"][v]["median_abs_err"] >= 0


@pytest.mark.parametrize("args, needle", [
    (["--calibration-configs", "0"], "--calibration-configs 0: from 1 to 5"),
    (["--calibration-configs", "6"], "--calibration-configs 6: from 1 to 5"),
    (["--min-runs", "0"], "--min-runs 0"),
])
def test_fidelity_refuses_a_calibration_set_it_would_not_run(table_path, capsys, args, needle):
    """Beyond the issue's 5 configs the fit is refused, not clamped: no figure is printed for a set not asked for."""
    assert fidelity.main(["--table", str(table_path), *args, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and needle in captured.err and len(captured.err.strip().splitlines()) == 1


def test_the_speed_free_views_cancel_the_machines_speed_and_the_noise_floor_follows_the_spread():
    """A start on a machine twice as slow stretches p99, the benchmark and the server's start alike: the views'
    ratios are the same in both starts, so their CV is 0 where p99's is not; the noise floor is the median error
    of an n-run mean of that spread."""
    fast = synthetic_row("s-bigkv", 0)
    slow = {**fast, "start": 1, **{k: 2 * fast[k] for k in ("p99_e2e_s", "duration_s", "startup_s")}}
    c = replay.Config("s-bigkv", fast["flags"], {}, (fast, slow))
    assert fidelity.values(c, "p99") == [fast["p99_e2e_s"], slow["p99_e2e_s"]] and c.cv() > 0.4
    for view, den in (("p99_over_duration", "duration_s"), ("p99_over_startup", "startup_s")):
        assert fidelity.values(c, view) == pytest.approx([fast["p99_e2e_s"] / fast[den]] * 2)
        assert fidelity._cv(fidelity.values(c, view)) == pytest.approx(0.0, abs=1e-12)
        assert fidelity.noise_floor([c], view) == pytest.approx(0.0, abs=1e-12)
    assert fidelity.noise_floor([c]) == pytest.approx(0.6745 * c.cv() / math.sqrt(2))
    assert math.isnan(fidelity.VIEWS["p99_over_duration"]({**fast, "duration_s": 0.0}))  # no benchmark: no value


def test_a_fresh_clone_replays_the_committed_pilot_without_vllm():
    """The committed pilot (real CPU measurements), through the contract's command, in a process that
    could not import vLLM even if it were installed."""
    code = ("import sys; sys.modules['vllm'] = None; from experiments.reality_gap.run import main; "
            "sys.exit(main(['--scenario', 'vllm-cpu-pilot', '--truth-seed', '0', '--strategy', 'random', "
            "'--trials', '5', '--json']))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["table"] == "experiments/vllm_cpu/results/pilot.jsonl" and d["table_configs"] >= 2
    assert d["launched"] == 5 and "not GPU" in d["note"]


def test_the_run_spread_shows_a_speed_factor_shared_by_a_runs_timings():
    """Two starts, the second on a machine twice as slow: p99, duration and startup spread alike and their
    residuals move together, while the ratios do not spread at all."""
    fast = synthetic_row("s-bigkv", 0)
    slow = {**fast, "start": 1, **{k: 2 * fast[k] for k in ("p99_e2e_s", "duration_s", "startup_s")}}
    other = synthetic_row("s-fp8", 0)
    other_slow = {**other, "start": 1, **{k: 1.5 * other[k] for k in ("p99_e2e_s", "duration_s", "startup_s")}}
    configs = [replay.Config("a", fast["flags"], {}, (fast, slow)),
               replay.Config("b", other["flags"], {}, (other, other_slow))]
    d = fidelity.run_spread(configs)
    assert d["p99_e2e_s"]["df"] == 2 and d["p99_e2e_s"]["log_sd"] > 0.3
    assert d["startup_s"]["log_sd"] == pytest.approx(d["p99_e2e_s"]["log_sd"])
    assert d["p99_over_startup"]["log_sd"] == pytest.approx(0.0, abs=1e-12)
    assert d["p99_residual_correlation"]["startup_s"] == pytest.approx(1.0)


def test_a_scenario_of_chosen_starts_keeps_only_their_runs(table_path, monkeypatch):
    """vllm-cpu-quiet is the table's runs of the quiet machine's starts only: the truth, the draws and the
    table's size come from those runs (here SYNTHETIC starts 1 and 2 of the synthetic table)."""
    t = replay.Table.load(table_path, min_runs=2, starts=(1, 2))
    assert all({r["start"] for r in c.runs} == {1, 2} for c in t.configs.values())
    assert "s-tworuns" not in {c.name for c in t.configs.values()}  # it has start 1 only of those
    monkeypatch.setitem(replay.SCENARIOS, "vllm-cpu-quiet", table_path)
    monkeypatch.setitem(replay.SCENARIO_STARTS, "vllm-cpu-quiet", (1, 2))
    truth = replay.ReplayTruth.load("vllm-cpu-quiet", 0, min_runs=2)
    assert truth.best["config"] == "s-bigkv"
    assert truth.best["p99_e2e_s"] == pytest.approx(13.0 + (0.1 + 0.4) / 2 + 0.001)  # the mean of starts 1 and 2
    assert truth.describe()["table_starts"] == [1, 2]
    drawn = {truth.backend().draw(truth.table.by_name("s-fp8"))[0]["start"] for _ in range(6)}
    assert drawn <= {1, 2}
    # Three starts among two rounds cannot be had: refused in one line, no pilot put in its place.
    with pytest.raises(ValueError, match="among starts"):
        replay.table_for("vllm-cpu-quiet")


def test_the_committed_tables_scenarios_replay_their_declared_starts():
    """The committed table (real CPU measurements): vllm-cpu is its starts 0-3 and vllm-cpu-quiet its starts 3-5,
    every config with all of them; a round measured later changes neither."""
    for scenario, starts in (("vllm-cpu", {0, 1, 2, 3}), ("vllm-cpu-quiet", {3, 4, 5})):
        t = replay.table_for(scenario)
        assert len(t) == 48 and all({r["start"] for r in c.runs} == starts for c in t.configs.values()), scenario
