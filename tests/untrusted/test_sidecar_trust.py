"""Untrusted input at the sidecar boundary: a cached or published sidecar whose sample positions or
display matrix were edited is caught by the first-use verification against each MP4's own moov
(the right frames are streamed, one warning says why, the next start builds locally)."""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from lerobotstream import constants
from lerobotstream.dataset._dataset import StreamingLeRobotDataset
from lerobotstream.mp4._index_file import Mp4Index
from lerobotstream.sidecar._archive import SidecarWriter, load_manifest
from lerobotstream.testing import read_identity

CAM = "observation.images.front"
LENGTHS = (8, 8)


@pytest.fixture(scope="module")
def root(make_generated_dataset):
    # both episodes in one file, each its own GOPs: exchanging their rows keeps every timestamp
    return Path(
        make_generated_dataset(
            episode_lengths=LENGTHS, codec="h264", gop=4, cameras=((CAM, 32, 24),), episodes_per_video_file=2
        )
    )


@pytest.fixture
def caches(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "SIDECAR_DIR", tmp_path / "sidecars")
    monkeypatch.setattr(constants, "INDEX_DIR", tmp_path / "indexes")
    return tmp_path


def _rewrite(npz: Path, edit) -> None:
    """Replace the sidecar ``npz`` by a copy whose tables went through ``edit(table) -> table``."""
    manifest = load_manifest(npz)
    idx = Mp4Index.open(npz, index_dir=npz.parent / "scratch-index")
    tmp = npz.with_name("edited.npz")
    with SidecarWriter(tmp, {k: v for k, v in manifest.items() if k != "sources"}) as w:
        for sid in range(idx.num_sources):
            t = idx.table(sid)
            t = dataclasses.replace(t, **{f: np.array(getattr(t, f)) for f in ("offset", "size", "is_sync")})
            info = idx.source_info(sid)
            w.add_source(sid, edit(t), path=idx.path(sid), size=info["size"], fingerprint=info["fingerprint"])
        w.commit()
    os.replace(tmp, npz)


def _frames(ds, errors: list | None = None) -> dict[tuple[int, int], tuple[int, int]]:
    """(episode, frame) of each item -> the (episode, frame) burned into its pixels (with
    ``errors``: a SidecarValidationError ends the stream and is appended there)."""
    from lerobotstream.errors import SidecarValidationError

    out = {}
    try:
        for item in ds:
            img = item[CAM].numpy()
            out[(int(item["episode_index"]), int(item["frame_index"]))] = read_identity(img)[:2]
    except SidecarValidationError as e:
        if errors is None:
            raise
        errors.append(e)
    return out


def _swap_episodes(t):
    n = LENGTHS[0]
    off, size = t.offset.copy(), t.size.copy()
    off[:n], off[n:] = t.offset[n:].copy(), t.offset[:n].copy()
    size[:n], size[n:] = t.size[n:].copy(), t.size[:n].copy()
    return dataclasses.replace(t, offset=off, size=size)


def _rotate_180(t):
    return dataclasses.replace(t, matrix=(-65536, 0, 0, 0, -65536, 0, 0, 0, 1 << 30))


@pytest.mark.parametrize("edit", [_swap_episodes, _rotate_180], ids=["gop_rows_exchanged", "matrix_180"])
def test_an_edited_cached_sidecar_is_caught_on_first_use(root, caches, caplog, edit):
    first = StreamingLeRobotDataset(root=root)
    assert first.sidecar_status == "built"
    npz = Path(first._sidecar_npz)
    _rewrite(npz, edit)
    ds = StreamingLeRobotDataset(root=root)
    assert ds.sidecar_status == "cache"  # the metadata checks at start cannot see the edit
    errors: list = []
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        got = _frames(ds, errors)
    assert got == {k: k for k in got}  # every frame served is its own
    if edit is _rotate_180:  # same sizes: the whole epoch is served from the MP4's own tables
        assert len(got) == sum(LENGTHS) and not errors
    else:  # an episode sized from the exchanged rows needs more bytes than it was given: refused, typed
        assert len(got) == sum(LENGTHS) or "sized from it" in str(errors[0])
    warnings = [r for r in caplog.records if "disagrees with" in r.getMessage()]
    assert len(warnings) == 1 and "own moov" in warnings[0].getMessage()
    # the next start drops it and builds locally; that one verifies and is recorded
    assert StreamingLeRobotDataset(root=root).sidecar_status == "built"


