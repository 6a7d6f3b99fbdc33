"""MP4 index sidecars: the schema-5 NPZ, its derived memory-mapped index, validation, lifecycle.

The dataset's whole use of this package is two calls::

    npz, how = ensure_sidecar(source, meta, repo_id=repo_id, revision=commit, repo_type=repo_type,
                              lock_timeout_s=sidecar_lock_timeout_s)   # how: "cache"|"published"|"built"
    index = open_sidecar(npz, meta, source=source)                      # Mp4Index, validated

- :func:`ensure_sidecar` (``_lifecycle``): revision-keyed cache → a valid published sidecar → a
  locked local build, installed atomically. Never uploads.
- :func:`build_sidecar` (``_build``) parses a dataset's MP4s into a schema-5 NPZ (``_archive``).
- :func:`push_sidecar` (``_publish``): maintainers only, explicit; validates then publishes.
- :class:`VerifiedTables` (``_verify``): each MP4's tables checked against its own ``moov`` before
  its first frame is served.
- CLI: ``python -m lerobotstream.sidecar build|inspect`` (``lerobotstream-build-mp4-sidecar``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from lerobotstream import constants
from lerobotstream.errors import SidecarSchemaError, SidecarStaleError
from lerobotstream.mp4._index_file import Mp4Index, write_note
from lerobotstream.sidecar._build import BuildReport, build_sidecar
from lerobotstream.sidecar._lifecycle import ensure_sidecar
from lerobotstream.sidecar._publish import push_sidecar
from lerobotstream.sidecar._validate import validate_index, validation_note

logger = logging.getLogger("lerobotstream.sidecar")

__all__ = ["BuildReport", "build_sidecar", "ensure_sidecar", "open_sidecar", "push_sidecar"]


def check_sources(index: Mp4Index, source: Any, paths: list[str] | None = None) -> None:
    """Check that the sidecar still describes the sources: size and fingerprint of each path.

    Args:
        index: the opened index.
        source: ``ByteSource`` of the dataset root.
        paths: the source paths to check (default: all of the sidecar's).

    Raises:
        SidecarStaleError: a size or fingerprint differs (names the file).
    """
    for path in paths if paths is not None else index.paths:
        info = index.source_info(index.source_id(path))
        size = int(source.size(path))
        if info.get("size") is not None and int(info["size"]) != size:
            raise SidecarStaleError(
                f"{path}: the sidecar says {info['size']} bytes, the source has {size}; rebuild the sidecar", path=path
            )
        want = info.get("fingerprint")
        if want is not None:
            got = source.fingerprint(path)
            if got is not None and got != want:
                raise SidecarStaleError(
                    f"{path}: content fingerprint changed ({want} -> {got}); rebuild the sidecar", path=path
                )


def open_sidecar(
    npz_path: str | os.PathLike,
    meta: Any = None,
    *,
    source: Any = None,
    tolerance_s: float = constants.DEFAULT_TOLERANCE_S,
    index_dir: str | os.PathLike | None = None,
    lock_timeout_s: float = constants.DEFAULT_SIDECAR_LOCK_TIMEOUT_S,
) -> Mp4Index:
    """Open a sidecar through its derived index and validate it. A successful validation is
    recorded beside the derived index (``_validate.validation_note``): other processes of the node
    opening the same selection at the same source state skip the checks (about 1 ms per source).

    Args:
        npz_path: the sidecar (schema 5).
        meta: ``DatasetMeta`` of the selection; when given, every selected (episode, camera)
            window is validated (only the sources it uses are read, one at a time).
        source: ``ByteSource``; when given, the used sources' sizes and fingerprints are checked.
        tolerance_s: allowed timestamp error, seconds.
        index_dir: derived-index folder (default ``$HF_LEROBOT_HOME/streaming-indexes``).
        lock_timeout_s: wait for another process converting the same sidecar, seconds.

    Raises:
        SidecarSchemaError, SidecarStaleError, SidecarValidationError, SidecarLockTimeoutError.
    """
    index = Mp4Index.open(npz_path, index_dir=index_dir, lock_timeout_s=lock_timeout_s)
    used = sorted(set(meta.video_paths())) if meta is not None and source is not None else None
    note = validation_note(index, meta, source, used, tolerance_s)
    if note is not None and note.is_file():  # this node validated exactly these inputs already
        return index
    if source is not None:
        check_sources(index, source, used)
    if meta is not None:
        try:
            validate_index(index, meta, tolerance_s=tolerance_s)
        except SidecarSchemaError as e:
            if e.path != str(index.index_path):
                raise
            # the derived index (cache content) is damaged, not the sidecar: convert it again, once
            logger.warning("%s; converting the derived index again from %s", e, npz_path)
            index.close()
            Path(index.index_path).unlink(missing_ok=True)
            index = Mp4Index.open(npz_path, index_dir=index_dir, lock_timeout_s=lock_timeout_s)
            validate_index(index, meta, tolerance_s=tolerance_s)
    if note is not None:  # best effort: a read-only index folder only costs validating again
        write_note(note, {"validated_at": time.time()})
    return index
