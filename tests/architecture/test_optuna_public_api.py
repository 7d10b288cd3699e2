"""autotune uses only Optuna's public API: an Optuna release may rename anything private.

The private names are read from Optuna itself (the pinned release), not listed by hand:
every non-dunder underscore attribute of a live Study, Trial and FrozenTrial and of the
storage classes. Any ``x.<such name>`` in autotune's source, ``self``'s own excepted, fails.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import optuna
import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "autotune"


def _private(names) -> set[str]:
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


@functools.cache
def optuna_private_names() -> set[str]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["minimize", "minimize"])
    trial = study.ask()
    trial.suggest_int("x", 0, 1)
    study.tell(trial, [0.0, 0.0])
    frozen = study.trials[0]
    names: set[str] = set()
    for obj in (study, trial, frozen):
        names |= _private(dir(obj)) | _private(vars(obj))
    for cls in (optuna.storages.BaseStorage, optuna.storages.RDBStorage, optuna.storages.InMemoryStorage):
        names |= _private(dir(cls))
    return names


def private_uses(source: str, private: set[str]) -> list[str]:
    """``line: expr.attr`` for each attribute access to one of ``private`` not on self/cls."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
                continue
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return hits


def test_the_private_names_are_found():
    private = optuna_private_names()
    assert {"_storage", "_study_id", "_trial_id"} <= private


def test_a_planted_private_access_is_caught():
    private = optuna_private_names()
    planted = "def f(study, t):\n    return study._storage.get_trial(t._trial_id)\n"
    assert sorted(private_uses(planted, private)) == ["2: study._storage", "2: t._trial_id"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_touches_optuna_private_attributes(path):
    assert private_uses(path.read_text(), optuna_private_names()) == []


def test_every_method_optunas_cache_layer_calls_on_its_backend_is_retried():
    """Optuna's cache layer calls its RDBStorage backend directly, some of those methods
    non-public: the retrying storage derives what it retries from RDBStorage itself, and this
    reads the cache layer's calls from its source, so a release that adds one cannot slip
    past the retries (set_trial_state_values retries itself)."""
    import inspect
    import re

    from optuna.storages import _cached_storage

    from autotune.study.storages.storage import _RETRIED

    called = set(re.findall(r"self\._backend\.(\w+)", inspect.getsource(_cached_storage)))
    assert {"_get_trials", "get_trial"} <= called  # the source was read
    assert called - _RETRIED == {"set_trial_state_values"}
