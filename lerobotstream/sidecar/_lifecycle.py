"""Sidecar resolution at dataset start (:func:`ensure_sidecar`): revision-keyed cache, then a
published sidecar, then a locked local build, installed atomically. Training only reads: nothing
here uploads, creates a branch or writes to the dataset's store.

**Cache key** (:func:`cache_path`): ``<cache_dir>/<repo slug>/mp4-v<schema>-<rev>-<digest16>.npz``,
the digest over :meth:`SidecarIdentity.digest`'s fields: a Hub dataset's resolved commit (a tag and
its commit share one entry), otherwise every selected video's ``(path, size, fingerprint)``, so a
video replaced in place, even at the same size, gets a new entry. Sources without fingerprints
cannot prove a cached sidecar still matches: it is rebuilt at every open (a warning), unless
another process rebuilt it during this same open.

**Lock**: the build (or download) holds the ``filelock`` lock ``<entry>.npz.lock`` (dies with its
holder, even on SIGKILL), its holder described in ``<entry>.npz.lock.info``. Others wait up to
``lock_timeout_s``, then raise :class:`~lerobotstream.errors.SidecarLockTimeoutError` naming the
lock, its probable holder and what to do. A cache folder that cannot take the lock or the archive
raises :class:`~lerobotstream.errors.SidecarWriteError`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lerobotstream import constants
from lerobotstream._cachefile import read_regular
from lerobotstream.errors import (
    LeRobotStreamError,
    SidecarLockTimeoutError,
    SidecarSchemaError,
    SidecarWriteError,
    SourceError,
)
from lerobotstream.mp4._index_file import write_note
from lerobotstream.mp4._npz_schema import SIDECAR_SCHEMA_VERSION
from lerobotstream.sidecar._identity import SidecarIdentity, check_identity, sidecar_identity

logger = logging.getLogger("lerobotstream.sidecar")

#: bytes per request when a published sidecar is copied into the cache
DOWNLOAD_CHUNK_BYTES = 16 * 1024 * 1024


def _slug(text: str | None, default: str, sep: str, limit: int | None = None) -> str:
    """One file-name component of ``text`` (never ``.``/``..`` or empty: those become ``default``)."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", sep, text or "").strip("-")
    s = s[:limit] if limit else s
    return default if s.strip(".") == "" else s


def cache_path(identity: SidecarIdentity, cache_dir: str | os.PathLike | None = None) -> Path:
    """The revision-keyed cache file of ``identity`` (see the module docstring)."""
    root = Path(cache_dir) if cache_dir is not None else constants.SIDECAR_DIR
    rev = identity.commit[:12] if identity.commit else {"bucket": "bucket"}.get(identity.repo_type, "files")
    name = f"mp4-v{SIDECAR_SCHEMA_VERSION}-{_slug(rev, 'revision', '-', 32)}-{identity.digest()[:16]}.npz"
    return root / _slug(identity.repo_id, "dataset", "--") / name


class _BuildLock:
    """``filelock`` lock ``<target>.lock`` plus the holder's ``<target>.lock.info``."""

    def __init__(self, target: Path, timeout_s: float, what: str) -> None:
        self.target = target
        self.lock_path = Path(str(target) + ".lock")
        self.info_path = Path(str(target) + ".lock.info")
        self.timeout_s = float(timeout_s)
        self.what = what
        from filelock import FileLock

        self._lock = FileLock(str(self.lock_path))

    def __enter__(self) -> _BuildLock:
        from filelock import Timeout

        t0 = time.monotonic()
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            while True:
                self._lock.acquire(timeout=max(0.0, self.timeout_s - (time.monotonic() - t0)))
                if self._holds_the_path() is not False:
                    break
                self._lock.release()  # the previous holder removed the file we locked: lock the new one
        except Timeout:
            raise SidecarLockTimeoutError(
                lock_timeout_message(self.lock_path, self.timeout_s, time.monotonic() - t0), path=str(self.lock_path)
            ) from None
        except OSError as e:
            raise SidecarWriteError.from_oserror(
                self.lock_path, e, what="the MP4 sidecar lock", elsewhere="LEROBOTSTREAM_SIDECAR_DIR or HF_LEROBOT_HOME"
            ) from e
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started_unix": time.time()}
        write_note(self.info_path, {**info, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "what": self.what})
        return self

    def _holds_the_path(self) -> bool | None:
        """Whether the locked file is still the one at ``lock_path`` (None: cannot tell)."""
        fd = getattr(getattr(self._lock, "_context", None), "lock_file_fd", None)
        if not isinstance(fd, int):
            return None
        try:
            return os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
        except FileNotFoundError:
            return False
        except OSError:
            return None

    def __exit__(self, *exc: Any) -> None:
        try:
            self.info_path.unlink(missing_ok=True)
            if self._holds_the_path():  # no empty .lock left behind (a waiter re-locks the new file)
                self.lock_path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            self._lock.release()


