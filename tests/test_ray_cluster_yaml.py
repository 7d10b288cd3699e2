"""ray_cluster.yaml validates against the schema Ray itself ships."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import ray
import yaml

REPO = Path(__file__).resolve().parent.parent


def _schema() -> dict:
    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def test_cluster_yaml_is_valid_for_ray():
    cfg = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    jsonschema.validate(cfg, _schema())


def test_workers_are_a100_pairs_installing_autotune_vllm():
    cfg = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    workers = [n for k, n in cfg["available_node_types"].items() if k != cfg["head_node_type"]]
    assert workers and all(n["resources"]["GPU"] == 2 for n in workers)
    assert all(n["node_config"]["machineType"] == "a2-ultragpu-2g" for n in workers)  # 2x A100 80GB
    assert any("autotune[vllm]" in c for c in cfg["setup_commands"])
    head = " ".join(cfg["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head


def test_schema_rejects_a_broken_config():
    cfg = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    cfg["max_workers"] = "lots"
    try:
        jsonschema.validate(cfg, _schema())
    except jsonschema.ValidationError:
        return
    raise AssertionError("a string max_workers must not validate")


INSTALL = "/opt/autotune/.venv"  # where docs/gpu.md and the README's Ray-job example run autotune from


def _cfg() -> dict:
    return yaml.safe_load((REPO / "ray_cluster.yaml").read_text())


def test_every_command_is_valid_shell():
    import subprocess

    cfg = _cfg()
    for key in ("setup_commands", "head_setup_commands", "worker_setup_commands", "head_start_ray_commands",
                "worker_start_ray_commands"):
        for cmd in cfg[key]:
            check = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
            assert check.returncode == 0, (key, cmd, check.stderr)


def test_autotune_is_installed_where_the_docs_run_it():
    cfg = _cfg()
    setup = "\n".join(cfg["setup_commands"])
    assert f'{INSTALL}/bin/pip install -q -e "/opt/autotune[vllm]"' in setup
    for doc in ("README.md", "docs/gpu.md"):
        assert f"{INSTALL}/bin/autotune run" in (REPO / doc).read_text(), doc


def test_the_head_installs_and_starts_postgresql_with_a_role_and_database():
    head = "\n".join(_cfg()["head_setup_commands"])
    assert "apt-get install -y -q postgresql" in head and "systemctl enable --now postgresql" in head
    assert "CREATE ROLE autotune LOGIN" in head and "createdb -O autotune autotune" in head
    assert "umask 077" in head  # the generated password is readable by its owner only
    assert "PASSWORD '$(cat ~/.autotune-pgpassword)'" in head  # never a password written in this file


def test_every_ray_process_starts_with_token_auth_and_the_token_reaches_every_node():
    cfg = _cfg()
    starts = [c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in cfg[key]]
    assert starts and all("RAY_AUTH_MODE=token" in c for c in starts)
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert any("--dashboard-host=127.0.0.1" in c for c in cfg["head_start_ray_commands"])
