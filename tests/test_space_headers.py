"""Every shipped space's comment header says how to try it, with commands the CLI accepts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer

from tests.test_gpu_doc import _parse

REPO = Path(__file__).resolve().parent.parent
SPACES = sorted((REPO / "search_spaces").glob("*.yaml"))


def _header_commands(path: Path) -> list[list[str]]:
    out = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith((".venv/bin/autotune ", "autotune ")):
            out.append(shlex.split(text))
    return out


@pytest.mark.parametrize("path", SPACES, ids=lambda p: p.name)
def test_the_header_has_a_run_command_that_parses(path: Path):
    import autotune.cli  # noqa: F401  (registers the commands)
    from autotune.cli.app import app

    cmds = _header_commands(path)
    assert any(c[1] == "run" and "--space" in c for c in cmds), f"{path.name}: no `autotune run --space` in its header"
    for argv in cmds:
        _parse(typer.main.get_command(app), argv[1:])
