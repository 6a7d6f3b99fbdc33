"""A node-local payload cache on disk, bounded: what the store served, kept across epochs and runs
and shared by every rank and DataLoader worker of the node, with no coordinator process.

Layout under ``cache_dir``::

    lerobotstream-payload-v1/
        .lock                      filelock: taken to add an entry (and evict), never to read
        <kk>/<key>.bin             one entry per (store identity, file, byte range) read
        <kk>/.<key>.*.tmp          an entry being written (never read; swept when stale)

``key`` is the SHA-256 of the store's identity for the file (a Hub dataset's pinned commit, else the
file's fingerprint: xet hash, ETag, mtime and size), its path and the range, so an entry never
serves another revision; a file without a stable identity is not cached. An entry is a 64-byte
header (magic, payload length, SHA-256 of the key) + the payload + its SHA-256; a truncated,
corrupt or foreign entry is deleted and reported as a miss, never returned.

Writes are atomic (a temporary file, then ``os.replace``). Adding an entry takes the file lock and
evicts the least recently used entries (modification time, refreshed on each hit) until it fits
under ``limit_bytes``. Readers take no lock: an entry evicted under a reader is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

LAYOUT = "lerobotstream-payload-v1"
_MAGIC = b"LRSPAYL1"
_HEADER = struct.Struct("<8sQ32s16x")  # magic, payload length, sha256(key), padding: 64 bytes
_TRAILER = 32  # sha256(payload)
#: a temporary file older than this is a dead writer's: swept by the next eviction, seconds
STALE_TMP_S = 3600.0


class DiskCache:
    """Byte ranges of store files, on disk, bounded by ``limit_bytes`` (LRU).

    Args:
        cache_dir (str | os.PathLike): folder of the cache (created; shared by the node's processes).
        limit_bytes (int): the entries' total at most, bytes (> 0).
        lock_timeout_s (float): seconds to wait for the lock to add an entry (else it is not stored).

    Counters (this process): ``hits``, ``misses``, ``corrupt`` (entries refused and deleted),
    ``writes``, ``evictions``, ``bytes_read``, ``bytes_written``.
    """

    def __init__(self, cache_dir: str | os.PathLike, limit_bytes: int, *, lock_timeout_s: float = 60.0) -> None:
        if int(limit_bytes) <= 0:
            raise ValueError(f"limit_bytes must be positive, got {limit_bytes}")
        self.root = Path(cache_dir).expanduser() / LAYOUT
        self.root.mkdir(parents=True, exist_ok=True)
        self.limit_bytes = int(limit_bytes)
        self.lock_timeout_s = float(lock_timeout_s)
        self._lock = threading.Lock()
        self.counters = dict.fromkeys(
            ("hits", "misses", "corrupt", "writes", "evictions", "bytes_read", "bytes_written"), 0
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self.counters[k] += v

    @staticmethod
    def key(identity: str, path: str, offset: int, length: int) -> bytes:
        """SHA-256 (32 bytes) of what was read: the store identity, the file, the range."""
        return hashlib.sha256(json.dumps([identity, path, int(offset), int(length)]).encode()).digest()

    def _path(self, key: bytes) -> Path:
        h = key.hex()
        return self.root / h[:2] / f"{h}.bin"

    def get(self, key: bytes, length: int) -> bytes | None:
        """The cached payload of ``key`` (exactly ``length`` bytes), or None (absent, or refused:
        wrong size, key or checksum; a refused entry is deleted)."""
        path = self._path(key)
        n = _HEADER.size + int(length) + _TRAILER
        try:
            with open(path, "rb") as f:
                blob = f.read(n + 1)  # a larger (hostile) entry is refused without reading it whole
        except OSError:  # absent, or evicted under us
            self._count(misses=1)
            return None
        ok = len(blob) == n
        if ok:
            magic, size, kdig = _HEADER.unpack_from(blob)
            payload = blob[_HEADER.size : _HEADER.size + int(length)]
            ok = (
                magic == _MAGIC
                and size == int(length)
                and kdig == key
                and hashlib.sha256(payload).digest() == blob[-_TRAILER:]
            )
        if not ok:
            with contextlib.suppress(OSError):
                path.unlink()
            self._count(misses=1, corrupt=1)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recency for the LRU
        self._count(hits=1, bytes_read=len(payload))
        return payload

    def put(self, key: bytes, payload: bytes) -> bool:
        """Store ``payload`` under ``key`` atomically, evicting LRU entries to fit; False when not
        stored (larger than the limit, lock timeout, write error: never fails the read)."""
        from filelock import FileLock, Timeout

        size = _HEADER.size + len(payload) + _TRAILER
        if size > self.limit_bytes:
            return False
        path = self._path(key)
        tmp = None
        try:
            path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_HEADER.pack(_MAGIC, len(payload), key))
                f.write(payload)
                f.write(hashlib.sha256(payload).digest())
            with FileLock(str(self.root / ".lock"), timeout=self.lock_timeout_s):
                self._evict(size, keep=path)
                os.replace(tmp, path)
                tmp = None
        except (OSError, Timeout):
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        self._count(writes=1, bytes_written=len(payload))
        return True

    def _evict(self, incoming: int, *, keep: Path) -> None:
        """Under the lock: delete least recently used entries until ``incoming`` more bytes fit;
        sweep stale temporary files."""
        entries = []
        now = time.time()
        for sub in os.scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(sub.path):
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.endswith(".tmp"):
                    if now - st.st_mtime > STALE_TMP_S:
                        with contextlib.suppress(OSError):
                            os.unlink(e.path)
                elif e.name.endswith(".bin") and e.path != str(keep):
                    entries.append((st.st_mtime, st.st_size, e.path))
        total = sum(s for _, s, _ in entries)
        entries.sort()
        evicted = 0
        for _, s, p in entries:
            if total + incoming <= self.limit_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(p)
            total -= s
            evicted += 1
        if evicted:
            self._count(evictions=evicted)

    def total_bytes(self) -> int:
        """The entries' total size now, bytes (a scan)."""
        return sum(
            e.stat().st_size
            for sub in os.scandir(self.root)
            if sub.is_dir()
            for e in os.scandir(sub.path)
            if e.name.endswith(".bin")
        )


def source_identity(source: Any, path: str) -> str | None:
    """What pins ``path``'s bytes in ``source``: a Hub dataset's commit, else the file's fingerprint
    (None: no stable identity, not cached). The root is part of it."""
    commit = getattr(source, "commit", None)
    if commit:
        return f"{source.root_display}@{commit}"
    fp = source.fingerprint(path)
    return None if fp is None else f"{source.root_display}#{fp}"
