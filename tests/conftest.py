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
    (a few minutes), ``.ci/run`` runs everything. Other slow modules say so themselves."""
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.slow)


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
