"""A real HTTP server on loopback for source tests: static files with Range, a fake Hub, faults.

Runs as its own process (``LoopbackServer.start(config)`` runs this file with ``sys.executable``:
standard library only) on two ports: ``hub`` (the Hub API, ``/resolve``, static files) and ``cdn``
(the storage host ``/resolve`` redirects to, with expiring signed URLs). Control endpoints under
``/__control__/`` (not logged) set faults, move branches and return the request log, refs, commits.
Writes: only the dataset branch / preupload / commit API (what ``HfApi.create_branch`` and
``HfApi.upload_file`` use; files uploaded inline, "regular"); every other write is 405.

Config (JSON): ``static`` (folder served under ``/static/``: Range, HTML indexes, strong ETags);
``scratch`` (folder of the commit folders uploads make; default: the system temp folder);
``datasets`` (``{repo_id: {"refs": {"main": sha}, "commits": {sha: folder}}}``); ``buckets``
(``{bucket_id: folder}``); ``signed_ttl_s`` (a signed URL's lifetime, s); ``latency_s`` (a round
trip, slept once per new connection and before each answer, control endpoints excepted; default
0); ``bandwidth_bps`` (all response bodies together paced to this many bytes/s in 64 KiB pieces;
default: unpaced; ``python -m tools.bench`` serves its remote store so).

Faults (``set_faults([...])``), each ``{"kind", "match" (substring of the path), "count",
"methods" (default ["GET"]), "status", "retry_after", "delay_s"}``; kinds: ``status``,
``truncate`` (announces n bytes, sends fewer, closes), ``bad_range`` (206 with shifted
Content-Range and bytes), ``short`` (206 whose body and Content-Length are too short),
``reset`` (TCP RST, no answer), ``slow`` (sleeps ``delay_s`` first), ``ignore_range`` (200, whole file).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit


class State:
    def __init__(self, config: dict) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.faults: list[dict] = []
        self.log: list[dict] = []
        self.hashes: dict[str, tuple[str, str]] = {}
        self.hub_port = 0
        self.cdn_port = 0
        self.latency_s = float(config.get("latency_s") or 0.0)
        bw = config.get("bandwidth_bps")
        self.bandwidth_bps = float(bw) if bw else None
        self._pace_lock = threading.Lock()
        self._pace_next = 0.0

    def pace(self, nbytes: int) -> None:
        """Block until ``nbytes`` more body bytes fit the shared bandwidth cap (no-op without one)."""
        if not self.bandwidth_bps:
            return
        with self._pace_lock:
            now = time.monotonic()
            start = max(now, self._pace_next)
            self._pace_next = start + nbytes / self.bandwidth_bps
            wait = self._pace_next - now
        if wait > 0:
            time.sleep(wait)

    def take_fault(self, method: str, path: str) -> dict | None:
        with self.lock:
            for f in self.faults:
                if f.get("count", 1) > 0 and method in f.get("methods", ["GET"]) and f.get("match", "") in path:
                    f["count"] = f.get("count", 1) - 1
                    return dict(f)
        return None

    def file_hashes(self, p: Path) -> tuple[str, str]:
        key = f"{p}:{p.stat().st_mtime_ns}:{p.stat().st_size}"
        with self.lock:
            hit = self.hashes.get(key)
        if hit is None:
            data = p.read_bytes()
            hit = (hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), hashlib.sha256(data).hexdigest())
            with self.lock:
                self.hashes[key] = hit
        return hit


def _inside(folder: Path, rel: str) -> Path | None:
    """``folder / rel`` when ``rel`` (already percent-decoded) is a relative path without ``..``,
    ``.``, empty components, backslashes or NUL; else None (answered 404). Names only: links inside
    the folder are followed, as the library's local source does."""
    rel = rel.strip("/")
    if not rel:
        return folder
    if "\\" in rel or "\x00" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    return folder / rel


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        if self.state.latency_s:  # a new connection costs one round trip before its first request
            time.sleep(self.state.latency_s)

    # --- plumbing -------------------------------------------------------------------------------
    def _send(self, status, body=b"", headers=None, ctype="application/json", length=None):
        """Answer ``status`` with ``body`` (``length``: the Content-Length announced, default the
        body's), paced in 64 KiB pieces under a bandwidth cap."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            step = 1 << 16 if self.state.bandwidth_bps else max(1, len(body))
            for i in range(0, len(body), step):
                self.state.pace(len(body[i : i + step]))
                self.wfile.write(body[i : i + step])

    def _json(self, obj, status=200, headers=None):
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status: int, message: str, code: str):
        self._json({"error": message}, status, {"X-Error-Code": code})

    def _not_found(self, code="EntryNotFound"):
        self._error(404, "not found", code)

    def _dispatch(self):
        st = self.state
        url = urlsplit(self.path)
        path = unquote(url.path)
        if path.startswith("/__control__/"):
            return self._control(path[len("/__control__/") :])
        if st.latency_s:
            time.sleep(st.latency_s)
        port = self.server.server_address[1]
        with st.lock:
            st.log.append(
                {
                    "method": self.command,
                    "path": path,
                    "query": url.query,
                    "range": self.headers.get("Range"),
                    "host": "cdn" if port == st.cdn_port else "hub",
                    "auth": "Authorization" in self.headers,
                    "t": time.time(),
                }
            )
        fault = st.take_fault(self.command, path)
        if fault and fault["kind"] == "slow":
            time.sleep(fault.get("delay_s", 1.0))
            fault = None
        if fault and fault["kind"] == "reset":
            return self._reset()
        if fault and fault["kind"] == "status":
            h = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
            return self._json({"error": "injected"}, fault.get("status", 500), h)
        if self.command == "POST" and self._write_api(path):
            return
        if self.command in ("POST", "PUT", "DELETE"):
            return self._json({"error": "read-only loopback"}, 405)
        q = parse_qs(url.query)
        parts = path.strip("/").split("/")
        try:
            if parts[0] == "static":
                return self._file(Path(st.config["static"]), "/".join(parts[1:]), fault, listing=True)
            if parts[0] == "cdn" and port == st.cdn_port:
                return self._cdn(parts[1:], q, fault)
            if parts[:2] == ["api", "datasets"]:
                return self._api_dataset(parts[2:], q)
            if parts[:2] == ["api", "buckets"]:
                return self._api_bucket(parts[2:], q)
            if parts[0] in ("datasets", "buckets") and len(parts) > 3 and parts[3] == "resolve":
                return self._resolve(parts[0], parts[1] + "/" + parts[2], parts[4:])
        except (BrokenPipeError, ConnectionResetError):
            return
        self._not_found()

    do_HEAD = do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    def _control(self, what: str):
        st = self.state
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"null") if n else None
        with st.lock:
            if what == "faults":
                st.faults = body or []
            elif what == "log":
                return self._json(list(st.log))
            elif what == "clear_log":
                st.log = []
            elif what == "set_ref":
                st.config["datasets"][body["repo"]]["refs"][body["ref"]] = body["sha"]
            elif what == "refs":
                return self._json({repo: dict(ds["refs"]) for repo, ds in st.config.get("datasets", {}).items()})
            elif what == "commits":
                return self._json({repo: dict(ds["commits"]) for repo, ds in st.config.get("datasets", {}).items()})
        self._json({"ok": True})

    # --- write API of dataset repositories (branch, preupload, commit) ---------------------------
    def _write_api(self, path: str) -> bool:
        """``POST /api/datasets/{repo}/branch/{name}``, ``.../preupload/{rev}``, ``.../commit/{rev}``;
        True when answered. A commit copies its parent's folder (hard links) into a new commit folder
        and moves the branch; the parent commit and every other ref stay as they were."""
        parts = path.strip("/").split("/")
        if parts[:2] != ["api", "datasets"] or len(parts) < 6 or parts[4] not in ("branch", "preupload", "commit"):
            return False
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        with self.state.lock:
            self._write_op(parts[2] + "/" + parts[3], parts[4], unquote("/".join(parts[5:])), body)
        return True

    def _write_op(self, repo: str, op: str, rev: str, body: bytes) -> None:
        ds = self._dataset(repo)
        if ds is None:
            return self._error(404, "Repository not found", "RepoNotFound")
        if op == "branch":
            if rev in ds["refs"]:
                return self._json({"error": "Reference already exists"}, 409)
            sha = self._sha_of(ds, (json.loads(body or b"{}") or {}).get("startingPoint") or "main")
            if sha is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            ds["refs"][rev] = sha
            return self._json({"ok": True})
        if rev not in ds["refs"]:  # uploads go to branches only
            return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        if op == "preupload":
            files = (json.loads(body or b"{}") or {}).get("files", [])
            regular = {"uploadMode": "regular", "shouldIgnore": False, "oid": None}
            return self._json({"files": [{"path": f["path"], **regular} for f in files], "commitOid": ds["refs"][rev]})
        parent = ds["refs"][rev]
        sha = hashlib.sha1(parent.encode() + body).hexdigest()

        def link_or_copy(a, b):
            try:
                os.link(a, b)
            except OSError:
                shutil.copy2(a, b)

        folder = Path(tempfile.mkdtemp(prefix=f"commit-{sha[:8]}-", dir=self.state.config.get("scratch")))
        shutil.copytree(ds["commits"][parent], folder, copy_function=link_or_copy, dirs_exist_ok=True)
        for item in (json.loads(x) for x in body.splitlines() if x.strip()):
            if item.get("key") == "file":
                dst = folder / item["value"]["path"]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.unlink(missing_ok=True)  # never write through a hard link into the parent commit
                dst.write_bytes(base64.b64decode(item["value"]["content"]))
            elif item.get("key") == "deletedFile":
                (folder / item["value"]["path"]).unlink(missing_ok=True)
            elif item.get("key") != "header":
                return self._json({"error": f"unsupported commit operation {item.get('key')}"}, 400)
        ds["commits"][sha] = str(folder)
        ds["refs"][rev] = sha
        url = f"http://127.0.0.1:{self.state.hub_port}/datasets/{repo}/commit/{sha}"
        self._json({"commitUrl": url, "commitOid": sha, "pullRequestUrl": None})

    # --- static files with Range ---------------------------------------------------------------
    def _file(self, folder: Path, rel: str, fault, listing=False):
        p = _inside(folder, rel)
        if p is None:
            return self._not_found()
        if p.is_dir() and listing:
            links = "".join(
                f'<a href="{quote(c.name)}{"/" if c.is_dir() else ""}">{html.escape(c.name)}</a>\n'
                for c in sorted(p.iterdir())
            )
            return self._send(200, f"<html><body>{links}</body></html>".encode(), ctype="text/html")
        if not p.is_file():
            return self._not_found()
        size = p.stat().st_size
        headers = {"ETag": f'"{self.state.file_hashes(p)[1][:32]}"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if not rng or (fault and fault["kind"] == "ignore_range"):
            return self._send(
                200, p.read_bytes() if self.command != "HEAD" else b"", headers, "application/octet-stream", length=size
            )
        a, b = rng.split("=", 1)[1].split("-")
        a, b = int(a), min(int(b), size - 1)
        if a >= size:
            return self._send(416, b"", {"Content-Range": f"bytes */{size}"})

        def piece(lo: int, hi: int) -> bytes:  # bytes [lo, hi) of the file: only the range is read
            with open(p, "rb") as f:
                f.seek(lo)
                return f.read(max(0, hi - lo))

        body = piece(a, b + 1)
        cr = f"bytes {a}-{b}/{size}"
        if fault and fault["kind"] == "bad_range":
            body = piece(a + 1, b + 2)
            cr = f"bytes {a + 1}-{b + 1}/{size}"
        if fault and fault["kind"] == "short":
            body = body[: max(0, len(body) // 2)]
        headers["Content-Range"] = cr
        if fault and fault["kind"] == "truncate":  # announces the whole range, sends half of it
            self._send(206, body[: len(body) // 2], headers, "application/octet-stream", length=len(body))
            self.wfile.flush()
            return self._reset()
        self._send(206, body, headers, "application/octet-stream")

    def _reset(self) -> None:
        """Close the connection with a TCP RST (``SO_LINGER`` 0)."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    # --- fake Hub ------------------------------------------------------------------------------
    def _dataset(self, repo: str):
        return self.state.config.get("datasets", {}).get(repo)

    def _sha_of(self, ds, rev: str):
        return rev if rev in ds["commits"] else ds["refs"].get(rev)

    def _tree(self, folder: Path, sub: str, q: dict, bucket: bool):
        """Answer a tree listing of ``folder / sub`` (``?recursive=true``: every level)."""
        base = _inside(folder, sub)
        if base is None or not base.is_dir():
            return self._not_found()
        out = []
        recursive = q.get("recursive", ["False"])[0].lower() == "true"
        for p in sorted(base.rglob("*") if recursive else base.iterdir()):
            rel = p.relative_to(folder).as_posix()
            if p.is_dir():
                out.append({"type": "directory", "path": rel, "oid": "0" * 40})
                continue
            sha1, sha256 = self.state.file_hashes(p)
            entry = {"type": "file", "path": rel, "size": p.stat().st_size}
            if bucket:
                out.append(entry | {"xetHash": sha256, "mtime": "2026-01-01T00:00:00.000Z"})
            else:
                out.append(entry | {"oid": sha1, "lfs": {"oid": sha256, "size": entry["size"], "pointerSize": 134}})
        self._json(out)

    def _api_dataset(self, parts, q):
        repo = "/".join(parts[:2])
        ds = self._dataset(repo)
        if ds is None:
            return self._error(404, "Repository not found", "RepoNotFound")
        if len(parts) >= 4 and parts[2] == "revision":
            sha = self._sha_of(ds, "/".join(parts[3:]))
            if sha is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            return self._json({"id": repo, "sha": sha, "private": False, "siblings": []})
        if len(parts) >= 4 and parts[2] == "tree":
            sha = self._sha_of(ds, parts[3])
            if sha is None:
                return self._error(404, "Invalid rev id", "RevisionNotFound")
            return self._tree(Path(ds["commits"][sha]), "/".join(parts[4:]), q, False)
        self._not_found()

    def _api_bucket(self, parts, q):
        bid = "/".join(parts[:2])
        folder = self.state.config.get("buckets", {}).get(bid)
        if folder is None:
            return self._error(404, "Bucket not found", "RepoNotFound")
        if len(parts) == 2:
            return self._json(
                {"id": bid, "private": False, "createdAt": "2026-01-01T00:00:00.000Z", "size": 0, "totalFiles": 0}
            )
        if parts[2] == "tree":
            return self._tree(Path(folder), "/".join(parts[3:]), q, True)
        self._not_found()

    def _resolve(self, kind, repo, rest):
        st = self.state
        if kind == "datasets":
            ds = self._dataset(repo)
            if ds is None:
                return self._not_found("RepoNotFound")
            sha = self._sha_of(ds, rest[0])
            if sha is None:
                return self._not_found("RevisionNotFound")
            rel, folder, key = "/".join(rest[1:]), Path(ds["commits"][sha]), f"d/{repo}/{sha}"
        else:
            folder = st.config.get("buckets", {}).get(repo)
            if folder is None:
                return self._not_found("RepoNotFound")
            rel, folder, sha, key = unquote("/".join(rest)), Path(folder), None, f"b/{repo}"
        p = _inside(folder, rel)
        if p is None or not p.is_file():
            return self._not_found()
        sha1, sha256 = st.file_hashes(p)
        expires = int(time.time() + st.config.get("signed_ttl_s", 600))
        loc = f"http://127.0.0.1:{st.cdn_port}/cdn/{key}/{quote(rel)}?Expires={expires}&Signature=s3cr3t-sig"
        h = {"Location": loc, "X-Linked-Size": p.stat().st_size, "X-Linked-Etag": f'"{sha256}"'}
        if sha:
            h["X-Repo-Commit"] = sha
        else:
            h["X-Xet-Hash"] = sha256
        self._send(302, b"", h)

    def _cdn(self, parts, q, fault):
        st = self.state
        if float(q.get("Expires", ["0"])[0]) < time.time():
            return self._send(403, b"<Error>Request has expired</Error>", ctype="application/xml")
        if parts[0] == "d":
            repo, sha, rel = parts[1] + "/" + parts[2], parts[3], "/".join(parts[4:])
            folder = Path(st.config["datasets"][repo]["commits"][sha])
        else:
            repo, rel = parts[1] + "/" + parts[2], "/".join(parts[3:])
            folder = Path(st.config["buckets"][repo])
        return self._file(folder, rel, fault)


