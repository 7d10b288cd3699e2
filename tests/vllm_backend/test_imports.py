"""The real-vLLM backend stays below the study: it imports nothing of the study, the workers,
tracking, the simulator, Optuna, Ray or MLflow (docs/architecture.md's arrows)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

FORBIDDEN = ("autotune.study", "autotune.workers", "autotune.tracking", "autotune.sim", "autotune.service",
             "autotune.cli", "optuna", "ray", "mlflow")
PACKAGE = Path(__file__).resolve().parents[2] / "autotune" / "backends" / "vllm"


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_no_module_of_backends_vllm_names_a_forbidden_package():
    hits = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            hits += [f"{path.name}:{node.lineno}: {n}" for n in names if _forbidden(n)]
    assert not hits, hits


def test_importing_the_backend_loads_no_forbidden_package():
    # Transitively, in a fresh interpreter: what a Ray worker running vLLM trials pays for.
    code = ("import sys, autotune.backends.vllm, autotune.backends.vllm.backend\n"
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not [m for m in loaded if _forbidden(m)]
