"""What autotune does with the flag registry: CLI arguments, unknown and unmodelled flags.

Booleans follow vLLM's ``argparse.BooleanOptionalAction``: ``--enforce-eager`` or
``--no-enforce-eager``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autotune.engine.config import FLAG_SPECS
from autotune.engine.spec import Sim, cli_option


def unknown_flags(names: Iterable[str]) -> list[str]:
    """Names that are not vLLM serve flags autotune knows (typos, V0-only or removed flags)."""
    return [n for n in names if n not in FLAG_SPECS]


def is_unmodelled(name: str) -> bool:
    """Whether the simulator ignores ``name`` although it matters on a real GPU."""
    spec = FLAG_SPECS.get(name)
    return spec is not None and spec.sim is Sim.UNMODELLED


def unmodelled_flags(flags: Mapping[str, Any]) -> list[str]:
    """Flags in ``flags`` that the simulator does not model, set to other than vLLM's default.

    A flag left at vLLM's default changes nothing, so it is no reason to refuse a simulation.
    """
    return [n for n, v in flags.items() if is_unmodelled(n) and not FLAG_SPECS[n].is_default(v)]


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def flags_to_cli_args(flags: Mapping[str, Any]) -> list[str]:
    """`vllm serve` arguments for ``flags``, as an argument list (never a shell string).

    ``None`` means "leave vLLM's default" and emits nothing. Values are passed verbatim, so
    a value with shell metacharacters reaches vLLM as one argument, unchanged.
    """
    args: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        if isinstance(value, bool):
            args.append(cli_option(name if value else "no_" + name))
        else:
            args.extend([cli_option(name), _format_value(value)])
    return args
