"""The k8s export: valid Kubernetes objects, the vllm export's flags, GPUs, /dev/shm, probes, no secret inline.

Validated offline twice: the `kubernetes` client's models (a round trip that must give the
manifest back unchanged: a misspelled or misplaced key is dropped by the models, so it
would show as a difference) and `kubernetes-validate` in strict mode against the JSON
schema of the newest Kubernetes release it bundles.
"""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
import yaml
from kubernetes import client

from autotune.engine.flags import flags_to_cli_args
from autotune.errors import UserError
from autotune.export.k8s import k8s_manifests
from autotune.export.vllm_config import config_dict, header

MODEL = "Qwen/Qwen2.5-72B-Instruct"
# What a trial's record holds: fixed flags, sampled values (a float as Optuna returns it),
# booleans both ways, a None (vLLM's default) and the trial-only port.
FLAGS = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "max_model_len": 8192, "dtype": "bfloat16",
         "gpu_memory_utilization": 0.9199999999999999, "max_num_seqs": 128, "block_size": 32,
         "enforce_eager": True, "enable_prefix_caching": False, "max_num_batched_tokens": None, "port": 8123}
ENV = {"HF_TOKEN": "hf_planted_secret_value", "VLLM_USE_V2_MODEL_RUNNER": "0",
       "HTTPS_PROXY": "http://proxyuser:proxy-pw-planted@proxy:3128", "TOKENIZERS_PARALLELISM": "false"}
HEAD = header("qwen72b", 41, "sim", {"oom_per_1k": 0.0, "p99_e2e_s": 12.3456}, "lowest p99 within the OOM limit")


class _Response:
    """What ApiClient.deserialize reads: the body of an API server's answer."""

    def __init__(self, obj: dict) -> None:
        self.data = json.dumps(obj)


def _docs(**kw) -> list[dict]:
    return list(yaml.safe_load_all(k8s_manifests(MODEL, FLAGS, ENV, HEAD, **kw)))


def _container(docs: list[dict]) -> dict:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


MODELS = {"PersistentVolumeClaim": "V1PersistentVolumeClaim", "Deployment": "V1Deployment", "Service": "V1Service"}


@pytest.mark.parametrize("kw", [{}, {"model_cache": "emptydir"}, {"model_cache": "pvc:shared-hf"},
                                {"model_cache": "hostpath:/data/hf", "gpu": "H100-80GB"}])
def test_manifests_round_trip_through_the_kubernetes_client_models(kw):
    api = client.ApiClient()
    docs = _docs(**{"gpu": "A100-80GB", **kw})
    created = not kw  # only the default creates its claim
    assert [d["kind"] for d in docs] == [*(["PersistentVolumeClaim"] if created else []), "Deployment", "Service"]
    for doc in docs:
        model = MODELS[doc["kind"]]
        obj = api.deserialize(_Response(doc), model)
        assert type(obj).__name__ == model
        assert api.sanitize_for_serialization(obj) == doc  # nothing dropped, nothing retyped


