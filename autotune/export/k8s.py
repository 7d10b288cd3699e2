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
* env values that are secrets (by name, :func:`autotune.security.is_secret_name`, a URL
  holding a password, or a value already masked to ``***`` by the run directory's copy of
  the space) are never written: they become references to keys of a Secret whose name is a
  parameter; the rest of ``engine.env`` is written as plain values. A masked value written
  as a literal (``postgresql://app:***@db``) would be a broken value that looks deployable;
* the model cache is a volume the manifests bring with them (:func:`parse_model_cache`): a
  PersistentVolumeClaim they create (the default), an existing claim, an ``emptyDir`` or a
  ``hostPath``; a Deployment that mounts a claim nobody created never starts;
* the pod is pinned to the GPU the config was tuned on, with a node selector on the label
  NVIDIA's GPU feature discovery sets (``nvidia.com/gpu.product``, :data:`GPU_PRODUCTS`):
  a config tuned on A100-80GB can fail to start, or OOM, on a smaller GPU.
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
from autotune.security import MASK, is_secret_name, mask_url

# The vLLM release whose defaults autotune's flag registry holds (engine/config.py): the
# tuned flags were measured against those defaults.
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
PORT = 8000
# Where the vllm-openai image (running as root) keeps the Hugging Face cache.
HF_CACHE = "/root/.cache/huggingface"
# NCCL's shared-memory transport between the tensor-parallel ranks of one pod.
SHM_SIZE = "16Gi"
_PROBE_PERIOD_S = 10
# The node label GPU feature discovery (NVIDIA's GPU operator) sets on every GPU node, and its
# values for the GPUs of autotune's table (deploy/hardware.py), SXM parts as tuned.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCTS = {
    "A100-40GB": "NVIDIA-A100-SXM4-40GB",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
    "H100-80GB": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
    "L40S": "NVIDIA-L40S",
}
# The created claim's size: the Hugging Face cache of one model (a 72B bf16 model is ~145 GB).
CACHE_SIZE = "300Gi"
MODEL_CACHES = ("pvc", "pvc:NAME", "emptydir", "hostpath:PATH")
# A DNS-1123 label: what Kubernetes accepts as a Deployment, Service or Secret name.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def k8s_manifests(model: str, flags: Mapping[str, Any], env: Mapping[str, str], head: str, *,
                  name: str = "vllm-autotuned", image: str = VLLM_IMAGE, secret_name: str = "autotune-secrets",
                  cache_claim: str = "vllm-model-cache", startup_timeout_s: float = 1800.0,
                  model_cache: str = "pvc", gpu: str | None = None, gpu_product: str | None = None) -> str:
    """A Deployment and a ClusterIP Service for ``vllm serve model`` with ``flags`` (and the
    model cache's PersistentVolumeClaim when the manifests create it), as YAML text.

    ``head`` is the vllm export's comment header (study, trial, measured figures); its
    ``# deploy:`` line is replaced by how to deploy these manifests. ``env`` is the space's
    ``engine.env``: secrets in it are read from the Secret ``secret_name`` (one key per
    variable, named like the variable), which must exist in the namespace. ``model_cache``:
    ``pvc`` (a claim ``cache_claim`` these manifests create), ``pvc:NAME`` (an existing
    claim), ``emptydir`` or ``hostpath:PATH``. ``gpu`` (the space's ``engine.gpu``) pins the
    pod to that GPU's product label; ``gpu_product`` overrides the label's value ("" pins
    nothing).
    """
    for option, value in (("--name", name), ("--secret-name", secret_name), ("--cache-claim", cache_claim)):
        _check_name(option, value)
    volume, claim = parse_model_cache(model_cache, cache_claim)
    product = _gpu_product(gpu, gpu_product)
    env_list = _env(env, secret_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "autotune"}
    docs = [*([_claim(claim, labels)] if claim else []),
            _deployment(model, flags, env_list, labels, image, volume, startup_timeout_s, product),
            _service(labels)]
    # Each object gets its own label dicts: shared ones would be written as YAML anchors.
    body = yaml.safe_dump_all(docs, sort_keys=False)
    return _header(head, [e["name"] for e in env_list if "valueFrom" in e], secret_name, product) + body


def parse_model_cache(spec: str, cache_claim: str = "vllm-model-cache") -> tuple[dict[str, Any], str | None]:
    """The model-cache volume for ``--model-cache SPEC``, and the name of the claim to create
    (None: the manifests create none)."""
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind == "pvc" and not arg:
        return {"persistentVolumeClaim": {"claimName": cache_claim}}, cache_claim
    if kind == "pvc":
        _check_name("--model-cache pvc:NAME", arg)
        return {"persistentVolumeClaim": {"claimName": arg}}, None
    if kind == "emptydir" and not arg:
        return {"emptyDir": {}}, None
    if kind == "hostpath" and arg.startswith("/"):
        return {"hostPath": {"path": arg, "type": "DirectoryOrCreate"}}, None
    raise UserError(f"--model-cache {spec!r}: use one of {', '.join(MODEL_CACHES)} (hostpath needs an absolute path)")


def _check_name(option: str, value: str) -> None:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise UserError(f"{option} {value!r}: not a Kubernetes name; use lowercase letters, digits and '-' "
                        "(at most 63, starting and ending with a letter or digit)")


def _gpu_product(gpu: str | None, override: str | None) -> str | None:
    if override is not None:
        if override and not _LABEL_VALUE.fullmatch(override):
            raise UserError(f"--gpu-product {override!r}: not a Kubernetes label value (letters, digits, '-', '_', "
                            "'.'; at most 63)")
        return override or None
    if gpu is None:
        return None
    # As the space's gpu names are matched (deploy/hardware.py): case, spaces, dashes and "NVIDIA" ignored.
    products = {_norm(k): v for k, v in GPU_PRODUCTS.items()}
    return products.get(_norm(gpu))


def _norm(gpu: str) -> str:
    return re.sub(r"[\s_-]", "", gpu.upper()).removeprefix("NVIDIA")


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
        if is_secret_name(key) or mask_url(env[key]) != env[key] or MASK in env[key]:
            out.append({"name": key, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}})
        else:
            out.append({"name": key, "value": env[key]})
    return out


def _probe(failures: int, period_s: int = _PROBE_PERIOD_S) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period_s,
            "failureThreshold": failures}


def _claim(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """The model cache's claim, on the cluster's default storage class."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": CACHE_SIZE}}},
    }


def _deployment(model: str, flags: Mapping[str, Any], env: list[dict[str, Any]], labels: dict[str, str],
                image: str, cache_volume: dict[str, Any], startup_timeout_s: float,
                gpu_product: str | None) -> dict[str, Any]:
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
                    **({"nodeSelector": {GPU_PRODUCT_LABEL: gpu_product}} if gpu_product else {}),
                    "containers": [container],
                    "volumes": [
                        {"name": "model-cache", **cache_volume},
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


def _header(head: str, secret_keys: list[str], secret_name: str, gpu_product: str | None) -> str:
    lines = [line for line in head.splitlines() if not line.startswith("# deploy:")]
    if secret_keys:
        literals = " ".join(f"--from-literal={k}=..." for k in secret_keys)
        lines.append(f"# secrets: kubectl create secret generic {secret_name} {literals}")
    if gpu_product:
        lines.append(f"# gpu: pinned to nodes labelled {GPU_PRODUCT_LABEL}={gpu_product} (the GPU it was tuned on)")
    lines.append("# deploy: kubectl apply -f <this file>   (needs GPU nodes; NVIDIA's device plugin and GPU feature "
                 "discovery label them)")
    return "\n".join(lines) + "\n"
