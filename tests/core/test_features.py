"""LeRobot 0.6 cameras and columns on generated datasets (no LeRobot needed): depth video (HEVC
``gray12le``, LeRobot's quantiser), ``image`` features (PNG in the Parquet rows), 16-bit depth
images, language columns; ``camera_keys`` over video and image keys; typed refusals.

Oracles are the generator's known values: the 12-bit codes it encoded losslessly (dequantised
here with LeRobot 0.6.1's formula written out independently of the library), the PNG pixels, the
depth millimetres and the language rows. Against LeRobot 0.6.1 itself: tests_lerobot/.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lerobotstream import StreamingLeRobotDataset
from lerobotstream.dataset._collate import lerobot_collate_fn
from lerobotstream.dataset._images import decode_image
from lerobotstream.decode._depth import DepthDecoder, DepthDequantizer, dequantize_reference
from lerobotstream.errors import DecodeError, MetadataError, StreamingConfigError
from lerobotstream.meta import DatasetMeta
from lerobotstream.testing import (
    depth_frame_mm,
    expected_depth_codes,
    expected_language,
    image_frame,
    read_identity,
)

pytest.importorskip("av")
pytest.importorskip("PIL")

RGB = ("observation.images.front", 64, 48)
DEPTH = ("observation.images.depth", 64, 48)
WRIST = ("observation.images.wrist", 40, 30)
DIMG = ("observation.images.depth_img", 32, 24)
FPS = 10
KW = dict(
    episode_lengths=(12, 9, 15),
    fps=FPS,
    cameras=(RGB,),
    depth_cameras=(DEPTH,),
    image_cameras=(WRIST,),
    depth_image_cameras=(DIMG,),
    language=True,
    episodes_per_video_file=2,
    episodes_per_data_file=2,
)
CAM_INDEX = {RGB[0]: 0, DEPTH[0]: 1, WRIST[0]: 2, DIMG[0]: 3}
LENGTHS = KW["episode_lengths"]


@pytest.fixture(scope="module")
def root(make_generated_dataset) -> Path:
    return Path(make_generated_dataset(**KW))


def lerobot_dequantize(
    codes: np.ndarray, unit: str, depth_min=0.01, depth_max=10.0, shift=3.5, use_log=True
) -> torch.Tensor:
    """LeRobot 0.6.1 ``dequantize_depth`` (torch path) on a (T, 1, H, W) uint16 array, written out."""
    log_min, log_max = math.log(depth_min + shift), math.log(depth_max + shift)
    scale, offset = ((log_max - log_min) / 4095, log_min) if use_log else ((depth_max - depth_min) / 4095, depth_min)
    buf = torch.from_numpy(codes.astype(np.int32)).squeeze(-3).to(torch.float32)
    buf.mul_(scale).add_(offset)
    if use_log:
        buf.exp_().sub_(shift)
    buf.clamp_(depth_min, depth_max).unsqueeze_(-3)
    return buf if unit == "m" else buf.mul_(1000.0).round_().clamp_(0.0, 65535)


def _items(root: Path, **kw) -> dict[int, dict]:
    ds = StreamingLeRobotDataset(root=root, **kw)
    return {int(it["index"]): it for it in ds}


def _where(item) -> tuple[int, int]:
    return int(item["episode_index"]), int(item["frame_index"])


def _window(f: int, n: int, deltas: list[int]) -> tuple[list[int], list[bool]]:
    raw = [f + d for d in deltas]
    return [min(max(r, 0), n - 1) for r in raw], [r < 0 or r >= n for r in raw]


# --- metadata ---------------------------------------------------------------------------------------
def test_meta_exposes_lerobot_061_names(root):
    meta = DatasetMeta.load(root)
    assert meta.video_keys == [RGB[0], DEPTH[0]]
    assert meta.image_keys == [WRIST[0], DIMG[0]]
    assert meta.camera_keys == [RGB[0], DEPTH[0], WRIST[0], DIMG[0]]
    assert meta.depth_keys == [DEPTH[0], DIMG[0]]
    assert meta.has_language_columns
    assert [t["function"]["name"] for t in meta.tools] == ["say"]
    q = meta.depth_quantizer(DEPTH[0])
    assert (q.depth_min, q.depth_max, q.shift, q.use_log) == (0.01, 10.0, 3.5, True)
    with pytest.raises(MetadataError, match="not a depth video"):
        meta.depth_quantizer(RGB[0])


def test_depth_stats_rescaled_like_lerobot(root):
    raw = json.loads((root / "meta" / "stats.json").read_text())
    mm = StreamingLeRobotDataset(root=root)
    m = StreamingLeRobotDataset(root=root, depth_output_unit="m")
    for key in (DEPTH[0], DIMG[0]):
        assert mm.meta.stats[key] == raw[key]  # recorded in mm: nothing to do
        for stat, value in raw[key].items():
            want = value if stat == "count" else (np.asarray(value, np.float64) * (1.0 / 1000.0)).tolist()
            assert m.meta.stats[key][stat] == want
    assert m.meta.stats[WRIST[0]] == raw[WRIST[0]]


# --- depth video --------------------------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_video_items_exact(root, unit):
    deltas = [-2, -1, 0, 1]
    items = _items(
        root, depth_output_unit=unit, delta_timestamps={DEPTH[0]: [d / FPS for d in deltas]}, camera_keys=[DEPTH[0]]
    )
    assert len(items) == sum(LENGTHS)
    h, w = DEPTH[2], DEPTH[1]
    for it in items.values():
        ep, f = _where(it)
        idx, pad = _window(f, LENGTHS[ep], deltas)
        codes = np.stack([expected_depth_codes(ep, i, CAM_INDEX[DEPTH[0]], h, w) for i in idx])[:, None]
        want = lerobot_dequantize(codes, unit)
        got = it[DEPTH[0]]
        assert got.dtype == torch.float32 and got.shape == (4, 1, h, w) and got.is_contiguous()
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (ep, f)  # bitwise
        assert it[f"{DEPTH[0]}_is_pad"].tolist() == pad
        assert RGB[0] not in it and WRIST[0] not in it


def test_depth_video_single_frame_and_one_frame_window(root):
    plain = _items(root, camera_keys=[DEPTH[0]])
    one = _items(root, camera_keys=[DEPTH[0]], delta_timestamps={DEPTH[0]: [0.0]})
    h, w = DEPTH[2], DEPTH[1]
    for k, it in plain.items():
        ep, f = _where(it)
        want = lerobot_dequantize(expected_depth_codes(ep, f, CAM_INDEX[DEPTH[0]], h, w)[None, None], "mm")[0]
        assert it[DEPTH[0]].shape == (1, h, w) and torch.equal(it[DEPTH[0]], want)
        assert one[k][DEPTH[0]].shape == (1, h, w) and torch.equal(one[k][DEPTH[0]], want)  # map-style squeezes T=1


def test_depth_with_rgb_and_uint8_and_transforms(root):
    """return_uint8 keeps depth float32 (mm); image transforms never touch depth keys."""
    seen = []

    def tfm(x):
        seen.append(tuple(x.shape))
        return x

    items = _items(root, return_uint8=True, image_transforms=tfm, camera_keys=[RGB[0], DEPTH[0], DIMG[0]])
    it = items[5]
    assert it[RGB[0]].dtype == torch.uint8 and read_identity(it[RGB[0]]) == (0, 5, 0)
    assert it[DEPTH[0]].dtype == torch.float32 and it[DIMG[0]].dtype == torch.float32
    assert set(seen) == {(3, RGB[2], RGB[1])}  # only the RGB camera, once per item
    assert len(seen) == len(items)


def test_depth_video_with_dataloader_workers(root):
    ds = StreamingLeRobotDataset(root=root, camera_keys=[DEPTH[0]], max_num_shards=2, depth_output_unit="m")
    got = {}
    for batch in torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lerobot_collate_fn):
        for j, i in enumerate(batch["index"].tolist()):
            got[i] = batch[DEPTH[0]][j]
    ref = _items(root, camera_keys=[DEPTH[0]], depth_output_unit="m")
    assert sorted(got) == sorted(ref)
    assert all(torch.equal(got[i], ref[i][DEPTH[0]]) for i in ref)


# --- image features ----------------------------------------------------------------------------------
@pytest.mark.parametrize("return_uint8", [False, True])
def test_image_feature_items_pixel_exact(root, return_uint8):
    deltas = [-1, 0]
    items = _items(
        root, return_uint8=return_uint8, camera_keys=[WRIST[0]], delta_timestamps={WRIST[0]: [d / FPS for d in deltas]}
    )
    h, w = WRIST[2], WRIST[1]
    for it in items.values():
        ep, f = _where(it)
        idx, pad = _window(f, LENGTHS[ep], deltas)
        want = (
            torch.stack([torch.from_numpy(image_frame(ep, i, CAM_INDEX[WRIST[0]], h, w)).permute(2, 0, 1) for i in idx])
            .to(torch.float32)
            .div(255)
        )
        got = it[WRIST[0]]
        assert got.dtype == torch.float32 and got.shape == (2, 3, h, w)  # map-style: float32 whatever return_uint8
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
        assert it[f"{WRIST[0]}_is_pad"].tolist() == pad
        assert read_identity(got[1]) == (ep, f, CAM_INDEX[WRIST[0]])
        assert RGB[0] not in it and DEPTH[0] not in it and DIMG[0] not in it


def test_image_feature_plain_and_one_frame_window(root):
    plain = _items(root, camera_keys=[WRIST[0]])
    one = _items(root, camera_keys=[WRIST[0]], delta_timestamps={WRIST[0]: [0.0]})
    h, w = WRIST[2], WRIST[1]
    for k, it in plain.items():
        ep, f = _where(it)
        want = torch.from_numpy(image_frame(ep, f, CAM_INDEX[WRIST[0]], h, w)).permute(2, 0, 1).float() / 255
        assert it[WRIST[0]].shape == (3, h, w) and torch.equal(it[WRIST[0]], want)
        assert one[k][WRIST[0]].shape == (1, 3, h, w) and torch.equal(one[k][WRIST[0]][0], want)  # stacked rows


def test_image_transforms_apply_to_image_features(root):
    items = _items(root, camera_keys=[WRIST[0]], image_transforms=lambda x: x * 0 + 0.5)
    assert all(torch.all(it[WRIST[0]] == 0.5) for it in items.values())


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_image_feature(root, unit):
    items = _items(root, camera_keys=[DIMG[0]], depth_output_unit=unit)
    h, w = DIMG[2], DIMG[1]
    for it in items.values():
        ep, f = _where(it)
        mm = torch.from_numpy(depth_frame_mm(ep, f, CAM_INDEX[DIMG[0]], h, w).astype(np.float32))[None]
        want = mm if unit == "mm" else mm / 1000.0
        assert it[DIMG[0]].dtype == torch.float32 and it[DIMG[0]].shape == (1, h, w)
        assert torch.equal(it[DIMG[0]], want)


def test_unselected_image_column_is_not_read(root):
    ds = StreamingLeRobotDataset(root=root, camera_keys=[RGB[0]])
    it = next(iter(ds))
    assert WRIST[0] not in it and DIMG[0] not in it and DEPTH[0] not in it
    w = ds._reader
    assert w is not None and WRIST[0] not in w.parquet.columns and DIMG[0] not in w.parquet.columns


def test_jpeg_image_feature_matches_pillow(make_generated_dataset):
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    root = Path(
        make_generated_dataset(episode_lengths=(4,), fps=FPS, cameras=(), image_cameras=(WRIST,), image_format="jpeg")
    )
    items = _items(root)
    table = pq.read_table(root / "data" / "chunk-000" / "file-000.parquet")
    cells = table.column(WRIST[0]).to_pylist()
    for it in items.values():
        ep, f = _where(it)
        rgb = np.array(Image.open(io.BytesIO(cells[f]["bytes"])))
        want = torch.from_numpy(rgb).permute(2, 0, 1).float() / 255
        assert torch.equal(it[WRIST[0]], want)
        assert read_identity(it[WRIST[0]]) == (ep, f, 0)


def test_decode_image_modes():
    import io

    from PIL import Image

    def png(arr, mode=None):
        buf = io.BytesIO()
        (Image.fromarray(arr) if mode is None else Image.fromarray(arr).convert(mode)).save(buf, format="PNG")
        return buf.getvalue()

    g = (np.arange(12 * 10).reshape(12, 10) % 256).astype(np.uint8)
    assert torch.equal(decode_image(png(g)), torch.from_numpy(g)[None])  # L: (1, H, W) uint8 (float later)
    rgba = np.dstack([g, g[::-1], 255 - g, np.full_like(g, 200)])
    assert torch.equal(decode_image(png(rgba)), torch.from_numpy(rgba).permute(2, 0, 1))
    d16 = (np.arange(12 * 10).reshape(12, 10) * 500).astype(np.uint16)
    out = decode_image(png(d16))
    assert (
        out.dtype == torch.float32
        and out.shape == (1, 12, 10)
        and torch.equal(out[0], torch.from_numpy(d16.astype(np.float32)))
    )
    bw = decode_image(png(g > 100, None))
    assert torch.equal(bw, torch.from_numpy((g > 100).astype(np.uint8) * 255)[None])
    with pytest.raises(Exception, match="no embedded image bytes"):
        decode_image(None, key="k", episode_index=1, frame_index=2, path="data/x.parquet")
    with pytest.raises(Exception, match="Pillow cannot decode"):
        decode_image(b"not an image", key="k", episode_index=1, frame_index=2, path="data/x.parquet")


# --- language columns ----------------------------------------------------------------------------------
def test_language_columns_as_map_style(root):
    items = _items(root, camera_keys=[])
    for it in items.values():
        ep, f = _where(it)
        want = expected_language(ep, f, FPS)
        assert it["language_persistent"] == want["language_persistent"]
        assert it["language_events"] == want["language_events"]
        assert it["language_persistent"][1]["timestamp"] == float(np.float32(0.1))  # float32, as HF casts it
    batch = lerobot_collate_fn([items[0], None, items[1]])
    assert "language_persistent" not in batch and "language_events" not in batch
    assert batch["index"].tolist() == [0, 1]
    assert lerobot_collate_fn([None]) is None


def test_language_windows_refused(root):
    with pytest.raises(StreamingConfigError, match="cannot be stacked"):
        StreamingLeRobotDataset(root=root, delta_timestamps={"language_events": [0.0, 0.1]})


# --- camera_keys and refusals ------------------------------------------------------------------------
def test_camera_keys_select_video_and_image_keys(root):
    ds = StreamingLeRobotDataset(root=root, camera_keys=[WRIST[0], RGB[0]])
    assert ds.video_keys == [RGB[0]] and ds.image_keys == [WRIST[0]] and ds.depth_keys == []
    it = next(iter(ds))
    assert {RGB[0], WRIST[0]} <= set(it) and DEPTH[0] not in it and DIMG[0] not in it
    with pytest.raises(MetadataError, match="not camera keys"):
        StreamingLeRobotDataset(root=root, camera_keys=["observation.state"])


def test_window_on_camera_not_decoded_is_config_error(root):
    """Issue 17 item 4: camera_keys=[] with a window on a camera yielded <cam>_is_pad without it."""
    for cams, key in (([], RGB[0]), ([RGB[0]], WRIST[0]), ([WRIST[0]], DEPTH[0])):
        with pytest.raises(StreamingConfigError, match="does not decode"):
            StreamingLeRobotDataset(root=root, camera_keys=cams, delta_timestamps={key: [0.0]})
    ds = StreamingLeRobotDataset(root=root, camera_keys=[], delta_timestamps={"action": [0.0, 0.1]})
    it = next(iter(ds))
    assert "action_is_pad" in it and not any(k.startswith("observation.images") for k in it)


def test_bad_depth_output_unit(root):
    with pytest.raises(StreamingConfigError, match="depth_output_unit"):
        StreamingLeRobotDataset(root=root, depth_output_unit="cm")


def _copy_with_info(root: Path, tmp_path: Path, edit) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(root, out)
    info = json.loads((out / "meta" / "info.json").read_text())
    edit(info)
    (out / "meta" / "info.json").write_text(json.dumps(info))
    return out


def test_unsupported_depth_encoding_refused_at_construction(root, tmp_path):
    def edit(info):
        info["features"][DEPTH[0]]["info"]["video.pix_fmt"] = "yuv420p12le"

    bad = _copy_with_info(root, tmp_path, edit)
    with pytest.raises(MetadataError, match=r"depth camera 'observation.images.depth'.*yuv420p12le"):
        StreamingLeRobotDataset(root=bad)
    StreamingLeRobotDataset(root=bad, camera_keys=[RGB[0]])  # not selected: not refused


def test_invalid_quantiser_refused(root, tmp_path):
    def edit(info):
        info["features"][DEPTH[0]]["info"]["video.shift"] = -1.0

    with pytest.raises(MetadataError, match="invalid quantiser"):
        StreamingLeRobotDataset(root=_copy_with_info(root, tmp_path, edit))


def test_depth_stream_not_gray12_fails_at_decode(make_generated_dataset, tmp_path):
    """info.json claims gray12le but the stream is yuv420p12le: never a silently wrong depth."""
    src = Path(
        make_generated_dataset(
            episode_lengths=(3,), fps=FPS, cameras=(), depth_cameras=(DEPTH,), depth_pix_fmt="yuv420p12le"
        )
    )
    with pytest.raises(MetadataError, match="yuv420p12le"):
        StreamingLeRobotDataset(root=src)

    def edit(info):
        info["features"][DEPTH[0]]["info"]["video.pix_fmt"] = "gray12le"

    ds = StreamingLeRobotDataset(root=_copy_with_info(src, tmp_path, edit))
    with pytest.raises(DecodeError, match=r"camera 'observation.images.depth'.*decodes as 'yuv420p12le'"):
        list(ds)


# --- decoder and dequantiser units -------------------------------------------------------------------
def test_depth_decoder_random_access_matches_full_decode(root):
    import av

    from lerobotstream.mp4.parse import parse_mp4_bytes
    from lerobotstream.mp4.spans import plan_span
    from lerobotstream.mp4.synth import synthesize

    path = root / "videos" / DEPTH[0] / "chunk-000" / "file-000.mp4"
    data = path.read_bytes()
    table = parse_mp4_bytes(data)
    with av.open(str(path)) as c:
        full = {int(fr.pts): fr.to_ndarray(format="gray12le") for fr in c.decode(c.streams.video[0])}
    ref = [full[k] for k in sorted(full)]
    rng = np.random.default_rng(0)
    n = len(ref)
    for a, b in ((0, n), (LENGTHS[0], n), (3, 7)):
        span = plan_span(table, a, b)
        dec = DepthDecoder(synthesize(table, span, data[span.byte_start : span.byte_stop]), span, label="t")
        for trial in range(25):
            req = rng.integers(0, dec.num_frames, size=int(rng.integers(1, 7)))
            if trial % 2:
                req = np.sort(req)
            out = dec.decode(req)
            assert out.dtype == torch.int16 and out.shape[1] == 1
            for k, j in enumerate(req.tolist()):
                assert np.array_equal(out[k, 0].numpy().view(np.uint16), ref[span.frame_offset + j])
        dec.close()
        with pytest.raises(DecodeError, match="closed"):
            dec.decode([0])


@pytest.mark.parametrize("params", [(0.01, 10.0, 3.5, True), (0.2, 4.0, 0.0, True), (0.0, 5.0, 3.5, False)])
@pytest.mark.parametrize("unit", ["mm", "m"])
def test_dequantizer_lut_equals_formula(params, unit):
    dq = DepthDequantizer(*params, output_unit=unit)
    assert dq.exact_lut
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 65536, size=(3, 1, 37, 53)).astype(np.uint16)
    codes[0, 0, 0, :5] = [0, 4095, 4096, 65535, 1]
    views = list(torch.from_numpy(codes.view(np.int16)).unbind(0))
    want = lerobot_dequantize(codes, unit, *params)
    assert torch.equal(dq(views), want)
    assert torch.equal(dequantize_reference(torch.from_numpy(codes.astype(np.int32)), *params, output_unit=unit), want)
    dq.exact_lut = False  # the per-item fallback computes the same
    assert torch.equal(dq(views), want)


def test_depth_on_cuda_request_is_a_counted_cpu_fallback(root):
    """NVDEC/torchcodec give 8-bit RGB only: a depth camera asked for on CUDA decodes on the CPU,
    counted and logged, never silently (unit-tested without a device)."""
    from lerobotstream.decode._cuda import FallbackStatus
    from lerobotstream.decode._decoder import EpisodeVideo
    from lerobotstream.mp4.parse import parse_mp4_bytes
    from lerobotstream.mp4.spans import plan_span
    from lerobotstream.mp4.synth import synthesize

    path = root / "videos" / DEPTH[0] / "chunk-000" / "file-000.mp4"
    data = path.read_bytes()
    table = parse_mp4_bytes(data)
    span = plan_span(table, 0, 4)
    status = FallbackStatus()
    video = EpisodeVideo(
        table,
        span,
        synthesize(table, span, data[span.byte_start : span.byte_stop]),
        episode_index=0,
        camera=DEPTH[0],
        path=str(path),
        from_timestamp=0.0,
        fps=FPS,
        device="cuda",
        status=status,
        depth=True,
    )
    assert status.fallback_count == 1 and "depth video" in status.last_reason
    codes = video.frames_at([0, 3])
    assert codes.dtype == torch.int16 and codes.device.type == "cpu" and codes.shape == (2, 1, DEPTH[2], DEPTH[1])
    want = np.stack([expected_depth_codes(0, i, CAM_INDEX[DEPTH[0]], DEPTH[2], DEPTH[1]) for i in (0, 3)])
    assert np.array_equal(codes[:, 0].numpy().view(np.uint16), want)


def test_pytorch_docs_collates_and_language_columns(root):
    """docs/pytorch.md's collate table and its ``collate_with_language``, run as written:
    ``default_collate`` raises torch's TypeError on the language cells, ``lerobot_collate_fn``
    drops them, the docs' function keeps them as one list per sample beside the same tensors."""
    import re

    from torch.utils.data import DataLoader, default_collate

    doc = (Path(__file__).resolve().parents[2] / "docs" / "pytorch.md").read_text()
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "def collate_with_language" in b]
    scope: dict = {}
    exec(code, scope)
    collate_with_language = scope["collate_with_language"]
    items = _items(root, camera_keys=[])
    batch = [items[0], None, items[1]]
    with pytest.raises(TypeError, match="NoneType"):
        default_collate([items[0], items[1]])
    ours = collate_with_language(batch)
    theirs = lerobot_collate_fn(batch)
    assert set(ours) == set(theirs) | {"language_persistent", "language_events"}
    assert all(torch.equal(ours[k], v) for k, v in theirs.items() if isinstance(v, torch.Tensor))
    assert ours["language_events"] == [items[0]["language_events"], items[1]["language_events"]]
    assert collate_with_language([None]) is None
    ds = StreamingLeRobotDataset(root=root, camera_keys=[], episodes=[0])
    (first, *_) = DataLoader(ds, batch_size=4, num_workers=0, collate_fn=collate_with_language)
    assert len(first["language_persistent"]) == 4 and first["index"].shape == (4,)
