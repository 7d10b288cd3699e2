"""`autotune export --format vllm|k8s` on one finished study: the same config either way.

The k8s manifests must run `vllm serve` with exactly the flags the vllm export writes, load
into the kubernetes client's models, and an unknown format is one line, exit 2, nothing written.
"""

from __future__ import annotations

import shlex

import yaml

from autotune.export.vllm_config import config_dict
from tests.conftest import run_cli
from tests.study.test_export_cli import _confirmed_run_dir


def _k8s_args(path) -> list[str]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return [*container.get("command", []), *container.get("args", [])]


def test_both_formats_export_the_same_config(tmp_path, capsys):
    rd = _confirmed_run_dir(tmp_path)
    vllm_file, k8s_file = tmp_path / "vllm.yaml", tmp_path / "k8s.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "-o", str(vllm_file)], capsys)
    assert code == 0, err
    serve_line = out.strip().splitlines()[-1]
    code, out, err = run_cli(["export", "--out", str(rd.root), "--format", "k8s", "-o", str(k8s_file)], capsys)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == f"kubectl apply -f {k8s_file}"

    # The container runs exactly the command line the vllm export prints, plus where the pod
    # listens (--host/--port: the Service's port, not a tuned flag).
    args = _k8s_args(k8s_file)
    served = args[args.index("serve") + 1:]
    for option in ("--host", "--port"):
        i = served.index(option)
        del served[i:i + 2]
    assert served == shlex.split(serve_line)[2:]
    # ... and those are the vllm export file's settings, key for key.
    exported = yaml.safe_load(vllm_file.read_text())
    cli = shlex.split(serve_line)[3:]
    assert exported == config_dict(exported["model"], _flags_from_cli(cli))
    # The same comment header (study, trial, evidence) heads both files.
    head = [line for line in vllm_file.read_text().splitlines() if line.startswith("# ") and "deploy" not in line]
    k8s_text = k8s_file.read_text()
    assert head and all(line in k8s_text for line in head if not line.startswith("# exported:"))

    from kubernetes import client

    api = client.ApiClient()
    for doc in yaml.safe_load_all(k8s_text):
        if doc:
            model = getattr(client, f"V1{doc['kind']}")
            assert api.sanitize_for_serialization(api._ApiClient__deserialize(doc, model)) == doc


def _flags_from_cli(argv: list[str]) -> dict:
    """`--x v` / `--x` / `--no-x` back to a flags dict (vLLM's spelling), to compare with config_dict."""
    flags: dict = {}
    i = 0
    while i < len(argv):
        name = argv[i][2:].replace("-", "_")
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value: object = yaml.safe_load(argv[i + 1])
            i += 2
        else:
            value = not name.startswith("no_")
            name = name.removeprefix("no_")
            i += 1
        flags[name] = value
    return flags


def test_unknown_format_is_one_line_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "space.yaml").write_text("version: 1\n")
    before = sorted(p.name for p in run.iterdir())
    code, out, err = run_cli(["export", "--out", str(run), "--format", "helm"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--format 'helm'" in err and "vllm, k8s" in err
    assert sorted(p.name for p in run.iterdir()) == before