def lock_timeout_message(lock_path: Path, timeout_s: float, waited_s: float) -> str:
    """The text of :class:`SidecarLockTimeoutError`: the lock, its probable holder, what to do."""
    holder = "an unknown process (no holder information was written)"
    stale = False
    try:
        info = json.loads(read_regular(str(lock_path) + ".info", 1 << 16).decode("utf-8"))
        holder = (
            f"pid {info.get('pid')} on host {info.get('host')}, holding it since {info.get('started')} "
            f"({info.get('what')})"
        )
        if info.get("host") == socket.gethostname():
            try:
                os.kill(int(info["pid"]), 0)
                holder += "; that process is still running"
            except ProcessLookupError:
                holder += "; no such process runs on this host any more"
                stale = True
            except (PermissionError, KeyError, ValueError, TypeError):
                pass
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, not an object: holder unknown
        pass
    return (
        f"timed out after {waited_s:.1f} s (limit {timeout_s:g} s) waiting for the MP4 sidecar lock {lock_path}; "
        f"it is probably held by {holder}. Another process is building or downloading this sidecar: wait for it "
        "to finish, or raise --dataset.streaming_sidecar_lock_timeout_s (sidecar_lock_timeout_s=), or, "
        f"if the holder is dead{' (it looks dead)' if stale else ''}, delete {lock_path} and retry. "
        "A shared sidecar cache or a published sidecar avoids the wait."
    )


#: what reading a hostile published sidecar can raise; each one means "build locally instead"
_PUBLISHED_PROBLEMS = (
    LeRobotStreamError,
    OSError,
    MemoryError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    OverflowError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    RecursionError,
)


def published_size_limit(meta: Any) -> int:
    """The most bytes a sidecar of ``meta``'s dataset can need, compressed or inflated: 64 bytes per
    sample of every camera (the arrays take 33 inflated), 64 KiB per possible video file (per-source
    columns and sample entries), plus 16 MiB. A published file over it is not downloaded."""
    cameras = max(1, len(getattr(meta, "video_keys", None) or ()))
    frames = int(getattr(meta, "total_frames", 0) or 0)
    files = int(getattr(meta, "total_episodes", 0) or 0) * cameras
    return (16 << 20) + 64 * frames * cameras + (64 << 10) * files


def _archive_problem(
    npz: Path, identity: SidecarIdentity, limit: int, require_fingerprints: bool = False
) -> str | None:
    """None when ``npz``'s members inflate to at most ``limit`` bytes in all (read from the ZIP
    directory, before anything is inflated) and its manifest describes ``identity``, else why not."""
    from lerobotstream.sidecar._archive import load_manifest

    with zipfile.ZipFile(npz) as zf:
        total = sum(i.file_size for i in zf.infolist())
    if total > limit:
        return f"its members inflate to {total} bytes, more than the {limit} a sidecar of this dataset can need"
    return check_identity(load_manifest(npz), identity, require_fingerprints=require_fingerprints)