def test_verification_is_recorded_once_per_source(root, caches, monkeypatch):
    from lerobotstream.sidecar import _verify

    StreamingLeRobotDataset(root=root)  # build
    parses = []
    orig = _verify.VerifiedTables._parse
    monkeypatch.setattr(_verify.VerifiedTables, "_parse", lambda self, p: parses.append(p) or orig(self, p))
    assert len(_frames(StreamingLeRobotDataset(root=root))) == sum(LENGTHS)
    assert parses == []  # a local build parsed every MP4 itself and recorded them
    (record,) = (caches / "indexes").glob("*.verified")
    record.unlink()  # as for a published sidecar: verified on first use
    assert len(_frames(StreamingLeRobotDataset(root=root))) == sum(LENGTHS)
    assert len(parses) == 1  # one source, parsed once
    _frames(StreamingLeRobotDataset(root=root))
    assert len(parses) == 1  # recorded beside the derived index: not parsed again


# --- published sidecars: every problem falls back to a local build, nothing is inflated blindly ----
def _npy(array: np.ndarray | None = None, *, header: dict | None = None, data: bytes = b"") -> bytes:
    import io

    f = io.BytesIO()
    if array is not None:
        np.lib.format.write_array(f, array, allow_pickle=False)
    else:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)
    return f.getvalue()


def _edited_zip(src: Path, dst: Path, replace: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, replace.pop(info.filename, None) or zin.read(info.filename))
        for name, raw in replace.items():
            zout.writestr(name, raw)
    return dst


def _json_member(obj) -> bytes:
    import json

    return _npy(np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8))


@pytest.fixture(scope="module")
def published(root, tmp_path_factory):
    """(source, meta, identity, an honest sidecar of the dataset to edit)."""
    from lerobotstream.meta import DatasetMeta
    from lerobotstream.sidecar import build_sidecar
    from lerobotstream.sidecar._identity import sidecar_identity
    from lerobotstream.sources._local import LocalSource

    src = LocalSource(root)
    meta = DatasetMeta.load(src)
    identity = sidecar_identity(src, meta, repo_id="t/ds")
    out = tmp_path_factory.mktemp("published") / "honest.npz"
    build_sidecar(src, output=out, repo_id="t/ds", meta=meta, progress=False)
    return src, meta, identity, out


def _sources_json(npz: Path) -> dict:
    import json
    import zipfile

    with zipfile.ZipFile(npz) as zf:
        raw = np.lib.format.read_array(zf.open("sources.json.npy"))
    return json.loads(raw.tobytes())


