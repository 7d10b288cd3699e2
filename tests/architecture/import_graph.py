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
NEUTRAL = frozenset({"errors", "security", "formatting", "results", "early_stop", "engine", "workload", "rundir",
                     "backend_kinds", "metrics", "files"})


def unit_of(path: Path, root: Path = ROOT) -> str:
    """The architectural unit a source file belongs to: its top-level package or module."""
    rel = path.relative_to(root).with_suffix("")
    return rel.parts[0]


DYNAMIC = ("import_module", "__import__")  # importlib.import_module(...), __import__(...)


def _dynamic_name(node: ast.Call) -> str | None:
    """The module a dynamic import with a literal name loads (None: not one)."""
    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name in DYNAMIC and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imports_of(path: Path) -> list[str]:
    """Every module ``path`` imports (absolute names; relative imports are not used here):
    ``import a.b``, ``from a.b import c`` (and ``from autotune import study``, which imports
    the package ``autotune.study``), and ``importlib.import_module`` / ``__import__`` called
    with a literal name."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import; use the absolute autotune.* name")
            out.append(node.module)
            if node.module == "autotune":  # `from autotune import study`: a package of autotune
                out += [f"autotune.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and (name := _dynamic_name(node)):
            out.append(name)
    return out


def module_edges(root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(unit, imported unit or third-party root) -> the files that make that edge."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        src = unit_of(path, root)
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "autotune" and len(parts) > 1 and parts[1] != src:
                edges[(src, parts[1])].add(str(path.relative_to(root.parent)))
            elif parts[0] in THIRD_PARTY:
                edges[(src, parts[0])].add(str(path.relative_to(root.parent)))
    return edges


# The study's subpackages, lowest first: each may import only those before it (and itself).
STUDY_LAYERS = ("trials", "analysis", "storages", "search", "loop", "display")


def study_edges(root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(study subpackage, study subpackage it imports) -> the files that make that edge. A
    module at the top of autotune/study (its __init__) counts as the subpackage ``__init__``."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted((root / "study").rglob("*.py")):
        rel = path.relative_to(root / "study").parts
        src = rel[0] if len(rel) > 1 else "__init__"
        for name in imports_of(path):
            parts = name.split(".")
            if parts[:2] == ["autotune", "study"] and len(parts) > 2 and parts[2] != src:
                edges[(src, parts[2])].add(str(path.relative_to(root.parent)))
    return edges


def internal_edges(root: Path = ROOT) -> set[tuple[str, str]]:
    return {(a, b) for a, b in module_edges(root) if b not in THIRD_PARTY}


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
