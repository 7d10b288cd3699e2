"""Write the chosen trial as a Kubernetes Deployment and Service that run `vllm serve`.

Most teams deploy vLLM on Kubernetes, so the tuned config is also exported as manifests a
``kubectl apply -f`` takes. They follow vLLM's "Using Kubernetes" guide
(docs/deployment/k8s.md): the engine's GPUs requested as ``nvidia.com/gpu``, a memory-backed
``/dev/shm`` for NCCL's tensor-parallel traffic, a persistent volume for the Hugging Face
cache so a restarted pod does not download the weights again, ``/health`` probes, and the
HF token from a Secret. What is specific to autotune:

* the container's arguments are the vllm export's command line (:func:`serve_args`), an
  argument list run without a shell, so the two exports can never serve different flags;
* a startup probe gives the engine the space's ``engine.startup_timeout_s`` to load the
  weights and capture CUDA graphs before liveness starts counting (vLLM's troubleshooting
  note: a liveness probe that fires during a slow load kills the pod in a loop);
* env values that are secrets (by name, :func:`autotune.security.is_secret_name`, or a URL
  holding a password) are never written: they become references to keys of a Secret whose
  name is a parameter; the rest of ``engine.env`` is written as plain values.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

from autotune.engine.config import world_size
from autotune.errors import UserError
from autotune.export.vllm_config import serve_command
from autotune.security import is_secret_name, mask_url

# The vLLM release whose defaults autotune's flag registry holds (engine/config.py): the
# tuned flags were measured against those defaults.
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
PORT = 8000
# Where the vllm-openai image (running as root) keeps the Hugging Face cache.
HF_CACHE = "/root/.cache/huggingface"
# NCCL's shared-memory transport between the tensor-parallel ranks of one pod.
SHM_SIZE = "16Gi"
_PROBE_PERIOD_S = 10
# A DNS-1123 label: what Kubernetes accepts as a Deployment, Service or Secret name.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def k8s_manifests(model: str, flags: Mapping[str, Any], env: Mapping[str, str], head: str, *,
                  name: str = "vllm-autotuned", image: str = VLLM_IMAGE, secret_name: str = "autotune-secrets",
                  cache_claim: str = "vllm-model-cache", startup_timeout_s: float = 1800.0) -> str:
    """A Deployment and a ClusterIP Service for ``vllm serve model`` with ``flags``, as YAML text.

    ``head`` is the vllm export's comment header (study, trial, measured figures); its
    ``# deploy:`` line is replaced by how to deploy these manifests. ``env`` is the space's
    ``engine.env``: secrets in it are read from the Secret ``secret_name`` (one key per
    variable, named like the variable), which must exist in the namespace.
    """
    for option, value in (("--name", name), ("--secret-name", secret_name), ("--cache-claim", cache_claim)):
        if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
            raise UserError(f"{option} {value!r}: not a Kubernetes name; use lowercase letters, digits and '-' "
                            "(at most 63, starting and ending with a letter or digit)")
    env_list = _env(env, secret_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "autotune"}
    docs = [_deployment(model, flags, env_list, labels, image, cache_claim, startup_timeout_s),
            _service(labels)]
    # Each object gets its own label dicts: shared ones would be written as YAML anchors.
    body = yaml.safe_dump_all(docs, sort_keys=False)
    return _header(head, [e["name"] for e in env_list if "valueFrom" in e], secret_name) + body


def serve_args(model: str, flags: Mapping[str, Any]) -> list[str]:
    """`vllm serve` arguments exactly as the vllm export prints them: the model, then the
    tuned flags (trial-only flags such as ``port`` dropped, booleans as ``--x``/``--no-x``)."""
    argv = shlex.split(serve_command(model, dict(flags)))
    return argv[2:]  # without "vllm serve"


def gpus_per_pod(flags: Mapping[str, Any]) -> int:
    """GPUs one engine holds (a pod's nvidia.com/gpu request)."""
    return world_size(flags)


def _env(env: Mapping[str, str], secret_name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in sorted(env):
        # A value with a password in a URL (a proxy, a database) is as secret as a token.
        if is_secret_name(key) or mask_url(env[key]) != env[key]:
            out.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
        else:
            out.append({"name": key, "value": env[key]})
    return out


def _probe(failures: int, period_s: int = _PROBE_PERIOD_S) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period_s,
            "failureThreshold": failures}


def _deployment(model: str, flags: Mapping[str, Any], env: list[dict[str, Any]], labels: dict[str, str],
                image: str, cache_claim: str, startup_timeout_s: float) -> dict[str, Any]:
    gpus = str(gpus_per_pod(flags))
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image,
        "command": ["vllm", "serve"],
        # 0.0.0.0 inside the pod: the Service reaches the container on the pod's address.
        "args": [*serve_args(model, flags), "--host", "0.0.0.0", "--port", str(PORT)],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": env,
        # Extended resources (GPUs) must have requests equal to limits.
        "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}},
        "volumeMounts": [{"name": "model-cache", "mountPath": HF_CACHE},
                         {"name": "shm", "mountPath": "/dev/shm"}],
        "startupProbe": _probe(max(1, math.ceil(startup_timeout_s / _PROBE_PERIOD_S))),
        "readinessProbe": _probe(3, 5),
        "livenessProbe": _probe(3),
    }
    if not env:
        del container["env"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": labels["app.kubernetes.io/name"], "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {"name": "model-cache", "persistentVolumeClaim": {"claimName": cache_claim}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
                    ],
                },
            },
        },
    }


def _service(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": labels["app.kubernetes.io/name"], "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _header(head: str, secret_keys: list[str], secret_name: str) -> str:
    lines = [line for line in head.splitlines() if not line.startswith("# deploy:")]
    if secret_keys:
        literals = " ".join(f"--from-literal={k}=..." for k in secret_keys)
        lines.append(f"# secrets: kubectl create secret generic {secret_name} {literals}")
    lines.append("# deploy: kubectl apply -f <this file>   (needs the PVC it mounts and GPU nodes)")
    return "\n".join(lines) + "\n"
