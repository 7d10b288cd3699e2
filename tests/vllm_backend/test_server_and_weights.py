"""Server command line, secret masking, and the once-per-node weights prefetch."""

from __future__ import annotations

import sys
import threading
import types
from pathlib import Path

from autotune.backends.base import ServerSpec
from autotune.backends.vllm import weights as weights_mod
from autotune.backends.vllm.server import build_command
from autotune.security import mask_argv, mask_env


def test_command_is_an_argument_list_with_verbatim_values():
    spec = ServerSpec(model="Qwen/Qwen2.5-0.5B", download_dir="/data/hf", extra_args=("--api-key", "abc"))
    cmd = build_command(spec, {"max_num_seqs": 64, "enable_prefix_caching": False, "served_model_name": "x; rm -rf /",
                               "kv_cache_dtype": None}, 8123)
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen2.5-0.5B"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8123"
    assert "--no-enable-prefix-caching" in cmd and "--kv-cache-dtype" not in cmd
    assert cmd[cmd.index("--served-model-name") + 1] == "x; rm -rf /"  # one argument, never a shell
    assert cmd[cmd.index("--download-dir") + 1] == "/data/hf"
    assert mask_argv(cmd)[-1] == "***" and mask_argv(["--hf-token=abc"]) == ["--hf-token=***"]


def test_python_entry_point_for_the_cpu_build():
    cmd = build_command(ServerSpec(model="/m", python="/venv/bin/python", host="0.0.0.0"), {}, 1)
    assert cmd[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"


def test_mask_env():
    m = mask_env({"HF_TOKEN": "x", "WANDB_API_KEY": "y", "DB_PASSWORD": "z", "my_secret": "s", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert m == {"HF_TOKEN": "***", "WANDB_API_KEY": "***", "DB_PASSWORD": "***", "my_secret": "***",
                 "CUDA_VISIBLE_DEVICES": "0,1"}


def test_local_model_needs_no_download(tmp_path):
    r = weights_mod.prefetch_weights(str(tmp_path))
    assert not r.downloaded and r.path == str(tmp_path.resolve())


def test_concurrent_workers_download_once(tmp_path, monkeypatch):
    # huggingface_hub is faked: this machine has no network. The lock and marker are real files.
    calls: list[dict] = []
    gate = threading.Event()

    def snapshot_download(**kw):
        calls.append(kw)
        gate.wait(2)
        return str(tmp_path / "snap")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    monkeypatch.setattr(weights_mod, "_done_in_process", {})
    results = []

    def worker():
        # Each thread acts as a separate worker process: no shared in-process memo.
        weights_mod._done_in_process.clear()
        results.append(weights_mod.prefetch_weights("org/model", download_dir=str(tmp_path / "dl")))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 1 and sum(r.downloaded for r in results) == 1
    assert {r.path for r in results} == {str(tmp_path / "snap")}
    assert calls[0]["cache_dir"] == str(tmp_path / "dl") and "*.safetensors" in calls[0]["allow_patterns"]
    # Dummy weights: config and tokenizer only.
    weights_mod._done_in_process.clear()
    weights_mod.prefetch_weights("org/other", download_dir=str(tmp_path / "dl"), load_format="dummy")
    assert "*.safetensors" not in calls[-1]["allow_patterns"]


def test_a_second_call_in_the_same_process_downloads_nothing(tmp_path, monkeypatch):
    # The cause of the old flake: the in-process memo handed a later caller the first call's
    # result, "downloaded" included, so two of three threads could both report a download.
    calls: list[dict] = []

    def snapshot_download(**kw):
        calls.append(kw)
        return str(tmp_path / "snap")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    monkeypatch.setattr(weights_mod, "_done_in_process", {})
    first = weights_mod.prefetch_weights("org/model", download_dir=str(tmp_path / "dl"))
    second = weights_mod.prefetch_weights("org/model", download_dir=str(tmp_path / "dl"))
    assert first.downloaded and not second.downloaded and len(calls) == 1
    assert second.path == first.path


def test_the_fetch_lands_where_the_server_looks_once_per_node(tmp_path, monkeypatch):
    # Real huggingface_hub against a local stand-in for the Hub (no network here). The
    # server's environment (engine.env) names another cache, endpoint and token than this
    # worker process has: the fetch must follow the server's, or vLLM would download again.
    from tests.multinode.fake_hub import FakeHub

    files = {"config.json": b'{"model_type": "qwen2"}', "tokenizer.json": b"{}", "model.safetensors": b"\0" * 64}
    hub = FakeHub("org/model", files).start()
    try:
        monkeypatch.setenv("HF_HOME", str(tmp_path / "worker-home"))
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/unreachable")
        for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(weights_mod, "_done_in_process", {})
        env = {"HF_HOME": str(tmp_path / "server-home"), "HF_ENDPOINT": hub.endpoint("node"), "HF_TOKEN": "hf_x"}
        first = weights_mod.prefetch_weights("org/model", env=env)
        weights_mod._done_in_process.clear()  # a second worker process on the same node
        second = weights_mod.prefetch_weights("org/model", env=env)
    finally:
        hub.stop()
    cache = tmp_path / "server-home" / "hub"
    assert first.downloaded and not second.downloaded and second.path == first.path
    assert Path(first.path).parent.parent.parent == cache and not (tmp_path / "worker-home").exists()
    assert {p.name: p.read_bytes() for p in Path(first.path).iterdir()} == files
    assert hub.downloads("node") == dict.fromkeys(files, 1)
    assert {r.token for r in hub.requests} == {"hf_x"}
    assert (cache / ".autotune-locks" / "org--model.done").read_text() == first.path
