"""The sidecar NPZ as the derived index reads it: member names, manifest, per-source table, generation.

``sidecar._archive`` writes the archive; this module holds what both sides must agree on (schema
version, member naming, per-source scalars) and the checked readers of an open archive.

Schema 5 has a number of members independent of the number of sources. The manifest holds only
dataset-level fields; ``sources.json`` describes per-source *columns* (``src/<key>.npy``: int64,
fixed-width UTF-8 bytes, or dictionary codes into the distinct JSON values kept in
``sources.json``); the sample arrays of many sources are concatenated into *blocks*
(``b000000/<field>.npy``), each source located by its ``src/_block`` and ``src/_block_start``
columns. Older schemas (never released) are refused with a message to rebuild.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import zipfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from lerobotstream.errors import SidecarSchemaError

#: 5: per-source columns and blocks of concatenated sample arrays (a fixed number of members)
SIDECAR_SCHEMA_VERSION = 5
#: schemas this reader opens (an older one is refused with a message to rebuild)
READABLE_SCHEMA_VERSIONS = (SIDECAR_SCHEMA_VERSION,)
MANIFEST_MEMBER = "manifest.json"
SOURCES_MEMBER = "sources.json"
#: canonical per-source arrays of the NPZ (int64, except ``is_sync`` uint8), decode order
CANONICAL_FIELDS = ("offset", "size", "dts_ticks", "cts_ticks", "is_sync")
#: per-source scalars of ``SampleTable`` kept per source (bytes fields go as ``<name>_b64``)
SCALAR_KEYS = (
    "media_timescale",
    "movie_timescale",
    "media_time",
    "empty_edit_movie_ticks",
    "edit_duration_movie_ticks",
    "codec",
    "width",
    "height",
    "track_id",
    "ctts_version",
    "display_width",
    "display_height",
    "media_duration",
    "has_edit",
    "video_track_ids",
    "moov_offset",
    "moov_size",
    "mdat_offset",
    "mdat_size",
    "faststart",
    "matrix",
    "movie_matrix",
)
#: scalars every record must hold (a missing display matrix would silently unrotate frames)
MATRIX_KEYS = ("matrix", "movie_matrix")
BYTES_KEYS = ("stsd", "ftyp")
#: the columns of a schema-5 source table (``_block``/``_block_start`` locate the arrays)
ENTRY_KEYS = ("path", "size", "fingerprint", "num_samples", *SCALAR_KEYS, *(k + "_b64" for k in BYTES_KEYS))
LAYOUT_KEYS = ("_block", "_block_start")
#: numpy dtype kinds a canonical array may have (integers; ``is_sync`` also bool)
_FIELD_KINDS = {f: "iu" for f in CANONICAL_FIELDS} | {"is_sync": "biu"}


def block_member(block: int, field: str) -> str:
    """NPZ member (without ``.npy``) holding ``field`` of every source of ``block``."""
    return f"b{block:06d}/{field}"


def column_member(key: str) -> str:
    """NPZ member (without ``.npy``) holding the per-source column ``key``."""
    return f"src/{key}"


def npz_generation(zf: zipfile.ZipFile) -> str:
    """Content digest of a sidecar NPZ from its ZIP central directory (names, CRC32s, sizes) and
    its manifest bytes: two different sidecars never share a generation, reading it is cheap."""
    h = hashlib.sha256()
    h.update(b"lerobotstream-sidecar-generation-v1\0")
    for info in sorted(zf.infolist(), key=lambda i: i.filename):
        h.update(f"{info.filename}\0{info.CRC}\0{info.file_size}\0".encode())
    with contextlib.suppress(KeyError):
        if zf.getinfo(MANIFEST_MEMBER + ".npy").file_size <= MAX_JSON_BYTES + 4096:
            h.update(zf.read(MANIFEST_MEMBER + ".npy"))
    return h.hexdigest()


#: a track of more samples than this is refused (about 39 hours at 30 fps in one file)
MAX_TRACK_SAMPLES = 1 << 22
#: a block of concatenated sample arrays never holds more (the writer closes one at 1 M samples)
MAX_BLOCK_SAMPLES = (1 << 20) + MAX_TRACK_SAMPLES
#: sources one sidecar may describe
MAX_SOURCES = 10_000_000
#: bytes of the manifest and of ``sources.json`` (UTF-8 JSON)
MAX_JSON_BYTES = 64 << 20
#: bytes of a fixed-width string column entry (a path or a fingerprint)
MAX_STR_BYTES = 4096


def read_npz_member(
    zf: zipfile.ZipFile, name: str, *, max_count: int | None = None, kinds: str = "biuS", path: str = ""
) -> np.ndarray:
    """Load one 1-d ``.npy`` member (no pickles), its header checked before any allocation: a dtype
    kind in ``kinds``, at most ``max_count`` values, header and values filling exactly the member's
    uncompressed ZIP size (so an over-declared member or a deflate bomb is refused uninflated).

    Raises:
        KeyError: no such member.
        SidecarSchemaError: the header breaks one of the rules above (names the member).
    """
    where = f"{path}: sidecar member {name}.npy"
    info = zf.getinfo(name + ".npy")
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _fortran, dtype = read_header(f, max_header_size=10000)
        except (ValueError, SyntaxError, TypeError) as e:
            raise SidecarSchemaError(f"{where} has no valid .npy header: {e}", path=path) from e
        count = int(shape[0]) if len(shape) == 1 else -1
        if count < 0 or dtype.hasobject or dtype.kind not in kinds:
            raise SidecarSchemaError(f"{where} is a {dtype} array of shape {shape}, not a 1-d {kinds} one", path=path)
        if max_count is not None and count > max_count:
            raise SidecarSchemaError(f"{where} declares {count} values, at most {max_count} are allowed", path=path)
        nbytes = count * dtype.itemsize
        if f.tell() + nbytes != info.file_size:
            raise SidecarSchemaError(
                f"{where} declares {count} values of {dtype.itemsize} bytes but the member holds "
                f"{info.file_size - f.tell()} bytes",
                path=path,
            )
        buf = bytearray(nbytes)
        if f.readinto(buf) != nbytes:
            raise SidecarSchemaError(f"{where} is truncated", path=path)
    return np.frombuffer(buf, dtype=dtype)


def _read_json(zf: zipfile.ZipFile, name: str, path: str = "") -> Any:
    raw = read_npz_member(zf, name, max_count=MAX_JSON_BYTES, kinds="u", path=path)
    try:
        return json.loads(raw.astype(np.uint8).tobytes().decode("utf-8"))
    except RecursionError:  # a hostile archive: its readers make it a SidecarSchemaError naming the file
        raise ValueError(f"{name} nests arrays/objects deeper than the JSON parser allows") from None


def read_manifest(zf: zipfile.ZipFile, path: str = "") -> dict[str, Any]:
    """The JSON manifest of an open NPZ: dataset-level fields only (see :func:`read_source_table`).

    Raises:
        SidecarSchemaError: no manifest, not JSON, or a schema version this reader does not open.
    """
    try:
        manifest = _read_json(zf, MANIFEST_MEMBER, path)
    except KeyError as e:
        raise SidecarSchemaError(f"{path}: not a lerobotstream sidecar (no {MANIFEST_MEMBER})", path=path) from e
    except (ValueError, UnicodeDecodeError) as e:
        raise SidecarSchemaError(f"{path}: unreadable sidecar manifest: {e}", path=path) from e
    if not isinstance(manifest, dict) or manifest.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        got = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise SidecarSchemaError(
            f"{path}: unsupported MP4 sidecar schema {got!r} (this reader opens "
            f"{' and '.join(map(str, READABLE_SCHEMA_VERSIONS))}); rebuild it with "
            "`python -m lerobotstream.sidecar build`",
            path=path,
        )
    return manifest


class SourceTable(Sequence):
    """The per-source entries of a sidecar (path, size, fingerprint, num_samples, the track scalars
    of ``SampleTable``, ``stsd_b64``/``ftyp_b64``), by source id.

    Columnar (int64 arrays, fixed-width UTF-8 paths/fingerprints, dictionary codes for the rest):
    no Python object per source. ``table[i]`` builds source ``i``'s dict; :meth:`find` and
    :meth:`get` build none.
    """

    def __init__(self, num_sources: int, columns: dict[str, tuple[str, Any, Any]]) -> None:
        self._n = int(num_sources)
        self._columns = columns  # key -> (kind, array, distinct values | null mask)
        self._by_path: dict[str, int] | None = None
        self._paths_sorted: bool | None = None

    def __len__(self) -> int:
        return self._n

    def get(self, i: int, key: str, default: Any = None) -> Any:
        """Value of ``key`` for source ``i`` (``default`` when the source has none)."""
        col = self._columns.get(key)
        if col is None:
            return default
        kind, arr, extra = col
        if kind == "int":
            return arr.item(i)
        if kind == "str":
            if extra is not None and extra.item(i):
                return None
            return arr.item(i).decode("utf-8")
        return extra[arr.item(i)]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"source {i} outside [0, {self._n})")
        return {k: self.get(i, k) for k in self._columns if k not in LAYOUT_KEYS}

    def find(self, path: str) -> int | None:
        """Source id of ``path``, or None. Binary search when the paths are sorted."""
        col = self._columns.get("path")
        if col is not None and col[0] == "str" and self._sorted_paths():
            arr = col[1]
            key = path.encode("utf-8")
            i = int(np.searchsorted(arr, key))
            return i if i < self._n and bytes(arr[i]) == key else None
        if self._by_path is None:
            self._by_path = {self.get(i, "path"): i for i in range(self._n)}
        return self._by_path.get(path)

    def _sorted_paths(self) -> bool:
        if self._paths_sorted is None:
            arr = self._columns["path"][1]
            self._paths_sorted = bool(arr.shape[0] < 2 or np.all(arr[:-1] < arr[1:]))
        return self._paths_sorted

    def column(self, key: str) -> np.ndarray | None:
        """An integer column as an int64 array (None when the column is not all-integer)."""
        col = self._columns.get(key)
        return col[1] if col is not None and col[0] == "int" else None


def read_source_table(zf: zipfile.ZipFile, manifest: dict[str, Any], path: str = "") -> SourceTable:
    """The per-source table of an open NPZ whose manifest is ``manifest``.

    Raises:
        SidecarSchemaError: the table is missing or inconsistent (names the column).
    """
    try:
        desc = _read_json(zf, SOURCES_MEMBER, path)
        n = int(desc["num_sources"])
        if not 0 <= n <= MAX_SOURCES:
            raise SidecarSchemaError(f"{path}: sidecar declares {n} sources (at most {MAX_SOURCES})", path=path)
        columns: dict[str, tuple[str, Any, Any]] = {}
        for key, spec in desc["columns"].items():
            kind = spec["kind"]
            arr = read_npz_member(zf, column_member(key), max_count=n, kinds="iuS", path=path)
            if arr.dtype.itemsize > MAX_STR_BYTES:
                raise SidecarSchemaError(f"{path}: sidecar column {key} holds {arr.dtype} values", path=path)
            if arr.ndim != 1 or arr.shape[0] != n:
                raise SidecarSchemaError(
                    f"{path}: sidecar column {key} has shape {arr.shape}, expected ({n},)", path=path
                )
            if kind == "int":
                columns[key] = (kind, arr.astype(np.int64, copy=False), None)
            elif kind == "str":
                null = (
                    read_npz_member(zf, column_member(key) + ".null", max_count=n, kinds="bu", path=path).astype(bool)
                    if spec.get("nullable")
                    else None
                )
                if null is not None and null.shape != (n,):
                    raise SidecarSchemaError(f"{path}: sidecar column {key} has a null mask of {null.shape}", path=path)
                columns[key] = (kind, arr, null)
            elif kind == "json":
                distinct = spec["distinct"]
                if not isinstance(distinct, list) or arr.dtype.kind not in "iu":
                    raise SidecarSchemaError(f"{path}: sidecar column {key} is not a coded column", path=path)
                if n and (int(arr.min()) < 0 or int(arr.max()) >= len(distinct)):
                    raise SidecarSchemaError(f"{path}: sidecar column {key} has codes outside its values", path=path)
                columns[key] = (kind, arr, distinct)
            else:
                raise SidecarSchemaError(f"{path}: sidecar column {key} has unknown kind {kind!r}", path=path)
    except KeyError as e:
        raise SidecarSchemaError(f"{path}: sidecar source table lacks {e}", path=path) from e
    except (ValueError, TypeError, UnicodeDecodeError) as e:
        raise SidecarSchemaError(f"{path}: unreadable sidecar source table: {e}", path=path) from e
    for key in ("path", "num_samples", *LAYOUT_KEYS):
        if key not in columns:
            raise SidecarSchemaError(f"{path}: sidecar source table has no {key} column", path=path)
    for key in ("num_samples", *LAYOUT_KEYS):
        if columns[key][0] != "int":
            raise SidecarSchemaError(f"{path}: sidecar column {key} is not an integer column", path=path)
    counts = columns["num_samples"][1]
    if n and (int(counts.min()) < 0 or int(counts.max()) > MAX_TRACK_SAMPLES):
        raise SidecarSchemaError(
            f"{path}: a sidecar source declares {int(counts.max())} samples (at most {MAX_TRACK_SAMPLES})", path=path
        )
    return SourceTable(n, columns=columns)


def iter_source_blocks(
    zf: zipfile.ZipFile, manifest: dict[str, Any], table: SourceTable, path: str = ""
) -> Iterator[tuple[list[int], np.ndarray, dict[str, np.ndarray]]]:
    """Yield ``(source_ids, counts, {field: array})`` per stored block, in storage order: the
    canonical arrays of the block's sources concatenated in ``source_ids`` order, one block at a time.

    Raises:
        SidecarSchemaError: a member is missing, or a source's arrays do not fit its block.
        zlib.error, zipfile.BadZipFile: damaged members (callers map them to a rebuild message).
    """
    n = len(table)
    blocks, starts, counts = (table.column(k) for k in ("_block", "_block_start", "num_samples"))
    order = np.lexsort((starts, blocks))
    i = 0
    while i < n:
        b = int(blocks[order[i]])
        j = i
        while j < n and int(blocks[order[j]]) == b:
            j += 1
        sids = order[i:j]
        extent = int((starts[sids] + counts[sids]).max())
        arrays = {}
        for f in CANONICAL_FIELDS:
            try:
                arrays[f] = read_npz_member(
                    zf, block_member(b, f), max_count=min(extent, MAX_BLOCK_SAMPLES), kinds=_FIELD_KINDS[f], path=path
                )
            except KeyError as e:
                raise SidecarSchemaError(f"{path}: sidecar block {b} has no array {f!r}", path=path) from e
        size = int(arrays["offset"].shape[0])
        for f, a in arrays.items():
            if a.ndim != 1 or a.shape[0] != size:
                raise SidecarSchemaError(f"{path}: sidecar block {b} array {f} has shape {a.shape}", path=path)
        a0, c = starts[sids], counts[sids]
        for k in sids[(a0 < 0) | (c < 0) | (a0 + c > size)][:1]:
            raise SidecarSchemaError(
                f"{path}: source {int(k)} ({table.get(int(k), 'path')}) lies outside sidecar block {b}", path=path
            )
        if not (a0[0] == 0 and np.array_equal(a0[1:], (a0 + c)[:-1]) and int(a0[-1] + c[-1]) == size):
            take = np.concatenate([np.arange(x, x + y) for x, y in zip(a0.tolist(), c.tolist())])
            arrays = {f: a[take] for f, a in arrays.items()}  # not one contiguous run: gather
        yield sids.tolist(), c, arrays
        i = j


def iter_source_arrays(
    zf: zipfile.ZipFile, manifest: dict[str, Any], table: SourceTable, path: str = ""
) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Yield ``(source_id, {field: array})`` of the ``CANONICAL_FIELDS`` for every source, in
    storage order; raises as :func:`iter_source_blocks`."""
    for sids, counts, arrays in iter_source_blocks(zf, manifest, table, path):
        pos = 0
        for sid, c in zip(sids, counts.tolist()):
            yield sid, {f: a[pos : pos + c] for f, a in arrays.items()}
            pos += c