def serve(config: dict) -> None:
    st = State(config)
    Handler.state = st
    hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hub.daemon_threads = cdn.daemon_threads = True
    st.hub_port, st.cdn_port = hub.server_address[1], cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    print(json.dumps({"hub": st.hub_port, "cdn": st.cdn_port}), flush=True)
    hub.serve_forever()


class LoopbackServer:
    """Handle on a server process. ``url`` is the Hub endpoint; ``static_url`` the static root."""

    def __init__(self, proc: subprocess.Popen, hub_port: int, cdn_port: int) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{hub_port}"
        self.cdn_url = f"http://127.0.0.1:{cdn_port}"
        self.static_url = self.url + "/static/"

    @classmethod
    def start(cls, config: dict) -> LoopbackServer:
        proc = subprocess.Popen([sys.executable, __file__, json.dumps(config)], stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise RuntimeError("loopback server did not start")
        ports = json.loads(line)
        return cls(proc, ports["hub"], ports["cdn"])

    def _control(self, what: str, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(f"{self.url}/__control__/{what}", data=data, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def set_faults(self, faults: list[dict]) -> None:
        self._control("faults", faults)

    def log(self) -> list[dict]:
        return self._control("log")

    def clear_log(self) -> None:
        self._control("clear_log")

    def set_ref(self, repo: str, ref: str, sha: str) -> None:
        self._control("set_ref", {"repo": repo, "ref": ref, "sha": sha})

    def refs(self) -> dict:
        """``{repo: {ref: sha}}`` now (branches created by uploads included)."""
        return self._control("refs")

    def commits(self) -> dict:
        """``{repo: {sha: folder}}`` now (commits made by uploads included)."""
        return self._control("commits")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _exit_with_parent() -> None:
    """Stop when the process that started this server is gone (even after ``kill -9``)."""
    parent = os.getppid()
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    serve(json.loads(sys.argv[1]))
