"""Read a search-space file: safe YAML, pydantic validation, one-line errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.deploy.vllm_env import VARS as VLLM_ENV_VARS
from autotune.errors import UserError
from autotune.space.schema import SearchSpace
from autotune.workload import SPACE_DIR_CONTEXT


def _format_validation_error(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key; check the spelling against docs/search_space.md"
    elif first["type"] == "missing":
        msg = "required field is missing"
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{path}: {loc}: {msg}{more}"


def parse_space(data: Any, path: Path) -> SearchSpace:
    """Validate ``data`` read from ``path``; relative paths in it (trace files, the sim
    profile) are relative to the file's directory."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    if "version" not in data:
        raise UserError(f"{path}: version: required; add 'version: 1' at the top")
    try:
        return SearchSpace.model_validate(data, context={SPACE_DIR_CONTEXT: path.parent})
    except ValidationError as e:
        raise UserError(_format_validation_error(path, e)) from None


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; pass an existing search-space YAML to --space") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserError(f"{path}:{where}: malformed YAML: {problem}") from None
    return parse_space(data, path)


def space_fingerprint(space: SearchSpace) -> str:
    """Hash of what defines the study's landscape; a resume with another one is refused.

    Trial counts, storage and cluster settings may change between runs of one study; the
    engine, params, constraints, workload and objectives may not. Of ``engine.env`` only the
    vLLM variables that change memory behaviour count; of ``engine.sim_profile`` and of a
    trace file, the content (profile values, the trace's sha256), not where the file is.
    """
    core = space.model_dump(include={"engine", "params", "constraints", "workload", "objectives", "slo"}, mode="json")
    env = core["engine"].pop("env", None) or {}  # secrets live here and may rotate between runs
    core["engine"].pop("allow_unmodelled_flags", None)  # permits a run, changes no trial
    behaviour = {k: env[k] for k in VLLM_ENV_VARS if k in env}
    if behaviour:
        core["engine"]["vllm_env"] = behaviour
    trace = core["workload"].get("trace")
    if trace:
        trace.pop("path", None)
    if core["engine"].pop("sim_profile", None) is not None:
        core["engine"]["sim_profile"] = space.engine.profile.to_dict()
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]
