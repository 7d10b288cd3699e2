"""What people read in the MLflow UI: run names and numbers.

A list of runs named ``trial-0041`` says nothing until each is opened. A run is named by
its role and number, then the searched flags it ran with, e.g.
``search-0041 gmu=0.92 mns=128 bs=32 eager no-prefix-caching``, so the runs table reads
as a list of configs. Flag names are shortened by one rule (the initials of their words;
booleans by their words without the leading verb), written once here and explained in
the experiment's description (see :func:`abbreviations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# Booleans are named after what they switch on: `enforce_eager` -> eager / no-eager.
_VERBS = ("enable_", "enforce_", "use_")


def for_people(v: Any) -> str:
    """A value as people write it: 6 significant digits for floats (0.92, not
    0.9199999999999999, which is what a 0.005 step gives), everything else as is."""
    if isinstance(v, float):
        return repr(float(f"{v:.6g}"))
    return "None" if v is None else str(v)


def abbreviations(names: Iterable[str], bools: Iterable[str] = ()) -> dict[str, str]:
    """Short name per flag. Names two flags would share are kept in full: the name must
    say which flag it is."""
    bools = set(bools)
    short = {n: _short(n, n in bools) for n in names}
    taken: dict[str, int] = {}
    for s in short.values():
        taken[s] = taken.get(s, 0) + 1
    return {n: (s if taken[s] == 1 else n) for n, s in short.items()}


def flags_label(values: Mapping[str, Any], short: Mapping[str, str]) -> str:
    """``gmu=0.92 mns=128 eager no-prefix-caching`` for the searched flags in ``values``."""
    parts = []
    for name, v in values.items():
        s = short.get(name, name)
        if isinstance(v, bool):
            parts.append(s if v else f"no-{s}")
        else:
            parts.append(f"{s}={for_people(v)}")
    return " ".join(parts)


def _short(name: str, is_bool: bool) -> str:
    if is_bool:
        for verb in _VERBS:
            if name.startswith(verb) and len(name) > len(verb):
                name = name[len(verb):]
                break
        return name.replace("_", "-")
    words = [w for w in name.split("_") if w]
    return "".join(w[0] for w in words) if len(words) > 1 else name
