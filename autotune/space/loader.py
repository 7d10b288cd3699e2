"""Read a search-space file: safe YAML, pydantic validation, one-line errors."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from autotune.deploy.vllm_env import LEGACY_VARS as LEGACY_VLLM_ENV_VARS
from autotune.deploy.vllm_env import VARS as VLLM_ENV_VARS
from autotune.errors import UserError
from autotune.security import NotRegularFile, read_input
from autotune.space.schema import SearchSpace, did_you_mean
from autotune.workload import SPACE_DIR_CONTEXT, TraceFileError

# A search space is a page of YAML; the cap keeps a hostile --space (a huge file) bounded.
MAX_SPACE_BYTES = 4 << 20
# YAML anchors can make a small file a huge structure (each alias a copy, "billion laughs"),
# or a cyclic one; validation would walk every copy.
MAX_SPACE_NODES = 100_000
MAX_SPACE_DEPTH = 40
# A YAML problem may quote a token of the file (an alias, a tag): a quoted word of 4+ characters.
# Short ones (',', '}', '\t') and the prose between two quotes (`',' or '}'`) stay.
_QUOTED = re.compile(r"'[^'\s]{4,}'|\"[^\"\s]{4,}\"")


def _format_validation_error(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        model = _model_at(first["loc"][:-1])
        known = model.model_fields if model is not None else ()
        msg = f"unknown key; {did_you_mean(str(first['loc'][-1]), known, 'check the spelling against docs/search_space.md')}"
    elif first["type"] == "missing":
        msg = "required field is missing"
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{path}: {loc}: {msg}{more}"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The schema section at ``loc`` (``("study", "confirm")`` -> ConfirmSection), if it is one."""
    cur: Any = SearchSpace
    for part in loc:
        cur = _unwrap(cur)
        if isinstance(cur, type) and issubclass(cur, BaseModel):
            field = cur.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            cur = field.annotation
        elif get_origin(cur) in (dict, list):  # a key or an index: the values' type
            cur = get_args(cur)[-1]
        else:
            return None
    cur = _unwrap(cur)
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """``X | None`` -> ``X``."""
    if get_origin(tp) in (Union, type(int | None)):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def parse_space(data: Any, path: Path) -> SearchSpace:
    """Validate ``data`` read from ``path`` and read the trace file it names; relative paths
    in it (trace files, the sim profile) are relative to the file's directory."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    if "version" not in data:
        raise UserError(f"{path}: version: required; add 'version: 1' at the top")
    try:
        space = SearchSpace.model_validate(data, context={SPACE_DIR_CONTEXT: path.parent})
    except ValidationError as e:
        raise UserError(_format_validation_error(path, e)) from None
    return _with_trace(space, path)


def _with_trace(space: SearchSpace, path: Path) -> SearchSpace:
    """The space with its workload's trace file read (a space without one: itself). Read
    here, after validation, not inside it: the schema checks what the fields say, and a bad
    file is one line naming the space, the trace file (and line) and what to fix."""
    try:
        workload = space.workload.loaded(path.parent)
    except TraceFileError as e:
        raise UserError(f"{path}: workload.trace: {e}") from None
    return space if workload is space.workload else space.model_copy(update={"workload": workload})


def load_space(path: str | Path) -> SearchSpace:
    path = Path(path)
    return parse_space(read_yaml(path), path)


def read_yaml(path: Path) -> Any:
    """A search-space file's data, unvalidated; every problem reading or parsing it is one line."""
    return _parse_yaml(path, _read_text(path))


def _read_text(path: Path) -> str:
    """The file's text: a regular file of at most ``MAX_SPACE_BYTES``, UTF-8."""
    try:
        raw = read_input(path, MAX_SPACE_BYTES)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; pass an existing search-space YAML to --space") from None
    except NotRegularFile as e:
        raise UserError(f"{path}: {e} (a search-space YAML)") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError:  # a NUL byte in the path
        raise UserError(f"{path}: not a valid file path; pass a search-space YAML to --space") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(f"{path}: line {line}, column {column}: not UTF-8 text; save the file as UTF-8") from None


def _where(e: yaml.YAMLError, text: str) -> str:
    """': line L, column C' of a YAML error, or '' where it has no place. A parser error
    carries a mark; a reader error (a control character, a NUL) only its offset in the text."""
    mark = getattr(e, "problem_mark", None)
    if mark is not None:
        return f": line {mark.line + 1}, column {mark.column + 1}"
    position = getattr(e, "position", None)
    if isinstance(position, int):
        line = text.count("\n", 0, position) + 1
        return f": line {line}, column {position - (text.rfind(chr(10), 0, position) + 1) + 1}"
    return ""


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        problem = _QUOTED.sub("'...'", getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0])
        raise UserError(f"{path}{_where(e, text)}: malformed YAML: {problem}") from None
    except RecursionError:
        raise UserError(f"{path}: malformed YAML: nested too deeply") from None
    except (ValueError, OverflowError):  # a scalar YAML types but Python cannot hold (a 5000-digit int, 2024-13-45)
        raise UserError(f"{path}: malformed YAML: a value out of range (a number or date)") from None
    if _too_big(data, MAX_SPACE_DEPTH, [MAX_SPACE_NODES]):
        raise UserError(f"{path}: the YAML expands to more than {MAX_SPACE_NODES} values or {MAX_SPACE_DEPTH} levels "
                        "(anchors and aliases count once per use); write the space out plainly")
    return data


def _too_big(node: Any, depth: int, budget: list[int]) -> bool:
    """Whether ``node`` (aliases counted once per use, cycles as infinitely deep) exceeds the
    depth or the node budget; stops as soon as it does."""
    budget[0] -= 1
    if depth < 0 or budget[0] < 0:
        return True
    if isinstance(node, dict):
        return any(_too_big(k, depth - 1, budget) or _too_big(v, depth - 1, budget) for k, v in node.items())
    if isinstance(node, list):
        return any(_too_big(v, depth - 1, budget) for v in node)
    return False


def space_fingerprint(space: SearchSpace, env_vars: tuple[str, ...] = VLLM_ENV_VARS) -> str:
    """Hash of what defines the study's landscape; a resume with another one is refused.

    Trial counts, storage and cluster settings may change between runs of one study; the
    engine, params, constraints, workload and objectives may not. Of ``engine.env`` only the
    vLLM variables that change memory behaviour count; of ``engine.sim_profile`` and of a
    trace file, the content (profile values, the trace's sha256), not where the file is.
    """
    core = space.model_dump(include={"engine", "params", "constraints", "workload", "objectives", "slo"}, mode="json")
    env = core["engine"].pop("env", None) or {}  # secrets live here and may rotate between runs
    core["engine"].pop("allow_unmodelled_flags", None)  # permits a run, changes no trial
    behaviour = {k: env[k] for k in env_vars if k in env}
    if behaviour:
        core["engine"]["vllm_env"] = behaviour
    trace = core["workload"].get("trace")
    if trace:
        trace.pop("path", None)
    if core["engine"].pop("sim_profile", None) is not None:
        core["engine"]["sim_profile"] = space.engine.profile.to_dict()
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def legacy_space_fingerprint(space: SearchSpace) -> str:
    """The fingerprint autotune recorded before it counted ``VLLM_CPU_KVCACHE_SPACE``: studies
    created then still resume (they cannot tell which KV size they ran with, so the first
    resume trusts the space it is given and records the current fingerprint)."""
    return space_fingerprint(space, LEGACY_VLLM_ENV_VARS)
