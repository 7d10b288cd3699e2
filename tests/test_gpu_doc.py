"""docs/gpu.md's commands are the ones that work: each `autotune` and `ray` command is parsed by
the real CLI (options, values, subcommands), the files they name exist in the repository, `pip`
extras exist in pyproject.toml, and every other command is a known tool. The walkthrough's
first study runs on the simulator in tests/study (the same command, with --backend sim)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import click
import pytest
import typer

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "gpu.md"
INSTALL = "/opt/autotune"  # where the walkthrough clones the repository
# Commands the walkthrough uses that are not autotune's, Ray's or pip's: checked by name only.
OTHER_TOOLS = {"sudo", "git", "python3", "export", "cd", "kubectl", "vllm", "huggingface-cli"}


def commands() -> list[list[str]]:
    """Every command of the doc's ```bash blocks, as argument lists (continuations joined)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            for part in re.split(r"\s&&\s", line):
                out.append(shlex.split(part))
    return out


def _program(argv: list[str]) -> str:
    return Path(argv[0]).name


def _parse(group: click.Command, argv: list[str]) -> None:
    """Parse ``argv`` as the CLI would, down to the leaf command, without running anything."""
    ctx = group.make_context(group.name or "cli", list(argv), resilient_parsing=False)
    cmd: click.Command = group
    while isinstance(cmd, click.Group):
        args = [*getattr(ctx, "_protected_args", ctx.protected_args), *ctx.args]
        assert args, f"{argv}: no subcommand"
        name, rest = args[0], args[1:]
        sub = cmd.get_command(ctx, name)
        assert sub is not None, f"{argv}: no command {name!r}"
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub


def _local(path: str) -> Path:
    """A path of the walkthrough in this checkout (it clones the repository to /opt/autotune)."""
    return REPO / path.removeprefix(INSTALL + "/") if path.startswith(INSTALL) else REPO / path


def test_the_doc_has_commands_for_both_walkthroughs():
    progs = [_program(c) for c in commands()]
    assert progs.count("autotune") >= 6 and "ray" in progs and "pip" in progs
    text = DOC.read_text()
    assert "## One machine with GPUs" in text and "## A Ray cluster" in text


@pytest.mark.parametrize("argv", [c for c in commands() if _program(c) == "autotune"], ids=" ".join)
def test_autotune_commands_parse_and_name_existing_files(argv):
    import autotune.cli  # noqa: F401  (registers the commands)
    from autotune.cli.app import app

    _parse(typer.main.get_command(app), argv[1:])
    if "--space" in argv:
        assert _local(argv[argv.index("--space") + 1]).is_file(), argv


@pytest.mark.parametrize("argv", [c for c in commands() if _program(c) == "ray"], ids=" ".join)
def test_ray_commands_parse(argv):
    from ray.scripts.scripts import cli

    _parse(cli, argv[1:])
    if argv[1] in ("up", "attach", "down"):
        assert (REPO / argv[2]).is_file()
    if "--" in argv:  # a job's entrypoint: autotune, named by its absolute path
        import autotune.cli  # noqa: F401
        from autotune.cli.app import app

        entry = argv[argv.index("--") + 1:]
        assert entry[0] == f"{INSTALL}/.venv/bin/autotune"
        _parse(typer.main.get_command(app), entry[1:])


def test_pip_installs_extras_that_exist():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pips = [c for c in commands() if _program(c) == "pip"]
    assert pips
    for argv in pips:
        for spec in (a for a in argv if "[" in a):
            for extra in spec.split("[", 1)[1].rstrip("]").split(","):
                assert extra in extras, (argv, extra)
    assert any(d.startswith("vllm==") for d in extras["vllm"])  # pinned to the checked release


def test_every_other_command_is_a_known_tool():
    known = {"autotune", "ray", "pip"} | OTHER_TOOLS
    assert {_program(c) for c in commands()} <= known


def test_the_first_study_is_the_one_run_on_the_simulator():
    """The walkthrough's first command is a simulator run of the same space and trials as the GPU one."""
    runs = [c for c in commands() if _program(c) == "autotune" and c[1] == "run"]
    sim = next(c for c in runs if "sim" in c)
    gpu = next(c for c in runs if "vllm" in c)
    assert sim[sim.index("--space") + 1] == gpu[gpu.index("--space") + 1]
    assert sim[sim.index("--trials") + 1] == gpu[gpu.index("--trials") + 1]


@pytest.mark.slow
def test_the_first_study_runs_on_the_simulator_as_written(ray_cluster, tmp_path, capsys, monkeypatch):
    """The doc's simulator command, as written but for --out (and a Ray already running)."""
    from tests.conftest import run_cli

    argv = next(c for c in commands() if _program(c) == "autotune" and c[1] == "run" and "sim" in c)
    args = argv[1:]
    args[args.index("--out") + 1] = str(tmp_path / "run")
    monkeypatch.chdir(REPO)  # the doc runs it from the repository (cd /opt/autotune)
    code, out, err = run_cli([*args, "--address", ray_cluster, "--progress", "none"], capsys)
    assert code == 0, err
    code, out, err = run_cli(["status", "--out", str(tmp_path / "run"), "--json"], capsys)
    assert code == 0 and '"recommended"' in out
