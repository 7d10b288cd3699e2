"""The table's measuring command (experiments/vllm_cpu/measure.py): its stop time."""

import datetime as dt

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
