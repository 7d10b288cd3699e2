"""autotune's package-level import graph, read from the source (every import, lazy ones included).

Used by the architecture test and by ``python -m tests.architecture.import_graph`` to print the
graph that docs/architecture.md shows.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "autotune"
THIRD_PARTY = ("optuna", "ray", "mlflow")
# The neutral layer: facts and records every other package may use. They import only each other.
NEUTRAL = frozenset({"errors", "security", "formatting", "results", "early_stop", "engine", "workload", "rundir"})


def unit_of(path: Path) -> str:
    """The architectural unit a source file belongs to: its top-level package or module."""
    rel = path.relative_to(ROOT).with_suffix("")
    return rel.parts[0]


def imports_of(path: Path) -> list[str]:
    """Every module ``path`` imports (absolute names; relative imports are not used here)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import; use the absolute autotune.* name")
            out.append(node.module)
    return out


def module_edges() -> dict[tuple[str, str], set[str]]:
    """(unit, imported unit or third-party root) -> the files that make that edge."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(ROOT.rglob("*.py")):
        src = unit_of(path)
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "autotune" and len(parts) > 1 and parts[1] != src:
                edges[(src, parts[1])].add(str(path.relative_to(ROOT.parent)))
            elif parts[0] in THIRD_PARTY:
                edges[(src, parts[0])].add(str(path.relative_to(ROOT.parent)))
    return edges


def internal_edges() -> set[tuple[str, str]]:
    return {(a, b) for a, b in module_edges() if b not in THIRD_PARTY}


def mermaid() -> str:
    """The graph with the neutral layer drawn as one node (every package may use it)."""

    def node(unit: str) -> str:
        return "neutral" if unit in NEUTRAL else unit

    arrows = {(node(a), node(b)) for a, b in internal_edges() if node(a) != node(b)}
    lines = ["```mermaid", "graph TD", f"  neutral[\"neutral: {', '.join(sorted(NEUTRAL))}\"]"]
    lines += [f"  {a} --> {b}" for a, b in sorted(arrows)]
    lines.append("```")
    return "\n".join(lines)


if __name__ == "__main__":
    print(mermaid())
