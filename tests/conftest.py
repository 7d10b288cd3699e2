"""Shared fixtures. One Ray cluster per test session: ray.init costs ~8 s."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

REPO = Path(__file__).resolve().parent.parent
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test on real vLLM is also ``slow``: ``pytest -m "not slow"`` is the quick loop
    (a few minutes), ``.ci/run`` runs everything. Other slow modules say so themselves.

    On an xdist worker the groups (below) holding a slow test come first, collection order
    otherwise: the long ones start at once and the many quick modules fill both workers at
    the end. (The workers' order is the order the controller hands the groups out in.)"""
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):
        slow = {xdist_group(item.nodeid) for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: xdist_group(item.nodeid) not in slow)  # stable


# --- pytest-xdist: pyproject's addopts run two workers, `--dist loadscope` --------------------
# A group of tests runs whole on one worker, in order. Tests that share a module- or
# session-scoped fixture (a study, real vLLM's runs, a server) must stay together, so a module
# is a group, and modules that share one are joined here:
#  - tests/integration/test_vllm_cpu.py and the contract suite read the same real-vLLM runs
#    (the session's real_vllm below);
#  - the PostgreSQL tests: two of them restart the server (the pg_url fixture also holds a
#    lock, tests/reliability/conftest.py, for any elsewhere).
XDIST_GROUPS = {
    "tests/integration/test_vllm_cpu.py": "real-vllm",
    "tests/contract/test_backend_contract.py": "real-vllm",
    "tests/reliability/test_postgres.py": "postgres",
    "tests/reliability/test_security.py": "postgres",
}


def xdist_group(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return XDIST_GROUPS.get(module, module)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown to pytest without it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadscope`` with the groups above as its scopes. (xdist's own loadgroup marks
    do not reach its scheduler under pytest 9, whose node ids it can no longer rewrite.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


TERMINAL_SIZE_VARS = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(xdist's controller) The terminal size variables as this session's environment has
    them: GNU readline, once imported here, exports COLUMNS=80 and LINES=24 at the C level,
    which the workers would inherit, and the CLI's tables would fit 80 columns, not a pipe's."""
    node.workerinput["terminal_size_vars"] = {k: os.environ.get(k) for k in TERMINAL_SIZE_VARS}


def pytest_configure(config: pytest.Config) -> None:
    for k, v in getattr(config, "workerinput", {}).get("terminal_size_vars", {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray with 4 logical GPUs (none are real): 2 workers x 2 GPUs, as on A100 pairs."""
    import ray

    if not ray.is_initialized():
        # address="local": always a fresh cluster of our own, never one a `ray start` left running.
        ray.init(address="local", num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    # Left running for the session; Ray shuts down at interpreter exit.


# --- real vLLM (the CPU build): helpers in tests/integration/conftest.py ----------------------

@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The vLLM CPU venv's python; skips without it, fails under AUTOTUNE_REQUIRE_INTEGRATION=1."""
    from tests.integration.conftest import VLLM_PYTHON, _check_vllm

    why = _check_vllm()
    if why:
        if os.environ.get("AUTOTUNE_REQUIRE_INTEGRATION") == "1":
            pytest.fail(f"AUTOTUNE_REQUIRE_INTEGRATION=1 but {why}")
        pytest.skip(why)
    return str(VLLM_PYTHON)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tests.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen2")


@pytest.fixture(scope="session")
def real_vllm(vllm_python, tiny_model):
    """Real vLLM's runs of the backend contract's scenarios (tests/contract/adapters.py), each
    run once per session: the contract suite and tests/integration/test_vllm_cpu.py read the
    same startup failures rather than starting the same refused server twice."""
    from tests.contract.adapters import RealVllmAdapter

    adapter = RealVllmAdapter(vllm_python, tiny_model)
    yield adapter
    adapter.close()


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Invoke the CLI entry point in-process, as `autotune ARGS` would, and capture output."""
    from autotune.cli import main

    old = sys.argv
    sys.argv = ["autotune", *args]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def sqlite_study_ready(db: Path) -> bool:
    """Whether a driver has finished creating its Optuna SQLite DB (the product's own check)."""
    from autotune.cli.common import sqlite_study_ready as ready

    return ready(db)


def with_setting(data: dict, dotted: str, value) -> dict:
    """A deep copy of ``data`` with ``a.b.c`` set to ``value`` (intermediate dicts created)."""
    import copy

    out = copy.deepcopy(data)
    cur = out
    *parents, last = dotted.split(".")
    for k in parents:
        cur = cur.setdefault(k, {})
    cur[last] = value
    return out
