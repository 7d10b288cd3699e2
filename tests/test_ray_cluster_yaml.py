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