def _cached_reason(target: Path, identity: SidecarIdentity, index_dir: Any, limit: int) -> str | None:
    """None when ``target`` is a usable cached sidecar (:func:`_archive_problem`, arrays readable,
    not rejected on first use), else why not."""
    from lerobotstream.mp4._index_file import Mp4Index
    from lerobotstream.sidecar._verify import rejected_reason

    if not target.is_file():
        return "absent"
    try:
        reason = _archive_problem(target, identity, limit)
    except _PUBLISHED_PROBLEMS as e:  # the cache is untrusted too
        return f"unreadable: {type(e).__name__}: {e}"
    if reason is not None:
        return reason
    try:  # converts the arrays once (CRC-checked): an intact manifest can hide damaged members
        index = Mp4Index.open(target, index_dir=index_dir)
    except SidecarSchemaError as e:
        return f"corrupt: {e}"
    index.close()
    rejected = rejected_reason(index.index_path)
    if rejected is not None:
        target.unlink(missing_ok=True)  # never used again (a published copy of it is refused too)
        return f"rejected when it was first used: {rejected}"
    return None


def _install_published(
    store: Any, path: str, where: str, identity: SidecarIdentity, target: Path, meta: Any, validate: dict
) -> str | None:
    """Download ``path`` of ``store`` and move it to ``target`` when it is a valid sidecar of
    ``identity`` and ``meta``; else why not (``target`` untouched)."""
    from lerobotstream.sidecar._archive import open_temporary
    from lerobotstream.sidecar._validate import validate_sidecar_file

    limit = published_size_limit(meta)
    try:
        size = int(store.size(path))
    except (SourceError, OSError, ValueError) as e:
        return str(e)
    if size > limit:
        return f"{size} bytes, more than the {limit} a sidecar of this dataset can need"
    try:
        tmp, f = open_temporary(target)  # flock-ed while open: no other writer removes it as stale
    except OSError as e:
        return f"cannot write beside {target} ({e.strerror or e})"
    try:
        try:
            for off in range(0, size, DOWNLOAD_CHUNK_BYTES):
                chunk = store.read(path, off, min(DOWNLOAD_CHUNK_BYTES, size - off))
                if len(chunk) != min(DOWNLOAD_CHUNK_BYTES, size - off):
                    raise SidecarSchemaError(f"{where}: short read at byte {off}", path=where)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            reason = _archive_problem(tmp, identity, limit, require_fingerprints=identity.repo_type == "bucket")
            if reason is None:
                validate_sidecar_file(tmp, meta, **validate)
        except _PUBLISHED_PROBLEMS as e:  # whatever a hostile file can make the readers raise
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            tmp.unlink(missing_ok=True)
            return reason
        os.replace(tmp, target)
    finally:
        f.close()
    return None


