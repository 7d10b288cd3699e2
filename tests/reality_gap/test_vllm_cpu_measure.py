"""The table's measuring command (experiments/vllm_cpu/measure.py): its stop time."""

import datetime as dt
import json

from experiments.vllm_cpu.measure import next_utc


def at(h: int, m: int) -> dt.datetime:
    return dt.datetime(2026, 12, 4, h, m, 30, tzinfo=dt.UTC)


def test_a_stop_time_later_today_is_today():
    assert next_utc("23:30", at(22, 58)) == dt.datetime(2026, 12, 4, 23, 30, tzinfo=dt.UTC).timestamp()


def test_a_stop_time_past_midnight_is_tomorrow_not_the_past():
    # Said at 22:58, 00:55 is two hours away; read as today's it had passed and no run started.
    assert next_utc("00:55", at(22, 58)) == dt.datetime(2026, 12, 5, 0, 55, tzinfo=dt.UTC).timestamp()


def test_the_current_minute_is_tomorrow():
    assert next_utc("22:58", at(22, 58)) == dt.datetime(2026, 12, 5, 22, 58, tzinfo=dt.UTC).timestamp()


def test_the_summary_of_a_scenario_reads_its_starts_only(tmp_path):
    from experiments.vllm_cpu.measure import summary
    from tests.reality_gap.test_vllm_cpu_replay import synthetic_row

    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps({**synthetic_row("s-bigkv", s), "wall_s": 60.0}) + "\n" for s in range(5)))
    (every,) = summary(path)
    (late,) = summary(path, starts=(3, 4))
    assert every["runs"] == 5 and late["runs"] == 2
    assert late["p99_mean_s"] == round(13.001 + (0.9 + 1.6) / 2, 3)  # SYNTHETIC: base + start² / 10


def test_the_speed_of_each_start_is_its_p99_over_the_configs_mean():
    from experiments.vllm_cpu.measure import speed_by_start

    # SYNTHETIC: start 1 ran 1.5x slower than start 0 in both configs; a config measured once says nothing.
    table = [{"p99_runs_s": [10.0, 15.0], "p99_starts": [0, 1], "p99_mean_s": 12.5},
             {"p99_runs_s": [4.0, 6.0], "p99_starts": [0, 1], "p99_mean_s": 5.0},
             {"p99_runs_s": [99.0], "p99_starts": [2], "p99_mean_s": 99.0}]
    assert speed_by_start(table) == {0: 0.8, 1: 1.2}
