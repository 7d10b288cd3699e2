"""Dependencies point the way docs/architecture.md says: a test that walks every import.

A new arrow between packages either belongs to the architecture (add it to ALLOWED and to the
doc, saying why) or is a shortcut to remove. The rules, not the current code, are the spec.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.architecture.import_graph import (
    NEUTRAL,
    ROOT,
    STUDY_LAYERS,
    THIRD_PARTY,
    internal_edges,
    mermaid,
    module_edges,
    study_edges,
)

ALLOWED: dict[str, set[str]] = {
    **{unit: NEUTRAL for unit in NEUTRAL},
    "deploy": NEUTRAL,  # GPU and model tables, resolved deployment, startup memory model
    "space": NEUTRAL | {"deploy"},
    "sim": NEUTRAL | {"deploy"},  # the simulator knows nothing of backends, study, Ray, Optuna, MLflow
    "loadgen": NEUTRAL,
    "telemetry": NEUTRAL,
    "backends": NEUTRAL | {"deploy", "sim", "loadgen", "telemetry"},
    "workers": NEUTRAL | {"backends"},
    "study": NEUTRAL | {"space", "deploy", "backends"},  # backends.base only: checked below
    "tracking": NEUTRAL | {"space", "deploy", "study"},
    "export": NEUTRAL | {"space", "deploy", "study"},
    # calibration fits the simulator to the study's records and plugs it into the strategy (the screen)
    "calibrate": NEUTRAL | {"deploy", "sim", "space", "study"},
    "service": NEUTRAL | {"space", "deploy", "study", "backends", "workers", "tracking", "calibrate"},
    "cli": None,  # the commands wire everything together
    "__init__": set(),
}

# Which packages may talk to Optuna, Ray and MLflow at all.
THIRD_PARTY_ALLOWED = {
    "optuna": {"study", "tracking", "export", "calibrate", "service", "cli"},
    "ray": {"workers", "service", "cli"},
    "mlflow": {"tracking", "service", "cli"},
}

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_every_package_is_placed_in_the_architecture():
    units = {a for a, _ in module_edges()} | {b for _, b in internal_edges()}
    assert units <= set(ALLOWED), f"packages missing from the architecture: {sorted(units - set(ALLOWED))}"


def violations(root=None) -> list[str]:
    bad = []
    edges = module_edges(root) if root is not None else module_edges()
    for (src, dst), files in sorted(edges.items()):
        if dst in THIRD_PARTY:
            if src not in THIRD_PARTY_ALLOWED[dst]:
                bad.append(f"{src} -> {dst} ({', '.join(sorted(files))})")
            continue
        allowed = ALLOWED.get(src)
        if allowed is not None and dst not in allowed:
            bad.append(f"{src} -> {dst} ({', '.join(sorted(files))})")
    return bad


def test_no_import_arrow_the_architecture_does_not_allow():
    bad = violations()
    assert not bad, "imports against the architecture:\n" + "\n".join(bad)


@pytest.mark.parametrize("planted", [
    "from autotune import study",
    "import autotune.study.loop.driver",
    "from autotune.study import driver",
    "import importlib\nimportlib.import_module('autotune.study.loop.driver')",
    "from importlib import import_module\nimport_module('autotune.tracking')",
    "__import__('autotune.backends.sim')",
    "import optuna",
])
def test_every_form_of_import_is_seen(tmp_path, planted):
    """Issue 22: a planted import of the study (or Optuna) in the simulator, in each form a
    shortcut could take, makes the architecture test fail on a copy of the package."""
    copy = tmp_path / "autotune"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    hazard = copy / "sim" / "hazard.py"
    hazard.write_text(hazard.read_text() + "\n\ndef _planted():\n" + textwrap.indent(planted, "    ") + "\n")
    bad = violations(copy)
    assert any(b.startswith("sim -> ") and "sim/hazard.py" in b for b in bad), bad


def study_violations(root=None) -> list[str]:
    """Arrows between the study's subpackages that point up the layers (STUDY_LAYERS)."""
    bad = []
    for (src, dst), files in sorted((study_edges(root) if root is not None else study_edges()).items()):
        if src == "__init__":
            continue  # the package's docstring-only __init__ may name any subpackage
        if src not in STUDY_LAYERS or dst not in STUDY_LAYERS:
            bad.append(f"study.{src} -> study.{dst}: not a subpackage of docs/architecture.md ({', '.join(sorted(files))})")
        elif STUDY_LAYERS.index(dst) > STUDY_LAYERS.index(src):
            bad.append(f"study.{src} -> study.{dst} ({', '.join(sorted(files))})")
    return bad


def test_study_subpackages_import_only_lower_layers():
    bad = study_violations()
    assert not bad, "imports against the study's layers:\n" + "\n".join(bad)


def test_every_study_module_is_in_a_subpackage():
    top = [p.name for p in (ROOT / "study").glob("*.py") if p.name != "__init__.py"]
    assert not top, f"modules at the top of autotune/study (put each in its subpackage): {top}"
    assert {p.name for p in (ROOT / "study").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(STUDY_LAYERS)


@pytest.mark.parametrize("planted", [
    "from autotune.study.loop import TrialLoop",
    "import autotune.study.search.strategy",
    "import importlib\nimportlib.import_module('autotune.study.display.progress')",
])
def test_an_upward_study_import_fails(tmp_path, planted):
    """The analysis layer reading the loop (or search, or the display) is caught in every form."""
    copy = tmp_path / "autotune"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "study" / "analysis" / "stats.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n" + textwrap.indent(planted, "    ") + "\n")
    bad = study_violations(copy)
    assert any(b.startswith("study.analysis -> ") and "analysis/stats.py" in b for b in bad), bad


def test_each_study_subpackage_exports_a_curated_surface():
    """Each subpackage's __init__ names its public API in __all__, and every name resolves."""
    import importlib

    for sub in STUDY_LAYERS:
        mod = importlib.import_module(f"autotune.study.{sub}")
        names = getattr(mod, "__all__", None)
        assert names and all(hasattr(mod, n) and not n.startswith("_") for n in names), sub
        # A name equal to one of its modules would shadow it: `import autotune.study.x.m as m`
        # would then bind the name, not the module.
        modules = {p.stem for p in (ROOT / "study" / sub).glob("*.py")}
        assert not modules & set(names), f"study.{sub} exports {sorted(modules & set(names))}, its modules' names"


def test_study_sees_only_the_backend_interface():
    """The study builds TrialRequests; which backend runs them is the workers' business."""
    from tests.architecture.import_graph import ROOT, imports_of

    offenders = [
        f"{path.relative_to(ROOT.parent)}: {name}"
        for path in (ROOT / "study").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("autotune.backends") and name != "autotune.backends.base"
    ]
    assert not offenders, offenders


def test_the_doc_draws_the_graph_as_it_is():
    text = DOC.read_text()
    assert mermaid() in text, (
        "docs/architecture.md's graph differs from the code; regenerate it with "
        "`python -m tests.architecture.import_graph` and explain any new arrow"
    )
