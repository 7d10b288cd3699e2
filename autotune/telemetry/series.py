"""Thinning a time series to a bounded length, so it can travel inside a trial's result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def thin(items: Sequence[T], points: int) -> list[T]:
    """At most ``points`` + 1 items, evenly spaced, the first and the last always kept.

    A long trial samples for hours; a result Ray ships back and MLflow stores should stay
    small while still showing the whole run's shape, its end included (where a death shows).
    """
    if len(items) <= points:
        return list(items)
    step = len(items) / points
    return [items[int(i * step)] for i in range(points)] + [items[-1]]