def ensure_sidecar(
    source: Any,
    meta: Any = None,
    *,
    repo_id: str,
    revision: str | None = None,
    repo_type: str = "dataset",
    episodes: Sequence[int] | None = None,
    lock_timeout_s: float = constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
    data_root: str | None = None,
    workers: int = 8,
    cache_dir: str | os.PathLike | None = None,
    index_dir: str | os.PathLike | None = None,
    use_published: bool = True,
    tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
    progress: bool = False,
) -> tuple[Path, str]:
    """``(npz_path, how)``, ``how`` in ``{"cache", "published", "built"}``: the schema-5 sidecar of
    the selected episodes at the sources' current state from (1) the revision-keyed local cache
    (no lock taken on a hit); (2) under the lock, the cache again, then a published sidecar
    (``sidecar._publish``) validated against the source identity and the metadata; (3) a local
    build, installed atomically.

    Args:
        source: ``ByteSource`` of the dataset root (a Hub dataset source is pinned to a commit).
        meta: ``DatasetMeta`` of the selection (default: loaded with ``episodes``, None = all).
        repo_id, repo_type, revision (default: the source's ``commit``), data_root (default: the
            source's root), workers, tolerance_s, progress: as :func:`build_sidecar`'s.
        lock_timeout_s: how long to wait for another process's build or download, seconds.
        cache_dir: cache folder (default ``constants.SIDECAR_DIR``, ``$HF_LEROBOT_HOME/streaming-sidecars``).
        index_dir: derived-index folder used to validate a published sidecar (default ``constants.INDEX_DIR``).
        use_published: look for a published sidecar before building.

    Raises:
        SidecarLockTimeoutError: another process held the lock longer than ``lock_timeout_s``.
        SidecarValidationError / Mp4Error / SourceChangedError: the local build failed (the
            previous cached file, if any, is untouched).
        SourceError / MetadataError: from reading the sources or the metadata.
    """
    from lerobotstream.sidecar._archive import remove_dead_temporaries
    from lerobotstream.sidecar._build import build_sidecar
    from lerobotstream.sidecar._publish import open_published
    from lerobotstream.sidecar._verify import forget_rejection, record_local_build

    if meta is None:
        from lerobotstream.meta import DatasetMeta

        meta = DatasetMeta.load(source, episodes=episodes, repo_id=repo_id)
    identity = sidecar_identity(source, meta, repo_id=repo_id, revision=revision, repo_type=repo_type)
    target = cache_path(identity, cache_dir)
    limit = published_size_limit(meta)  # a cache entry is untrusted too: no larger than a published one
    t_open = time.time_ns()
    if identity.stable:
        reason = _cached_reason(target, identity, index_dir, limit)
        if reason is None:
            logger.debug("MP4 sidecar from the cache: %s", target)
            return target, "cache"
        if reason != "absent":
            logger.warning("the cached MP4 sidecar %s is not usable (%s); replacing it", target, reason)
    else:
        unnamed = [p for p, _, fp in identity.files if fp is None][:3]
        logger.warning(
            "the sources at %s have no stable object identity (no fingerprint for %s...): the MP4 sidecar "
            "is rebuilt at every open",
            identity.data_root,
            ", ".join(unnamed),
        )
    what = f"MP4 sidecar of {repo_id} ({identity.data_root})"
    with _BuildLock(target, lock_timeout_s, what):
        remove_dead_temporaries(target)
        try:  # built or downloaded while we waited (unstable: only if rebuilt during this open)
            fresh = identity.stable or target.stat().st_mtime_ns >= t_open
        except FileNotFoundError:
            fresh = False
        if fresh and _cached_reason(target, identity, index_dir, limit) is None:
            return target, "cache"
        if use_published and identity.stable:  # a valid published sidecar, copied atomically (read only)
            try:
                found = open_published(source, identity)
            except SourceError as e:
                logger.info("no published MP4 sidecar for %s: %s", identity.data_root, e)
                found = None
            if found is not None:
                validate = {"tolerance_s": tolerance_s, "index_dir": index_dir, "lock_timeout_s": lock_timeout_s}
                reason = _install_published(*found, identity, target, meta, validate)
                if reason is None:
                    logger.info("using the published MP4 sidecar %s (copied to %s)", found[2], target)
                    return target, "published"
                logger.warning(
                    "ignoring the published MP4 sidecar %s: %s; building one locally instead", found[2], reason
                )
        t0 = time.perf_counter()
        logger.info(
            "building the MP4 sidecar of %s (%d video files) into %s; other processes wait for it "
            "(a shared cache or a published sidecar avoids this)",
            repo_id,
            len(identity.files),
            target,
        )
        build_sidecar(
            source,
            output=target,
            repo_id=repo_id,
            revision=identity.revision,
            repo_type=repo_type,
            data_root=data_root if data_root is not None else identity.data_root,
            episodes=identity.episodes,
            workers=workers,
            tolerance_s=tolerance_s,
            progress=progress,
            meta=meta,
        )
        forget_rejection(target, index_dir)  # a local build is trusted, even when identical to a rejected file
        record_local_build(target, identity.files, index_dir, lock_timeout_s)  # it parsed every MP4 itself
        logger.info("built the MP4 sidecar %s in %.1f s", target, time.perf_counter() - t0)
        return target, "built"
