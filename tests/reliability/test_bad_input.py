"""The bad-input catalogue (docs/bad_input.md): one line, exit 2, no traceback, nothing written.

Each case goes through the real CLI entry point (in-process ``run_cli``; a few as real
subprocesses, to prove no traceback reaches stderr from any layer) and then checks that
no run directory appeared or that an existing study's files are byte-for-byte unchanged.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AUTOTUNE, run_cli, with_setting
from tests.reliability.conftest import child_env, noop_space, write_space


def _base() -> dict[str, Any]:
    return noop_space("bad", trials=2)


def _set(dotted: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def mutate(d: dict[str, Any]) -> dict[str, Any]:
        return with_setting(d, dotted, value)

    return mutate


def _drop(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def mutate(d: dict[str, Any]) -> dict[str, Any]:
        d = copy.deepcopy(d)
        d.pop(key)
        return d

    return mutate


@dataclass(frozen=True)
class Case:
    id: str
    expect: str  # must appear in the error line: the field or value at fault
    space: Callable[[dict[str, Any]], dict[str, Any]] | str | bytes | None = None  # mutation, or raw file content
    args: tuple[str, ...] = ()
    needs_ray: bool = False
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # written next to the space first


SIM = {"engine": {"backend": "sim", "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "A100-80GB",
                  "flags": {"tensor_parallel_size": 2, "max_model_len": 4096}}}

# Cases that fail before any study exists: the run directory must not be created.
CASES = [
    Case("malformed-yaml", "malformed YAML", "version: 1\nengine: {backend: noop\n  model: [x\n"),
    Case("tab-indented-yaml", "malformed YAML", "version: 1\nengine:\n\tbackend: noop\n"),
    # A reader error (a control character) has an offset, not a mark: it is placed by line, not "path::"
    Case("nul-byte-in-yaml", "space.yaml: line 2, column 9: malformed YAML", "version: 1\nengine: \x00\n"),
    Case("top-level-list", "expected a mapping at the top level", "- version: 1\n"),
    Case("empty-file", "expected a mapping at the top level", ""),
    Case("missing-version", "version: required", _drop("version")),
    Case("wrong-version", "version: Input should be 1", _set("version", 2)),
    Case("unknown-top-level-key", "paramz: unknown key", _set("paramz", {})),
    Case("unknown-engine-key", "engine.colour: unknown key", _set("engine.colour", "red")),
    Case("unknown-param-key", "params.max_num_seqs.lo: unknown key",
         _set("params.max_num_seqs", {"type": "int", "lo": 8, "high": 64})),
    Case("wrong-type-int", "workload.num_requests: Input should be a valid integer", _set("workload.num_requests", "many")),
    Case("wrong-type-trials", "study.trials: Input should be a valid integer", _set("study.trials", "ten")),
    Case("low-greater-than-high", "params.max_num_seqs: low (300.0) must be <= high (8.0)",
         _set("params.max_num_seqs", {"type": "int", "low": 300, "high": 8})),
    Case("log-scale-nonpositive-low", "log scale needs low > 0",
         _set("params.max_num_seqs", {"type": "int", "low": 0, "high": 8, "log": True})),
    Case("empty-choices", "params.block_size: categorical params need a non-empty choices list",
         _set("params.block_size", {"type": "categorical", "choices": []})),
    Case("unknown-vllm-flag-param", "unknown vLLM flag 'max_num_seq'", _set("params.max_num_seq", {"type": "bool"})),
    Case("unknown-vllm-flag-fixed", "unknown vLLM flag 'max_seqs'", _set("engine.flags.max_seqs", 8)),
    Case("param-type-mismatch", "enforce_eager: vLLM takes a bool",
         _set("params.enforce_eager", {"type": "int", "low": 0, "high": 1})),
    Case("fixed-and-searched", "'max_num_seqs' is both fixed", _set("engine.flags.max_num_seqs", 8)),
    Case("constraint-unknown-param", "constraints[0] names unknown param 'max_len'",
         _set("constraints", [{"left": "max_num_batched_tokens", "op": ">=", "right": "max_len"}])),
    Case("unknown-backend-in-space", "engine.backend", _set("engine.backend", "tgi")),
    Case("unknown-backend-option", "--backend 'tgi'", args=("--backend", "tgi")),
    Case("unknown-gpu", "engine.gpu 'H900'", lambda d: {**_base(), **copy.deepcopy(SIM)} | {
        "engine": {**SIM["engine"], "gpu": "H900"}}),
    Case("unknown-model", "no-such/model", lambda d: {**_base(), **copy.deepcopy(SIM)} | {
        "engine": {**SIM["engine"], "model": "no-such/model"}}),
    Case("unknown-sampler-option", "study.sampler 'bayes'", args=("--sampler", "bayes")),
    Case("unknown-objective-metric", "p99_latency", _set("objectives", [{"metric": "oom_per_1k"}, {"metric": "p99_latency"}])),
    Case("trials-zero", "--trials 0: must be at least 1", args=("--trials", "0")),
    Case("trials-negative", "--trials -3: must be at least 1", args=("--trials", "-3")),
    Case("trials-zero-in-space", "study.trials: Input should be greater than or equal to 1", _set("study.trials", 0)),
    Case("workers-zero", "--workers 0: must be at least 1", args=("--workers", "0")),
    Case("confirm-repeats-negative", "study.confirm.repeats: Input should be greater than or equal to 0",
         _set("study.confirm", {"finalists": 3, "repeats": -1})),
    Case("confirm-unknown-key", "study.confirm.runs: unknown key", _set("study.confirm", {"runs": 2})),
    Case("margin-negative", "export.min_headroom_gib: Input should be greater than or equal to 0",
         _set("export.min_headroom_gib", -0.5)),
    Case("gmu-edge-above-one", "export.gmu_edge: Input should be less than or equal to 1",
         _set("export.gmu_edge", 1.5)),
    Case("center-unknown", "export.center: Input should be 'mean' or 'median'", _set("export.center", "mode")),
    Case("model-profile-missing", "model_profile is nominal, calibrated or a SimProfile file",
         _set("study.strategy.model_profile", "missing.yaml")),
    Case("screen-candidates-one", "study.strategy.screen_candidates: Input should be greater than or equal to 2",
         _set("study.strategy.screen_candidates", 1)),
    Case("progress-and-quiet", "--progress plain and --quiet: pass one of them", args=("--progress", "plain")),
    Case("space-file-missing", "no such file", space=None, args=("--space", "/nonexistent/space.yaml")),
    Case("storage-wrong-driver", "database driver 'mysql' not available", _set("study.storage", "mysql://u@localhost/db")),
    Case("storage-unknown-dialect", "database driver 'cockroach' not available",
         _set("study.storage", "cockroach://u:hunter22@localhost/db")),
    Case("storage-password-is-masked", "postgresql+psycopg2://u:***@localhost/db",
         _set("study.storage", "postgresql+psycopg2://u:hunter22@localhost/db")),
    Case("storage-not-a-url", "is not a SQLAlchemy URL", _set("study.storage", "optuna.db")),
    Case("storage-unset-env-var", "environment variable AUTOTUNE_NO_SUCH_VAR is not set",
         _set("study.storage", "postgresql+psycopg://u:${AUTOTUNE_NO_SUCH_VAR}@localhost/db")),
    Case("more-workers-than-gpu-groups", "--workers 3: the Ray cluster only has 2", args=("--workers", "3"), needs_ray=True),
    # Hostile or careless input (issue 21): refused before anything is created.
    Case("space-not-utf8", "line 1, column 14: not UTF-8 text", b"version: 1 # \xff\n"),
    Case("yaml-alias-bomb", "the YAML expands to more than 100000 values",
         "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
         "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nversion: 1\n"),
    Case("yaml-cyclic-alias", "or 40 levels", "version: 1\nparams: &p\n  x: *p\n"),
    Case("yaml-huge-int", "malformed YAML: a value out of range", "version: 1\nx: " + "9" * 5000 + "\n"),
    Case("space-path-forges-a-line", "a\\x0aerror: forged\\x1b[2J: no such file", space=None,
         args=("--space", "/nonexistent/a\nerror: forged\x1b[2J")),
    Case("space-is-dev-zero", "not a regular file", space=None, args=("--space", "/dev/zero")),
    Case("space-is-a-directory", "cannot read: Is a directory", space=None, args=("--space", "/")),
    Case("step-zero", "params.max_num_seqs: step (0) must be a number > 0",
         _set("params.max_num_seqs", {"type": "int", "low": 8, "high": 64, "step": 0})),
    Case("step-negative", "params.max_num_seqs: step (-8) must be a number > 0",
         _set("params.max_num_seqs", {"type": "int", "low": 8, "high": 64, "step": -8})),
    Case("step-does-not-divide", "step (0.04) does not divide high - low (0.18); set high to 0.96 or 1",
         _set("params.gpu_memory_utilization", {"type": "float", "low": 0.80, "high": 0.98, "step": 0.04})),
    Case("step-larger-than-range", "step (0.1) is larger than high - low (0.05)",
         _set("params.gpu_memory_utilization", {"type": "float", "low": 0.90, "high": 0.95, "step": 0.1})),
    Case("int-param-fractional", "int params need whole-number low, high and step",
         _set("params.max_num_seqs", {"type": "int", "low": 8, "high": 64, "step": 2.5})),
    Case("study-name-climbs-out", "study.name: '../../evil' is not a plain name", _set("study.name", "../../evil")),
    Case("study-name-absolute", "study.name: '/tmp/evil' is not a plain name", _set("study.name", "/tmp/evil")),
    Case("study-option-climbs-out", "--study: '../../evil' is not a plain name", args=("--study", "../../evil")),
    Case("constraint-on-unsearched-flag", "constraints[0] names 'max_num_batched_tokens', which is neither searched",
         _set("constraints", [{"left": "max_num_batched_tokens", "op": ">=", "right": 8192}])),
    Case("did-you-mean-flag", "unknown vLLM flag 'max_num_seq'; did you mean 'max_num_seqs'?",
         _set("params.max_num_seq", {"type": "int", "low": 8, "high": 64})),
    Case("did-you-mean-key", "study.confirm.fnalists: unknown key; did you mean 'finalists'?",
         _set("study.confirm", {"fnalists": 2})),
    Case("trace-is-proc-environ", "/proc/self/environ: a /proc file, not a regular file",
         _set("workload.trace", {"path": "/proc/self/environ", "format": "azure"}),
         env={"HF_TOKEN": "hf_planted_secret_0123456789"}),
    Case("trace-is-dev-zero", "/dev/zero: not a regular file", _set("workload.trace", {"path": "/dev/zero"})),
    Case("trace-is-a-directory", "is a directory, not a trace file", _set("workload.trace", {"path": "/"})),
    Case("sim-profile-is-dev-zero", "/dev/zero: not a regular file", _set("engine.sim_profile", "/dev/zero")),
    Case("trace-line-too-long", "big.jsonl line 1: line longer than 1 MiB", _set("workload.trace", {"path": "big.jsonl"}),
         files={"big.jsonl": '{"arrival_s": 0, "pad": "' + "A" * (1 << 20) + '"}\n'}),
    Case("trace-field-not-a-number", "t.jsonl line 1: arrival_s must be a number, got text",
         _set("workload.trace", {"path": "t.jsonl"}),
         files={"t.jsonl": '{"arrival_s": "hf_planted_secret_0123456789", "prompt_tokens": 5, "output_tokens": 5}\n'},
         env={"HF_TOKEN": "hf_planted_secret_0123456789"}),
    Case("trace-key-near-miss", "t.jsonl line 1: unknown key; did you mean 'prompt_logprobs'?",
         _set("workload.trace", {"path": "t.jsonl"}),
         files={"t.jsonl": '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "prompt_logprob": 1}\n'}),
    Case("unknown-flag-nothing-close", "unknown vLLM flag 'colour'; params are named", _set("params.colour", {"type": "bool"})),
    Case("space-too-large", "larger than the 4 MiB limit", "version: 1\n" + "# padding\n" * 500_000),
    Case("yaml-python-tag", "could not determine a constructor for the tag '...'",
         "version: 1\nx: !!python/object/apply:os.system ['echo hi']\n"),
]


DOC = Path(__file__).resolve().parents[2] / "docs" / "bad_input.md"


def documented_messages() -> list[re.Pattern[str]]:
    """docs/bad_input.md's messages (the last column's `error: ...`), ``...`` read as "anything"."""
    out = []
    for row in DOC.read_text().splitlines():
        if not row.startswith("|"):
            continue
        m = re.search(r"`(error: [^`]*)`", row.rsplit(" | ", 1)[-1])
        if m:
            out.append(re.compile(".*".join(re.escape(part) for part in m[1].split("..."))))
    return out


def assert_documented(line: str, tmp_path: Path) -> None:
    """The line the user saw is in the catalogue, word for word (DIR for the test's directory)."""
    line = line.replace(str(tmp_path), "DIR")
    assert any(p.fullmatch(line) for p in documented_messages()), f"not in docs/bad_input.md: {line}"


def assert_one_line_error(code: int, out: str, err: str, expect: str) -> None:
    assert code == 2, f"exit {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"stderr must be exactly one line, got: {lines}"
    assert lines[0].startswith("error: "), lines[0]
    assert expect in lines[0], f"{expect!r} not in {lines[0]!r}"


def _prepare(case: Case, tmp_path: Path) -> tuple[list[str], Path]:
    out = tmp_path / "run"
    args = ["run", "--out", str(out), "--quiet"]
    if isinstance(case.space, bytes):
        (tmp_path / "space.yaml").write_bytes(case.space)
        args += ["--space", str(tmp_path / "space.yaml")]
    elif isinstance(case.space, str):
        args += ["--space", str(write_space(tmp_path / "space.yaml", case.space))]
    elif case.space is not None:
        args += ["--space", str(write_space(tmp_path / "space.yaml", case.space(_base())))]
    elif "--space" not in case.args:
        args += ["--space", str(write_space(tmp_path / "space.yaml", _base()))]
    return args + list(case.args), out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_one_line_and_writes_nothing(case: Case, tmp_path, capsys, monkeypatch, request):
    monkeypatch.chdir(tmp_path)  # a default ./runs would land here, where we can see it
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    args, out = _prepare(case, tmp_path)
    if case.needs_ray:
        # A real driver process on the session's Ray (4 logical GPUs = 2 groups of 2): an
        # in-process run would share Ray's log handlers with the fixture's captured streams.
        address = request.getfixturevalue("ray_cluster")
        p = subprocess.run([AUTOTUNE, *args, "--address", address], capture_output=True, text=True, timeout=180,
                           cwd=tmp_path, env=child_env())
        code, stdout, stderr = p.returncode, p.stdout, p.stderr
    else:
        code, stdout, stderr = run_cli(args, capsys)
    assert_one_line_error(code, stdout, stderr, case.expect)
    assert_documented(stderr.strip(), tmp_path)
    for secret in case.env.values():
        assert secret not in stdout + stderr
    assert not out.exists(), f"a failed run created {out}: {sorted(p.name for p in out.iterdir())}"
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path.parent / "evil").exists() and not Path("/tmp/evil").exists()