def _bad_sidecars(honest: Path, tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (a hostile published sidecar, what the logged reason says)."""
    desc = _sources_json(honest)
    typed = dict(desc, columns=dict(desc["columns"], media_timescale={"kind": "json", "distinct": [[1, 2]]}))
    codes = _npy(np.zeros(desc["num_sources"], dtype=np.uint32))
    with np.load(honest) as z:
        n = z["b000000/offset"].shape[0]
    nan = np.full(n, np.nan)
    huge = np.full(n, 1 << 62, dtype=np.int64)
    cases = {
        "npy_declares_1e12_values": (
            {"b000000/offset.npy": _npy(header={"descr": "<i8", "fortran_order": False, "shape": (10**12,)})},
            "declares 1000000000000 values",
        ),
        "deflate_bomb_member": ({"junk.npy": bytes(20 << 20)}, "inflate to"),
        "manifest_bomb": ({"manifest.json.npy": _npy(np.zeros(65 << 20, dtype=np.uint8))}, "inflate to"),
        "wrongly_typed_json_column": (
            {"sources.json.npy": _json_member(typed), "src/media_timescale.npy": codes},
            "Error",
        ),
        "nan_offset": ({"b000000/offset.npy": _npy(nan)}, "not a 1-d"),
        "offset_2_62": ({"b000000/offset.npy": _npy(huge)}, "2**62"),
        "not_a_zip": (None, "BadZipFile"),
    }
    out = {}
    for name, (replace, why) in cases.items():
        dst = tmp / f"{name}.npz"
        if replace is None:
            dst.write_bytes(b"PK\x03\x04 not really a zip" * 100)
        else:
            _edited_zip(honest, dst, dict(replace))
        out[name] = (dst, why)
    return out


@pytest.fixture
def offer(monkeypatch):
    """``offer(store, path)``: the dataset's published sidecar is ``path`` in ``store``."""
    from lerobotstream.sidecar import _publish

    def set_(store, path):
        monkeypatch.setattr(_publish, "open_published", lambda source, identity: (store, path, f"pub:{path}"))

    return set_


CASES = (
    "npy_declares_1e12_values",
    "deflate_bomb_member",
    "manifest_bomb",
    "wrongly_typed_json_column",
    "nan_offset",
    "offset_2_62",
    "not_a_zip",
)


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_published_sidecar_falls_back_to_a_local_build(published, tmp_path, caplog, offer, case):
    from lerobotstream.sidecar import ensure_sidecar
    from lerobotstream.sources._local import LocalSource

    src, meta, _identity, honest = published
    bad, why = _bad_sidecars(honest, tmp_path)[case]
    offer(LocalSource(bad.parent), bad.name)
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        npz, how = ensure_sidecar(
            src, meta, repo_id="t/ds", cache_dir=tmp_path / "cache", index_dir=tmp_path / "idx", progress=False
        )
    assert how == "built"
    (line,) = [r.getMessage() for r in caplog.records if "ignoring the published MP4 sidecar" in r.getMessage()]
    assert why in line, line
    assert [p.name for p in npz.parent.iterdir() if p.suffix == ".npz"] == [npz.name]  # nothing else kept


def test_an_honest_published_sidecar_is_used(published, tmp_path, offer):
    from lerobotstream.sidecar import ensure_sidecar
    from lerobotstream.sources._local import LocalSource

    src, meta, _identity, honest = published
    offer(LocalSource(honest.parent), honest.name)
    kw = dict(repo_id="t/ds", cache_dir=tmp_path / "cache", index_dir=tmp_path / "idx", progress=False)
    assert ensure_sidecar(src, meta, **kw)[1] == "published"


def test_an_oversized_published_sidecar_is_not_downloaded(published, tmp_path, caplog, offer):
    from lerobotstream.sidecar import ensure_sidecar

    src, meta, _identity, _honest = published

    class Huge:
        def size(self, path):
            return 300 << 20

        def read(self, path, offset, n):
            raise AssertionError("downloaded")

    offer(Huge(), "huge.npz")
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        how = ensure_sidecar(src, meta, repo_id="t/ds", cache_dir=tmp_path / "c", index_dir=tmp_path / "i")[1]
    assert how == "built" and "a sidecar of this dataset can need" in caplog.text


def test_a_cached_deflate_bomb_is_replaced_by_a_local_build(published, tmp_path, caplog):
    from lerobotstream.sidecar import ensure_sidecar

    src, meta, _identity, honest = published
    kw = dict(repo_id="t/ds", cache_dir=tmp_path / "cache", index_dir=tmp_path / "idx", use_published=False)
    target, how = ensure_sidecar(src, meta, **kw)
    assert how == "built"
    _edited_zip(honest, tmp_path / "bomb.npz", {"junk.npy": bytes(20 << 20)})
    os.replace(tmp_path / "bomb.npz", target)
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        assert ensure_sidecar(src, meta, **kw)[1] == "built"
    assert "is not usable" in caplog.text and "inflate to" in caplog.text


def test_before_the_first_item_the_decode_verifies_and_fetches_again(root, caches, caplog, monkeypatch):
    # the prefetch frontier fetches unverified until the first item is served; the decode of each
    # fetched payload verifies its source first and fetches it again from the MP4's own table
    from lerobotstream.dataset import _reader

    first = StreamingLeRobotDataset(root=root)
    _rewrite(Path(first._sidecar_npz), _rotate_180)
    ds = StreamingLeRobotDataset(root=root)
    fetched_unverified, refetched = [], []
    orig_fetch_span = _reader.EpisodeSpans.fetch_span
    orig_checked = _reader.DatasetReader.checked_payload

    def fetch_span(self, ep, cam):
        fetched_unverified.append((ep, self.deferring))
        return orig_fetch_span(self, ep, cam)

    def checked_payload(self, ep, cam, payload):
        before = payload.payloads[cam]
        mini = orig_checked(self, ep, cam, payload)
        if mini is not before:
            refetched.append(ep)
        return mini

    monkeypatch.setattr(_reader.EpisodeSpans, "fetch_span", fetch_span)
    monkeypatch.setattr(_reader.DatasetReader, "checked_payload", checked_payload)
    with caplog.at_level(logging.WARNING, logger="lerobotstream.sidecar"):
        got = _frames(ds)
    assert got == {k: k for k in got} and len(got) == sum(LENGTHS)
    assert fetched_unverified and fetched_unverified[0][1]  # the first fetches did not verify
    first_ep = next(iter(got))[0]  # its fetch ended before the first item: always unverified
    # the first item's payload, fetched from the sidecar's table, was fetched again from the MP4's own;
    # which other episodes were fetched before the first item (and so again) depends on the threads
    assert first_ep in refetched
    assert set(refetched) <= {ep for ep, deferring in fetched_unverified if deferring}
    assert len([r for r in caplog.records if "disagrees with" in r.getMessage()]) == 1


def test_fetches_verify_once_the_first_item_is_served():
    # before: a fetch reads the unverified span and queues its source; after: the next fetch verifies
    # the queued sources and its own before reading
    from types import SimpleNamespace

    from lerobotstream.dataset._reader import EpisodeSpans

    class Index:
        def __init__(self):
            self.verified: list[str] = []

        def table_for_path(self, path):
            return "table"

        def verify(self, path):
            self.verified.append(path)

    index = Index()
    meta = SimpleNamespace(
        fps=10,
        episode=lambda ep: SimpleNamespace(
            length=1, videos={CAM: SimpleNamespace(path=f"v{ep}.mp4", from_timestamp=0.0)}
        ),
    )
    spans = EpisodeSpans(index, meta, [CAM], 1e-4)
    span = SimpleNamespace(synth_nbytes=10)
    spans._spans = {(ep, CAM): (span, "table", f"v{ep}.mp4", 0.0) for ep in range(3)}
    assert spans.deferring
    spans.fetch_span(0, CAM)
    spans.fetch_span(1, CAM)
    assert index.verified == []
    assert spans.checked_span(0, CAM, spans.span(0, CAM)) is None  # the decode verifies its own source
    assert index.verified == ["v0.mp4"]
    spans.serving()
    spans.fetch_span(2, CAM)
    assert sorted(index.verified) == ["v0.mp4", "v0.mp4", "v1.mp4", "v2.mp4"]  # queued ones, then its own


@pytest.mark.parametrize("member", ["manifest.json.npy", "sources.json.npy"])
def test_sidecar_inspect_on_json_nested_100000_deep_is_a_schema_error(published, tmp_path, capsys, member):
    """``python -m lerobotstream.sidecar inspect`` once printed ``error: RecursionError`` for such
    an archive (the dataset path already fell back to a local build)."""
    from lerobotstream.errors import SidecarSchemaError
    from lerobotstream.sidecar.__main__ import main as sidecar_main

    deep = _npy(np.frombuffer(("[" * 100_000 + "]" * 100_000).encode(), dtype=np.uint8))
    npz = _edited_zip(published[3], tmp_path / "deep.npz", {member: deep})
    name = member.removesuffix(".npy")
    with pytest.raises(
        SidecarSchemaError, match=rf"deep.npz: unreadable sidecar .*: {name} nests arrays/objects deeper"
    ):
        load_manifest(npz)
    assert sidecar_main(["inspect", str(npz)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: SidecarSchemaError: ") and "RecursionError" not in err, err
