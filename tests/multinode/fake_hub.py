"""A stand-in for the Hugging Face Hub, serving one model repo over HTTP on 127.0.0.1.

This machine cannot reach huggingface.co, and the multi-node test must fetch the model
through the real path (``prefetch_weights`` -> ``huggingface_hub.snapshot_download``, then
vLLM's own hub look-ups). So this server implements the few Hub endpoints those use, the
way the Hub answers them (headers ``huggingface_hub`` checks included):

- ``GET  /api/models/{repo}/revision/{rev}``: the repo's commit and files (``repo_info``);
- ``GET  /api/models/{repo}/tree/{rev}[/{dir}]``: the file listing (``list_repo_tree``);
- ``GET  /api/models/{repo}``: the same, at the default branch (``model_info``);
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: a file's metadata (``X-Repo-Commit``, ``ETag``,
  size) or its bytes; a ``Range`` request gets those bytes only (206), as vLLM's reads of a
  safetensors header do. A missing file or revision is a 404 with the Hub's ``X-Error-Code``.

Each node is given its own endpoint, ``http://127.0.0.1:PORT/{node}`` (``HF_ENDPOINT``), so
every request is logged with the node that made it: the test counts downloads per node.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin")  # stored with LFS on the Hub: the ETag is the sha256


@dataclass(frozen=True)
class HubRequest:
    node: str
    method: str
    kind: str  # "info", "tree", "file" or "unknown"
    path: str  # the file for "file", else the URL path
    status: int  # 200: the whole file; 206: a byte range of it
    token: str = ""  # the bearer token it carried, if any


@dataclass(frozen=True)
class _File:
    data: bytes
    etag: str
    git_oid: str

    @classmethod
    def of(cls, name: str, data: bytes) -> _File:
        git_oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's blob id
        etag = hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_oid
        return cls(data, etag, git_oid)


class FakeHub:
    """Serves ``files`` as model repo ``repo_id`` at one commit; records every request."""

    def __init__(self, repo_id: str, files: dict[str, bytes]) -> None:
        self.repo_id = repo_id
        self.files = {name: _File.of(name, data) for name, data in sorted(files.items())}
        self.commit = hashlib.sha1(  # noqa: S324 - a commit id, not security
            json.dumps({n: f.git_oid for n, f in self.files.items()}).encode()).hexdigest()
        self.requests: list[HubRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def endpoint(self, node: str) -> str:
        """The ``HF_ENDPOINT`` a node uses: requests through it are logged as that node's."""
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/{node}"

    def start(self) -> FakeHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def downloads(self, node: str) -> dict[str, int]:
        """How many times ``node`` fetched each whole file (a HEAD only asks for metadata, a
        206 is a byte range: neither is a download)."""
        with self._lock:
            got = [r.path for r in self.requests if r.node == node and r.kind == "file" and r.method == "GET"
                   and r.status == 200]
        return {name: got.count(name) for name in sorted(set(got))}

    def log(self, req: HubRequest) -> None:
        with self._lock:
            self.requests.append(req)

    # -- the Hub's answers: (status, headers, body) ------------------------------------------

    def answer(self, method: str, path: str, byte_range: str | None) -> tuple[str, str, int, dict[str, str], bytes]:
        """The node, kind, and the response to ``method`` on ``path`` (``/{node}/...``)."""
        node, _, rest = path.lstrip("/").partition("/")
        if rest == f"api/models/{self.repo_id}":
            return node, "info", *self._info("main")
        info = f"api/models/{self.repo_id}/revision/"
        tree = f"api/models/{self.repo_id}/tree/"
        resolve = f"{self.repo_id}/resolve/"
        if rest.startswith(info):
            return node, "info", *self._info(rest[len(info):])
        if rest.startswith(tree):
            return node, "tree", *self._tree(rest[len(tree):])
        if rest.startswith(resolve):
            rev, _, name = rest[len(resolve):].partition("/")
            return node, "file", *self._file(method, rev, name, byte_range)
        return node, "unknown", 404, {"X-Error-Code": "RepoNotFound"}, b'{"error": "not found"}'

    def _revision_ok(self, rev: str) -> bool:
        return rev in ("main", self.commit)

    def _missing_revision(self) -> tuple[int, dict[str, str], bytes]:
        return 404, {"X-Error-Code": "RevisionNotFound"}, b'{"error": "revision not found"}'

    def _info(self, rev: str) -> tuple[int, dict[str, str], bytes]:
        if not self._revision_ok(rev):
            return self._missing_revision()
        body = {"id": self.repo_id, "modelId": self.repo_id, "sha": self.commit, "private": False,
                "gated": False, "disabled": False, "tags": [], "downloads": 0, "likes": 0,
                "siblings": [{"rfilename": n} for n in self.files]}
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def _tree(self, rest: str) -> tuple[int, dict[str, str], bytes]:
        rev, _, folder = rest.partition("/")
        if not self._revision_ok(rev):
            return self._missing_revision()
        if folder.strip("/"):  # the repo is flat: no sub-folders
            return 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": self.commit}, b'{"error": "no such path"}'
        entries = []
        for name, f in self.files.items():
            entry = {"type": "file", "path": name, "size": len(f.data), "oid": f.git_oid}
            if name.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": f.etag, "size": len(f.data), "pointerSize": 134}
            entries.append(entry)
        return 200, {"Content-Type": "application/json"}, json.dumps(entries).encode()

    def _file(self, method: str, rev: str, name: str, byte_range: str | None) -> tuple[int, dict[str, str], bytes]:
        if not self._revision_ok(rev):
            return self._missing_revision()
        f = self.files.get(name)
        if f is None:
            return 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": self.commit}, b'{"error": "no such file"}'
        headers = {"X-Repo-Commit": self.commit, "ETag": f'"{f.etag}"', "Content-Type": "application/octet-stream",
                   "Accept-Ranges": "bytes"}
        status, data = 200, f.data
        if byte_range and method == "GET":
            first, last = _byte_range(byte_range, len(f.data))
            status, data = 206, f.data[first:last + 1]
            headers["Content-Range"] = f"bytes {first}-{last}/{len(f.data)}"
        headers["Content-Length"] = str(len(data))
        return status, headers, b"" if method == "HEAD" else data


def _byte_range(header: str, size: int) -> tuple[int, int]:
    """First and last byte of a single ``bytes=a-b``, ``bytes=a-`` or ``bytes=-n`` range."""
    a, _, b = header.removeprefix("bytes=").split(",")[0].strip().partition("-")
    if not a:  # the last n bytes
        return max(0, size - int(b)), size - 1
    return int(a), min(int(b), size - 1) if b else size - 1


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            path = unquote(urlsplit(self.path).path)
            node, kind, status, headers, body = hub.answer(self.command, path, self.headers.get("Range"))
            name = path.split("/resolve/", 1)[-1].partition("/")[2] if kind == "file" else path
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            hub.log(HubRequest(node, self.command, kind, name, status, token))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _serve  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # requests are recorded in hub.requests instead of printed

    return Handler