SUBPROCESS_CASES = ["malformed-yaml", "unknown-vllm-flag-param", "storage-wrong-driver", "trials-zero"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS_CASES], ids=lambda c: c.id)
def test_bad_input_through_the_installed_script(case: Case, tmp_path):
    args, out = _prepare(case, tmp_path)
    p = subprocess.run([AUTOTUNE, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=child_env())
    assert_one_line_error(p.returncode, p.stdout, p.stderr, case.expect)
    assert not out.exists()


def test_unreachable_ray_address_fails_fast_and_writes_nothing(tmp_path):
    """Nothing listens on port 1: one line, quickly, not a many-minute hang in ray.init."""
    out = tmp_path / "run"
    space = write_space(tmp_path / "space.yaml", _base())
    p = subprocess.run([AUTOTUNE, "run", "--space", str(space), "--out", str(out), "--address", "127.0.0.1:1", "--quiet"],
                       capture_output=True, text=True, timeout=180, cwd=tmp_path, env=child_env())
    assert_one_line_error(p.returncode, p.stdout, p.stderr, "--address 127.0.0.1:1: cannot connect to Ray")
    assert not out.exists()


def test_unwritable_run_directory(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = blocker / "run"  # root ignores permission bits, so use a path that cannot be a directory
    space = write_space(tmp_path / "space.yaml", _base())
    code, stdout, stderr = run_cli(["run", "--space", str(space), "--out", str(out), "--quiet"], capsys)
    assert_one_line_error(code, stdout, stderr, f"--out {out}: cannot create the run directory")
    assert blocker.read_text() == "not a directory"


def _digest(paths: list[Path]) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.exists()}


@pytest.fixture(scope="module")
def finished_study(ray_cluster, tmp_path_factory) -> tuple[Path, Path]:
    """A real two-trial study to be resumed with bad input."""
    from autotune.service import RunOptions, run_study
    from autotune.space import load_space

    root = tmp_path_factory.mktemp("resume")
    space = write_space(root / "space.yaml", _base())
    out = root / "run"
    run_study(load_space(space), space, RunOptions(out=out, progress=False, address=ray_cluster))
    return space, out


RESUME_CASES = [
    ("param-range-changed", _set("params.max_num_seqs", {"type": "int", "low": 8, "high": 512, "log": True}),
     (), "was created from a different space"),
    ("param-added", _set("params.enable_chunked_prefill", {"type": "bool"}), (), "was created from a different space"),
    ("workload-changed", _set("workload.num_requests", 40), (), "was created from a different space"),
    ("objectives-changed", _set("objectives", [{"metric": "p99_e2e_s"}]), (), "exists with other objectives"),
    ("more-workers-on-resume", lambda d: d, ("--workers", "3"), "--workers 3: the Ray cluster only has 2"),
]


@pytest.mark.parametrize(("mutate", "extra", "expect"), [c[1:] for c in RESUME_CASES], ids=[c[0] for c in RESUME_CASES])
def test_bad_resume_leaves_the_study_untouched(finished_study, mutate, extra, expect, tmp_path, capsys):
    import optuna

    space0, out = finished_study
    import yaml

    changed = write_space(tmp_path / "space.yaml", mutate(yaml.safe_load(space0.read_text())))
    files = [out / "optuna.db", out / "mlflow.db", out / "space.yaml"]
    before = _digest(files)
    listing = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    code, stdout, stderr = run_cli(["run", "--space", str(changed), "--out", str(out), "--quiet", *extra], capsys)
    assert_one_line_error(code, stdout, stderr, expect)
    assert _digest(files) == before
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == listing
    study = optuna.load_study(study_name="bad", storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) >= 2 and all(t.state.is_finished() for t in study.trials)


def test_export_and_status_bad_input(finished_study, tmp_path, capsys):
    _, out = finished_study
    code, o, e = run_cli(["export", "--out", str(out), "--max-oom-per-1k", "-1"], capsys)
    assert_one_line_error(code, o, e, "--max-oom-per-1k -1.0: must be >= 0")
    code, o, e = run_cli(["status", "--out", str(tmp_path / "nothing")], capsys)
    assert_one_line_error(code, o, e, "no study here")
    assert_documented(e.strip(), tmp_path)
    assert not (tmp_path / "nothing").exists()
    code, o, e = run_cli(["status", "--out", str(out), "--study", "nope"], capsys)
    assert_one_line_error(code, o, e, "--study nope: no such study")


def _stray(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.tmp"))


@pytest.mark.parametrize("target", ["directory", "read-only", "under-a-file"])
def test_export_onto_an_unwritable_path_is_one_line_and_leaves_nothing(finished_study, tmp_path, capsys, target):
    """Used to be a traceback that left <out>.tmp behind."""
    _, out = finished_study
    if target == "directory":
        dest = tmp_path / "adir"
        dest.mkdir()
        reason = "Is a directory"
    elif target == "read-only":
        dest = Path("/sys/autotune-export.yaml")  # read-only even for root
        if not Path("/sys").is_dir() or os.access("/sys", os.W_OK) and not Path("/sys/kernel").is_dir():
            pytest.skip("no read-only /sys here")
        reason = "Permission denied"
    else:
        (tmp_path / "a_file").write_text("x")
        dest = tmp_path / "a_file" / "vllm.yaml"
        reason = "Not a directory"
    before = _stray(out)
    for fmt in ("vllm", "k8s"):
        code, o, e = run_cli(["export", "--out", str(out), "-o", str(dest), "--format", fmt], capsys)
        assert_one_line_error(code, o, e, f"-o {dest}: cannot write the config ({reason})")
        assert_documented(e.strip(), tmp_path)
    assert _stray(tmp_path) == [] and _stray(out) == before
    assert (tmp_path / "a_file").read_text() == "x" if target == "under-a-file" else True


def test_export_replaces_a_file_atomically(finished_study, tmp_path, capsys):
    _, out = finished_study
    dest = tmp_path / "cfg.yaml"
    dest.write_text("old\n")
    code, o, e = run_cli(["export", "--out", str(out), "-o", str(dest)], capsys)
    assert code == 0, e
    assert dest.read_text().startswith("# vLLM serving config") and sorted(p.name for p in tmp_path.iterdir()) == [
        "cfg.yaml"]


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupted_optuna_db_is_one_line_and_left_alone(finished_study, ray_cluster, tmp_path, capsys, damage):
    """`run` used to print "database disk image is malformed" with a traceback, `status`
    "holds no study yet, try again in a moment"."""
    import shutil

    space, out0 = finished_study
    out = tmp_path / "run"
    shutil.copytree(out0, out)
    db = out / "optuna.db"
    raw = db.read_bytes()
    db.write_bytes(b"this is not sqlite\n" * 64 if damage == "garbage" else raw[: len(raw) // 3])
    before = _digest([db, out / "mlflow.db"])
    expect = f"{db}: not a readable SQLite/Optuna database"
    for args in (["status", "--out", str(out)], ["export", "--out", str(out)],
                 ["run", "--space", str(space), "--out", str(out), "--quiet", "--address", ray_cluster]):
        code, o, e = run_cli(args, capsys)
        assert_one_line_error(code, o, e, expect)
        assert_documented(e.strip(), tmp_path)
    assert _digest([db, out / "mlflow.db"]) == before


def test_printed_next_commands_work(ray_cluster, tmp_path):
    """`--study plainname --out D` used to print `next: autotune status --out D`, which exits 2
    (the saved space names another study)."""
    import shlex

    space = write_space(tmp_path / "space.yaml", _base())  # study.name: bad
    out = tmp_path / "D"
    p = subprocess.run([AUTOTUNE, "run", "--space", str(space), "--study", "plainname", "--out", str(out), "--quiet",
                        "--address", ray_cluster], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=child_env())
    assert p.returncode == 0, p.stderr[-2000:]
    nxt = [line for line in p.stdout.splitlines() if line.startswith("next: ")]
    assert len(nxt) == 1
    commands = [shlex.split(c) for c in nxt[0].removeprefix("next: ").split("   |   ")]
    assert [c[:2] for c in commands] == [["autotune", "status"], ["autotune", "export"]]
    for argv in commands:
        q = subprocess.run([AUTOTUNE, *argv[1:]], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env=child_env())
        assert q.returncode == 0, f"{argv}: {q.stderr[-2000:]}"


def test_no_study_hint_is_a_command_that_works(ray_cluster, tmp_path, capsys):
    """The hint names --space (the one option `run` cannot do without); with the user's file
    in place of SPACE.yaml it creates the study the other commands were looking for."""
    import shlex

    from autotune.rundir import SPACE_PLACEHOLDER

    out = tmp_path / "nothing yet"
    code, o, e = run_cli(["status", "--out", str(out)], capsys)
    assert_one_line_error(code, o, e, "no study here; create one with: autotune run --space")
    argv = shlex.split(e.strip().split("create one with: ", 1)[1])
    space = write_space(tmp_path / "space.yaml", noop_space("hint", trials=1))
    argv = [str(space) if a == SPACE_PLACEHOLDER else a for a in argv]
    p = subprocess.run([AUTOTUNE, *argv[1:], "--quiet", "--address", ray_cluster], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env=child_env())
    assert p.returncode == 0, p.stderr[-2000:]
    code, o, e = run_cli(["status", "--out", str(out)], capsys)
    assert code == 0, e


def test_damaged_saved_space_is_one_line(finished_study, tmp_path, capsys):
    """The run directory's space.yaml is read like --space: a damaged one is one line."""
    import shutil

    _, out0 = finished_study
    out = tmp_path / "run"
    shutil.copytree(out0, out)
    (out / "space.yaml").write_bytes(b"version: 1\nstudy: {name: \xff}\n")
    for command in ("status", "export"):
        code, o, e = run_cli([command, "--out", str(out)], capsys)
        assert_one_line_error(code, o, e, f"{out / 'space.yaml'}: line 2, column 15: not UTF-8 text")