def test_the_client_models_catch_what_the_round_trip_relies_on():
    """The round trip is a check: a key the models do not know comes back missing."""
    api = client.ApiClient()
    (dep,) = [d for d in _docs() if d["kind"] == "Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = [{"name": "shm", "mountPath": "/x"}]
    assert api.sanitize_for_serialization(api.deserialize(_Response(dep), "V1Deployment")) != dep


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "Deployment", "Service"])
def test_manifests_validate_strictly_against_the_kubernetes_schema(kind):
    (doc,) = [d for d in _docs(gpu="A100-80GB") if d["kind"] == kind]
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    broken = json.loads(json.dumps(doc))
    broken["spec"]["replicaz"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_container_runs_vllm_serve_with_the_vllm_exports_flags():
    c = _container(_docs())
    assert c["command"] == ["vllm", "serve"]  # an argument list: no shell
    args = c["args"]
    assert args[0] == MODEL
    host_port = ["--host", "0.0.0.0", "--port", "8000"]
    assert args[-4:] == host_port
    tuned = args[1:-4]
    clean = {k: v for k, v in sorted(FLAGS.items()) if k != "port"}
    assert tuned == flags_to_cli_args(clean)
    # ... and the same settings as the `vllm serve --config` file, key by key.
    cfg = config_dict(MODEL, FLAGS)
    as_cli = {}
    i = 0
    while i < len(tuned):
        key = tuned[i].removeprefix("--")
        if i + 1 < len(tuned) and not tuned[i + 1].startswith("--"):
            as_cli[key] = tuned[i + 1]
            i += 2
        else:
            as_cli[key] = True
            i += 1
    assert as_cli == {k: (v if v is True else str(v)) for k, v in cfg.items() if k != "model"}
    assert "no-enable-prefix-caching" in as_cli and "enforce-eager" in as_cli


def test_gpus_shm_cache_and_probes():
    docs = _docs(startup_timeout_s=1200, cache_claim="hf-cache")
    c = _container(docs)
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "4"  # tp 2 x pp 2
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert vols[mounts["/root/.cache/huggingface"]]["persistentVolumeClaim"]["claimName"] == "hf-cache"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200  # the space's startup timeout
    svc = docs[-1]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_one_gpu_when_no_parallelism_is_set():
    flags = {"gpu_memory_utilization": 0.9, "max_num_seqs": 64}
    (_, dep, _) = yaml.safe_load_all(k8s_manifests(MODEL, flags, {}, HEAD))
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "env" not in c


def test_secrets_come_from_a_secret_reference_never_inline():
    text = k8s_manifests(MODEL, FLAGS, ENV, HEAD, secret_name="my-secrets")
    assert "hf_planted_secret_value" not in text and "proxy-pw-planted" not in text
    env = {e["name"]: e for e in _container(list(yaml.safe_load_all(text)))["env"]}
    for secret in ("HF_TOKEN", "HTTPS_PROXY"):
        assert env[secret] == {"name": secret, "valueFrom": {"secretKeyRef": {"name": "my-secrets", "key": secret}}}
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == {"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}
    assert env["TOKENIZERS_PARALLELISM"]["value"] == "false"  # a TOKEN word that is not a credential
    assert "kubectl create secret generic my-secrets" in text  # the header says how to create it


def test_header_is_the_vllm_exports_with_a_kubernetes_deploy_line():
    text = k8s_manifests(MODEL, FLAGS, ENV, HEAD)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[:5] == HEAD.splitlines()[:5]  # title, study/trial/backend, date, rule, measured
    assert "SIMULATED" in comments[1]
    assert not any("vllm serve --config" in line for line in comments)
    assert comments[-1].startswith("# deploy: kubectl apply -f")
    assert text.index("apiVersion") > text.index(comments[-1])
    assert "&id" not in text  # plain YAML, no anchors for a reader to chase


@pytest.mark.parametrize("kw", [{"name": "Vllm_Tuned"}, {"secret_name": "-bad"}, {"cache_claim": "x" * 64}])
def test_bad_names_are_one_clear_error(kw):
    with pytest.raises(UserError, match="not a Kubernetes name"):
        k8s_manifests(MODEL, FLAGS, ENV, HEAD, **kw)


def test_the_model_cache_claim_is_created_or_named_or_replaced():
    claim, dep, _ = _docs(cache_claim="hf-cache")
    assert claim["kind"] == "PersistentVolumeClaim" and claim["metadata"]["name"] == "hf-cache"
    assert claim["spec"]["resources"]["requests"]["storage"].endswith("Gi")

    def cache(**kw) -> dict:
        (d,) = [x for x in _docs(**kw) if x["kind"] == "Deployment"]
        (v,) = [v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-cache"]
        return v

    assert cache(model_cache="pvc:shared-hf")["persistentVolumeClaim"] == {"claimName": "shared-hf"}
    assert cache(model_cache="emptydir")["emptyDir"] == {}
    assert cache(model_cache="hostpath:/data/hf")["hostPath"] == {"path": "/data/hf", "type": "DirectoryOrCreate"}


@pytest.mark.parametrize("spec", ["nfs:/x", "hostpath:relative", "pvc:Bad_Name", "emptydir:x"])
def test_a_bad_model_cache_is_one_clear_error(spec):
    with pytest.raises(UserError, match="--model-cache"):
        k8s_manifests(MODEL, FLAGS, ENV, HEAD, model_cache=spec)


def test_the_pod_is_pinned_to_the_gpu_it_was_tuned_on():
    def selector(**kw) -> dict | None:
        (d,) = [x for x in _docs(**kw) if x["kind"] == "Deployment"]
        return d["spec"]["template"]["spec"].get("nodeSelector")

    assert selector(gpu="A100-80GB") == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert selector(gpu="nvidia h100 80gb") == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert selector(gpu="A100-80GB", gpu_product="NVIDIA-A100-PCIE-80GB") == {
        "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-80GB"}  # overridable
    assert selector(gpu="A100-80GB", gpu_product="") is None  # or switched off
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in k8s_manifests(MODEL, FLAGS, ENV, HEAD, gpu="A100-80GB")
    with pytest.raises(UserError, match="--gpu-product"):
        k8s_manifests(MODEL, FLAGS, ENV, HEAD, gpu_product="not a label")


def test_a_masked_value_goes_to_the_secret_never_into_a_literal():
    """The run directory's space copy holds secrets masked; a masked URL under a name that
    is not secret-like must not become the literal `postgresql://app:***@db`."""
    env = {"APP_DB": "postgresql://app:***@db:5432/app", "WHOLE": "***", "PLAIN": "x"}
    text = k8s_manifests(MODEL, FLAGS, env, HEAD)
    assert "***" not in text
    env_out = {e["name"]: e for e in _container(list(yaml.safe_load_all(text)))["env"]}
    assert "valueFrom" in env_out["APP_DB"] and "valueFrom" in env_out["WHOLE"]
    assert env_out["PLAIN"]["value"] == "x"
    for doc in yaml.safe_load_all(text):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
