"""Keeping secrets out of logs, MLflow and exported files.

Secrets reach autotune in two ways: env vars for the server (an HF token) and database
URLs (a password). Everything that leaves the process goes through these maskers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MASK = "***"
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIAL|AUTH)", re.I)
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*")


def mask_url(url: str) -> str:
    """``postgresql://u:pw@h/db`` -> ``postgresql://u:***@h/db``.

    A ``${VAR}`` reference is kept: it names where the password lives without revealing it,
    and the saved space needs it to reopen the storage (`autotune status`/`export`).
    """

    def sub(m: re.Match[str]) -> str:
        if _ENV_REF.fullmatch(m["pw"]):
            return m[0]
        return f"{m['scheme']}{m['user']}:{MASK}@"

    return _URL_PASSWORD.sub(sub, url)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else mask_url(v)) for k, v in env.items()}


def secret_values(env: Mapping[str, str], urls: Sequence[str | None] = ()) -> list[str]:
    """The literal secret strings, so free text (logs, failure reasons) can be scrubbed."""
    out = [v for k, v in env.items() if is_secret_name(k) and v]
    for url in urls:
        if url and (m := _URL_PASSWORD.search(url)):
            out.append(m["pw"])
    return [s for s in out if len(s) >= 4]


def scrub(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, MASK)
    return mask_url(text)
