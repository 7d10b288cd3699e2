"""Numbers as people read them, one rule for every command's output.

0.92, not 0.9199999999999999 (what a 0.005 step gives); ``nan`` for a metric that has no
value; ``n/a`` for one that was never measured.
"""

from __future__ import annotations

import math
from typing import Any


def number(v: Any, digits: int = 6) -> str:
    """``v`` with ``digits`` significant digits if it is a float; anything else as ``str``."""
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}g}"
    return str(v)
