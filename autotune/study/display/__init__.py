"""The terminal display of a running study (rich live table, or plain lines when piped).
"""

from __future__ import annotations

from autotune.study.display.progress import MODES, Progress, describe, duration, human

__all__ = ["MODES", "Progress", "describe", "duration", "human"]
