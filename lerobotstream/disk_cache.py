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
corrupt or foreign entry is deleted and reported as a miss, never returned. Only regular files are
read (``lerobotstream._cachefile``: a FIFO or device is refused without blocking) and no symbolic
link inside the cache is followed: a linked ``<kk>`` folder is replaced by a real one on the next
write, a linked or special entry is deleted (the name, never a link's target); sizes use ``lstat``.

Writes are atomic (a temporary file, then ``os.replace``). Adding an entry takes the file lock and
evicts the least recently used entries (modification time, refreshed on each hit) until it fits
under ``limit_bytes``. Readers take no lock: an entry evicted under a reader is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from lerobotstream._cachefile import NotRegularFileError, read_regular

LAYOUT = "lerobotstream-payload-v1"
_MAGIC = b"LRSPAYL1"
_HEADER = struct.Struct("<8sQ32s16x")  # magic, payload length, sha256(key), padding: 64 bytes
_TRAILER = 32  # sha256(payload)
#: a temporary file older than this is a dead writer's: swept by the next eviction, seconds
STALE_TMP_S = 3600.0
_COUNTERS_LOCK = threading.Lock()  # module-level: a DiskCache pickles to workers without a lock


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
        self.counters = dict.fromkeys(
            ("hits", "misses", "corrupt", "writes", "evictions", "bytes_read", "bytes_written"), 0
        )

    def _count(self, **kw: int) -> None:
        with _COUNTERS_LOCK:
            for k, v in kw.items():
                self.counters[k] += v

    @staticmethod
    def key(identity: str, path: str, offset: int, length: int) -> bytes:
        """SHA-256 (32 bytes) of what was read: the store identity, the file, the range."""
        return hashlib.sha256(json.dumps([identity, path, int(offset), int(length)]).encode()).digest()

    @staticmethod
    def _names(key: bytes) -> tuple[str, str]:
        """``(shard folder, entry file)`` names of ``key``."""
        h = key.hex()
        return h[:2], f"{h}.bin"

    def _path(self, key: bytes) -> Path:
        """Where the entry of ``key`` lives."""
        shard, name = self._names(key)
        return self.root / shard / name

    def _open_shard(self, shard: str, *, create: bool) -> int | None:
        """A descriptor of the real folder ``root/shard`` (never a symbolic link followed), or None.
        ``create``: make it, first removing whatever non-folder holds its name (a symbolic link is
        removed, never its target)."""
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        path = self.root / shard
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
        except OSError:  # a symbolic link (ELOOP) or a file (ENOTDIR) where the folder goes
            if not create:
                return None
            try:
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    return None  # a real folder that cannot be opened
                os.unlink(path)  # its name only: a link's target is never touched
            except OSError:
                return None
        try:
            os.mkdir(path)
        except FileExistsError:
            pass  # another writer made it
        except OSError:
            return None
        try:
            return os.open(path, flags)
        except OSError:
            return None

    def get(self, key: bytes, length: int) -> bytes | None:
        """The cached payload of ``key`` (exactly ``length`` bytes), or None (absent, or refused:
        wrong size, key or checksum, not a regular file, or under a symbolic link; a refused entry
        is deleted)."""
        shard, name = self._names(key)
        n = _HEADER.size + int(length) + _TRAILER
        dfd = self._open_shard(shard, create=False)
        if dfd is None:  # absent, or not a real folder (never followed)
            self._count(misses=1)
            return None
        try:
            return self._get_in(dfd, name, key, int(length), n)
        finally:
            os.close(dfd)

    def _get_in(self, dfd: int, name: str, key: bytes, length: int, n: int) -> bytes | None:
        try:
            # a larger (hostile) entry is refused without reading it whole; a FIFO, device or
            # symbolic link is refused without blocking or following it
            blob = read_regular(name, n + 1, follow_symlinks=False, dir_fd=dfd)
        except NotRegularFileError:
            blob = b""
        except OSError:  # absent, or evicted under us
            self._count(misses=1)
            return None
        ok = len(blob) == n
        if ok:
            magic, size, kdig = _HEADER.unpack_from(blob)
            payload = blob[_HEADER.size : _HEADER.size + length]
            ok = (
                magic == _MAGIC
                and size == length
                and kdig == key
                and hashlib.sha256(payload).digest() == blob[-_TRAILER:]
            )
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)  # the name only: a link's target is never touched
            self._count(misses=1, corrupt=1)
            return None
        with contextlib.suppress(OSError):
            os.utime(name, dir_fd=dfd, follow_symlinks=False)  # recency for the LRU
        self._count(hits=1, bytes_read=len(payload))
        return payload

    def drop(self, key: bytes) -> None:
        """Delete the entry of ``key`` (its bytes were refused downstream); counted as corrupt."""
        shard, name = self._names(key)
        dfd = self._open_shard(shard, create=False)
        if dfd is None:
            return
        try:
            os.unlink(name, dir_fd=dfd)
            self._count(corrupt=1)
        except OSError:
            pass
        finally:
            os.close(dfd)

    def put(self, key: bytes, payload: bytes) -> bool:
        """Store ``payload`` under ``key`` atomically, evicting LRU entries to fit; False when not
        stored (larger than the limit, lock timeout, write error, a shard folder that is not a real
        folder and cannot be replaced: never fails the read)."""
        from filelock import FileLock, Timeout

        size = _HEADER.size + len(payload) + _TRAILER
        if size > self.limit_bytes:
            return False
        shard, name = self._names(key)
        dfd = self._open_shard(shard, create=True)
        if dfd is None:
            return False
        tmp = None
        try:
            tmp = f".{name[:-4]}.{uuid.uuid4().hex}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(tmp, flags, 0o644, dir_fd=dfd), "wb") as f:
                f.write(_HEADER.pack(_MAGIC, len(payload), key))
                f.write(payload)
                f.write(hashlib.sha256(payload).digest())
            with FileLock(str(self.root / ".lock"), timeout=self.lock_timeout_s):
                self._evict(size, keep=str(self._path(key)))
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                tmp = None
        except (OSError, Timeout):
            return False
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
            os.close(dfd)
        self._count(writes=1, bytes_written=len(payload))
        return True

    def _scan(self) -> list[tuple[str, os.stat_result]]:
        """``(path, lstat)`` of every name in the real shard folders (symbolic links never followed)."""
        found = []
        for sub in os.scandir(self.root):
            if not sub.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                for e in os.scandir(sub.path):
                    with contextlib.suppress(OSError):
                        found.append((e.path, e.stat(follow_symlinks=False)))
        return found

    def _evict(self, incoming: int, *, keep: str) -> None:
        """Under the lock: delete least recently used entries until ``incoming`` more bytes fit;
        sweep stale temporary files."""
        entries = []
        now = time.time()
        for path, st in self._scan():
            if path.endswith(".tmp"):
                if now - st.st_mtime > STALE_TMP_S:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            elif path.endswith(".bin") and path != keep:
                entries.append((st.st_mtime, st.st_size, path))
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
        """The entries' total size now, bytes (a scan of the real shard folders; a symbolic link
        counts as its own size, never its target's)."""
        return sum(st.st_size for path, st in self._scan() if path.endswith(".bin"))


def source_identity(source: Any, path: str) -> str | None:
    """What pins ``path``'s bytes in ``source``: a Hub dataset's commit, else the file's fingerprint
    (None: no stable identity, not cached). The root is part of it."""
    commit = getattr(source, "commit", None)
    if commit:
        return f"{source.root_display}@{commit}"
    fp = source.fingerprint(path)
    return None if fp is None else f"{source.root_display}#{fp}"
