"""The schema-4 sidecar NPZ as the derived index reads it: member names, manifest keys, generation.

The sidecar package writes the archive (``sidecar._archive``: layout and manifest fields); this
module holds what both sides must agree on (schema version, member naming, the per-source scalars
of the manifest) and the readers of an open archive (one ``.npy`` member, the validated manifest,
the content digest that names the derived index file).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from typing import Any

import numpy as np

from lerobotstream.errors import SidecarSchemaError

__all__ = ["BYTES_KEYS", "CANONICAL_FIELDS", "MANIFEST_MEMBER", "MATRIX_KEYS", "SCALAR_KEYS",
           "SIDECAR_SCHEMA_VERSION", "member_name", "npz_generation", "read_manifest", "read_npz_member"]

#: 4: per-source ``matrix``/``movie_matrix`` (tkhd/mvhd display matrices; a schema-3 sidecar lacks
#: them and would decode rotated videos unrotated, so it is rebuilt under its new name)
SIDECAR_SCHEMA_VERSION = 4
MANIFEST_MEMBER = "manifest.json"
#: canonical per-source arrays of the NPZ (int64, except ``is_sync`` uint8), decode order
CANONICAL_FIELDS = ("offset", "size", "dts_ticks", "cts_ticks", "is_sync")


def member_name(source_id: int, field: str) -> str:
    """NPZ member (without ``.npy``) holding ``field`` of source ``source_id``."""
    return f"s{source_id:06d}/{field}"


def npz_generation(zf: zipfile.ZipFile) -> str:
    """Content digest of a sidecar NPZ from its ZIP central directory (names, CRC32s, sizes) and
    its manifest bytes: two different sidecars never share a generation, reading it is cheap."""
    h = hashlib.sha256()
    h.update(b"lerobotstream-sidecar-generation-v1\0")
    for info in sorted(zf.infolist(), key=lambda i: i.filename):
        h.update(f"{info.filename}\0{info.CRC}\0{info.file_size}\0".encode())
    try:
        h.update(zf.read(MANIFEST_MEMBER + ".npy"))
    except KeyError:
        pass
    return h.hexdigest()


def read_npz_member(zf: zipfile.ZipFile, name: str) -> np.ndarray:
    """Load one ``.npy`` member of the NPZ (no pickles)."""
    with zf.open(name + ".npy") as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def read_manifest(zf: zipfile.ZipFile, path: str = "") -> dict[str, Any]:
    """The schema-4 JSON manifest of an open NPZ.

    Raises:
        SidecarSchemaError: no manifest, not JSON, or a schema version other than 4.
    """
    try:
        raw = read_npz_member(zf, MANIFEST_MEMBER)
        manifest = json.loads(raw.astype(np.uint8).tobytes().decode("utf-8"))
    except KeyError as e:
        raise SidecarSchemaError(f"{path}: not a lerobotstream sidecar (no {MANIFEST_MEMBER})", path=path) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise SidecarSchemaError(f"{path}: unreadable sidecar manifest: {e}", path=path) from e
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SIDECAR_SCHEMA_VERSION:
        got = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise SidecarSchemaError(
            f"{path}: unsupported MP4 sidecar schema {got!r} (this reader needs {SIDECAR_SCHEMA_VERSION}); "
            "rebuild it with `python -m lerobotstream.sidecar build`", path=path)
    if not isinstance(manifest.get("sources"), list):
        raise SidecarSchemaError(f"{path}: sidecar manifest has no 'sources' list", path=path)
    return manifest


#: per-source scalars of ``SampleTable`` kept in the manifest (bytes fields go as ``<name>_b64``)
SCALAR_KEYS = ("media_timescale", "movie_timescale", "media_time", "empty_edit_movie_ticks",
               "edit_duration_movie_ticks", "codec", "width", "height", "track_id", "ctts_version",
               "display_width", "display_height", "media_duration", "has_edit", "video_track_ids",
               "moov_offset", "moov_size", "mdat_offset", "mdat_size", "faststart", "matrix", "movie_matrix")
#: scalars every schema-4 record must hold (a missing display matrix would silently unrotate frames)
MATRIX_KEYS = ("matrix", "movie_matrix")
BYTES_KEYS = ("stsd", "ftyp")
