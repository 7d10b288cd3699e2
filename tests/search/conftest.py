"""The search benchmark's modules live in experiments/search (not a package)."""

from __future__ import annotations

import sys
from pathlib import Path

SEARCH = Path(__file__).resolve().parents[2] / "experiments" / "search"
if str(SEARCH) not in sys.path:
    sys.path.insert(0, str(SEARCH))
