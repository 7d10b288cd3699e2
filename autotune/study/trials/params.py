"""From a search space to Optuna suggestions, and the declarative constraints.

Conditional params (``when``) are suggested only if their condition holds, so Optuna
sees them as absent, not as noise. Constraints are checked on values, never evaluated
as code.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.space.schema import Constraint, ParamSpec, SearchSpace

_OPS = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
    "!=": operator.ne,
}


def _active(p: ParamSpec, values: Mapping[str, Any]) -> bool:
    return all(values.get(k) == v for k, v in (p.when or {}).items())


def _ordered(space: SearchSpace) -> list[str]:
    """Params in an order where every ``when`` dependency comes first."""
    done: list[str] = []
    pending = list(space.params)
    while pending:
        progressed = False
        for name in list(pending):
            if all(d in done for d in (space.params[name].when or {})):
                done.append(name)
                pending.remove(name)
                progressed = True
        if not progressed:  # a cycle: keep file order; _active then sees missing deps
            done.extend(pending)
            break
    return done


def suggest_params(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _ordered(space):
        p = space.params[name]
        if _active(p, values):
            values[name] = _suggest(trial, name, p)
    return values


def _suggest(trial: optuna.Trial, name: str, p: ParamSpec) -> Any:
    if p.type == "float":
        v = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)  # type: ignore[arg-type]
        # Stepped floats come back as 0.9249999999999999; vLLM and humans want 0.925.
        return round(v, 6) if p.step else v
    if p.type == "int":
        return trial.suggest_int(name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)  # type: ignore[arg-type]
    if p.type == "bool":
        return trial.suggest_categorical(name, [False, True])
    return trial.suggest_categorical(name, list(p.choices or []))


def _value(ref: str | float, env: Mapping[str, Any]) -> Any:
    return env.get(ref) if isinstance(ref, str) else ref


def _holds(c: Constraint, env: Mapping[str, Any]) -> bool | None:
    """True/False, or None when the constraint does not apply (condition off, value unset)."""
    if any(env.get(k) != v for k, v in c.when.items()):
        return None
    left, right = env.get(c.left), _value(c.right, env)
    if left is None or right is None:
        return None
    return bool(_OPS[c.op](left, right))


def _repair(c: Constraint, p: ParamSpec, right: float) -> float | int | None:
    """The nearest in-range value of ``left`` that satisfies ``left op right``, or None."""
    assert p.low is not None and p.high is not None
    eps = 1 if p.type == "int" else 1e-9
    target = {">=": right, ">": right + eps, "<=": right, "<": right - eps, "==": right}.get(c.op)
    if target is None or not (p.low <= target <= p.high):
        return None
    if p.step:
        steps = (target - p.low) / p.step
        steps = math.ceil(steps) if c.op in (">=", ">") else math.floor(steps)
        target = p.low + steps * p.step
    return int(target) if p.type == "int" else float(target)


def check_constraints(
    params: dict[str, Any], space: SearchSpace, flags: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Apply the space's constraints to sampled ``params``.

    Returns the (possibly repaired) params and the messages of constraints that still
    fail; a non-empty list means the sample must not launch.
    """
    params = dict(params)
    violated: list[str] = []
    for i, c in enumerate(space.constraints):
        env = {**flags, **params}
        ok = _holds(c, env)
        if ok is None or ok:
            continue
        if c.action == "repair":
            fixed = _repair(c, space.params[c.left], float(_value(c.right, env)))
            if fixed is not None:
                params[c.left] = fixed
                continue
        violated.append(c.message or c.name or f"constraints[{i}]: {c.left} {c.op} {c.right}")
    return params, violated
